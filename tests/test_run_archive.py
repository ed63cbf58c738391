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



def test_archive_all_takes_every_study_of_the_run_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))
    _finished_run("base")
    cached("other_study", {"stage": "x"}, lambda run: {"loss": 3.0})
    (tmp_path / "runs" / "notebooks").mkdir()  # executed notebooks and corpus caches are not studies
    (tmp_path / "runs" / "cache" / "tokens").mkdir(parents=True)
    assert main(["runs", "archive", "--all", str(tmp_path / "archive"), "--weights", "none"]) == 0
    out = capsys.readouterr().out
    assert "1 finished run(s) of other_study" in out and "1 finished run(s) of study" in out
    assert sorted(p.name for p in (tmp_path / "archive").iterdir()) == ["other_study", "study"]
    assert main(["runs", "archive", str(tmp_path / "archive")]) == 2  # neither a study nor --all
    assert main(["runs", "archive", "--all", "study", str(tmp_path / "archive")]) == 2
    assert "not both" in capsys.readouterr().err


def test_an_unfinished_run_travels_with_its_latest_and_kept_checkpoints_and_resumes(tmp_path, monkeypatch):
    """``unfinished=True``: the run's newest checkpoint is archived in full, its kept checkpoints so far with
    their weights only; restored elsewhere, training resumes there, ends with the same weights as an
    uninterrupted run and still has the kept checkpoint it passed before the interruption. Finished, the run
    carries its kept checkpoints (weights only) when its weights are selected, none otherwise."""
    import torch
    from safetensors.torch import load_file

    from lmstudy.checkpoints import kept_checkpoint, latest_checkpoint
    from lmstudy.lm_batches import LMTask
    from lmstudy.training import TrainConfig, train

    def task():
        ids = torch.arange(3000) % 37
        return LMTask(ids, ids[:200], batch_size=4, seq_len=8, seed=1)

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Embedding(37, 8), torch.nn.Linear(8, 37))

    class Wrapped(torch.nn.Module):  # LMTask calls model(input_ids=x)
        def __init__(self):
            super().__init__()
            self.net = model()

        def forward(self, input_ids):
            return self.net(input_ids)

    full = TrainConfig(max_steps=20, checkpoint_every=5, keep_checkpoints=(5,), log_every=5)
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "reference"))
    reference = Wrapped()
    train(reference, task(), full, get_run("long", {"run": 1}))

    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "machine1"))
    run = get_run("long", {"run": 1})
    # Stop after 10 steps: a run cut off by the end of a session (same TrainConfig, killed at step 10).
    stopped = CountingStop(task(), stop_after=10)
    with pytest.raises(KeyboardInterrupt):
        train(Wrapped(), stopped, full, run)
    assert latest_checkpoint(run).name == "step-000000010"
    assert archive_runs("long", tmp_path / "archive") == []  # unfinished runs need the flag
    assert archive_runs("long", tmp_path / "archive", unfinished=True) == [run.hash]
    carried = tmp_path / "archive" / "long" / run.hash / "checkpoint"
    assert sorted(p.name for p in carried.iterdir()) == ["step-000000005", "step-000000010"]  # kept + newest
    assert sorted(p.name for p in (carried / "step-000000005").iterdir()) == ["model.safetensors", "state.json"]
    assert (carried / "step-000000010" / "state.safetensors").is_file()  # the newest: optimizer state too

    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "machine2"))
    assert restore_runs(tmp_path / "archive") == [f"long/{run.hash}"]
    assert restore_runs(tmp_path / "archive") == []  # as far along already: nothing copied
    resumed = Wrapped()
    resumed_run = get_run("long", {"run": 1})
    train(resumed, task(), full, resumed_run)
    for name, tensor in reference.state_dict().items():
        assert torch.allclose(resumed.state_dict()[name], tensor, atol=1e-6), name
    reference_kept = load_file(str(tmp_path / "reference" / "long" / run.hash / "checkpoint" / "step-000000005"
                                   / "model.safetensors"))
    resumed_kept = load_file(str(kept_checkpoint(resumed_run, 5) / "model.safetensors"))
    assert reference_kept.keys() == resumed_kept.keys()
    assert all(torch.equal(reference_kept[k], resumed_kept[k]) for k in reference_kept)

    (resumed_run.path / "metrics.json").write_text("{}", encoding="utf-8")  # finished (as cached() marks it)
    assert archive_runs("long", tmp_path / "finished", weights="none") == [run.hash]
    assert not (tmp_path / "finished" / "long" / run.hash / "checkpoint").exists()
    assert archive_runs("long", tmp_path / "with_weights", weights="all") == [run.hash]
    carried = tmp_path / "with_weights" / "long" / run.hash / "checkpoint"
    assert sorted(p.name for p in carried.iterdir()) == ["step-000000005"]  # kept, not the final step 20


class CountingStop:
    """A wrapper of a task that raises KeyboardInterrupt on loss call ``stop_after + 1`` and otherwise behaves as
    the task (every other hook is the wrapped task's)."""

    def __init__(self, inner, stop_after: int):
        self.inner, self.stop_after, self.calls = inner, stop_after, 0

    def __getattr__(self, name):  # hooks and attributes other than loss: the wrapped task's
        return getattr(self.inner, name)

    def loss(self, model, batch):
        self.calls += 1
        if self.calls > self.stop_after:
            raise KeyboardInterrupt("end of the session")
        return self.inner.loss(model, batch)
