"""Archiving finished runs and restoring them on another machine (lmstudy.run_archive)."""

from __future__ import annotations

import pytest

from lmstudy.__main__ import main
from lmstudy.run_archive import archive_runs, restore_runs
from lmstudy.runs import cached, get_run


def _finished_run(stage: str) -> str:
    def fn(run):
        (run.path / "best").mkdir()
        (run.path / "best" / "model.safetensors").write_bytes(b"weights of " + stage.encode())
        (run.path / "checkpoint").mkdir()
        (run.path / "checkpoint" / "optimizer.safetensors").write_bytes(b"state")
        run.log_path.write_text('{"kind": "train", "step": 1}\n', encoding="utf-8")
        return {"loss": 1.0 if stage == "base" else 2.0}

    cached("study", {"stage": stage}, fn)
    return get_run("study", {"stage": stage}).hash


def test_archive_then_restore_on_a_fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "machine1"))
    base, other = _finished_run("base"), _finished_run("compressed")
    get_run("study", {"stage": "unfinished"})  # no metrics: not archived
    archived = archive_runs("study", tmp_path / "archive", weights="stage=base")
    assert sorted(archived) == sorted([base, other])
    kept = tmp_path / "archive" / "study"
    assert (kept / base / "best" / "model.safetensors").read_bytes() == b"weights of base"
    assert not (kept / other / "best").exists()  # weights only where the selector matches
    assert not (kept / base / "checkpoint").exists()  # never the optimizer state
    assert (kept / other / "log.jsonl").is_file() and (kept / other / "metrics.json").is_file()

    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "machine2"))
    assert sorted(restore_runs(tmp_path / "archive")) == sorted([f"study/{base}", f"study/{other}"])
    calls = []
    assert cached("study", {"stage": "base"}, lambda run: calls.append(run) or {}) == {"loss": 1.0}
    assert calls == []  # the restored run counts as done: nothing recomputed
    assert get_run("study", {"stage": "base"}).best_dir.joinpath("model.safetensors").is_file()
    assert restore_runs(tmp_path / "archive") == []  # already there: nothing copied twice


def test_archive_errors_and_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))
    with pytest.raises(FileNotFoundError, match="no runs of study"):
        archive_runs("study", tmp_path / "archive")
    _finished_run("base")
    with pytest.raises(ValueError, match="KEY=VALUE"):
        archive_runs("study", tmp_path / "archive", weights="base")
    assert main(["runs", "archive", "study", str(tmp_path / "archive"), "--weights", "none"]) == 0
    assert "archived 1 finished run(s)" in capsys.readouterr().out
    assert not (tmp_path / "archive" / "study" / get_run("study", {"stage": "base"}).hash / "best").exists()
    assert main(["runs", "restore", str(tmp_path / "missing")]) == 2
    assert "no run archive" in capsys.readouterr().err

