"""The run cache: config hashing, cached(), atomic writes, list_runs."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lmstudy import runs
from lmstudy.runs import (
    atomic_write_json,
    atomic_write_text,
    cached,
    canonical_json,
    config_hash,
    get_run,
    list_runs,
)


@pytest.fixture(autouse=True)
def runs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))
    return tmp_path / "runs"


@dataclass
class Inner:
    lr: float = 0.001
    betas: tuple = (0.9, 0.95)


@dataclass
class Outer:
    name: str = "tiny"
    layers: int = 2
    train: Inner = field(default_factory=Inner)


def test_hash_ignores_key_order_and_matches_dataclass_form():
    a = {"name": "tiny", "layers": 2, "train": {"lr": 0.001, "betas": [0.9, 0.95]}}
    b = {"train": {"betas": [0.9, 0.95], "lr": 0.001}, "layers": 2, "name": "tiny"}
    assert config_hash(a) == config_hash(b)
    assert config_hash(Outer()) == config_hash(a)  # asdict + tuples as lists
    assert len(config_hash(a)) == runs.HASH_LENGTH
    assert all(c in "0123456789abcdef" for c in config_hash(a))


def test_hash_differs_for_different_configs():
    base = Outer()
    hashes = {
        config_hash(base),
        config_hash(Outer(layers=3)),
        config_hash(Outer(train=Inner(lr=0.002))),
        config_hash(Outer(train=Inner(lr=0.0010000000000000002))),  # next float: repr keeps it
        config_hash({**canonical_dict(base), "extra": None}),
    }
    assert len(hashes) == 5


def canonical_dict(config) -> dict:
    return json.loads(canonical_json(config))


def test_canonical_json_is_stable_and_rejects_what_json_cannot_keep():
    assert canonical_json({"b": 0.1, "a": Path("x/y")}) == '{"a":"x/y","b":0.1}'
    with pytest.raises(ValueError, match="NaN"):
        canonical_json({"lr": float("nan")})
    with pytest.raises(TypeError, match="set"):
        canonical_json({"codes": {"a", "b"}})


def test_get_run_writes_config_and_finds_the_same_folder(runs_in_tmp):
    run = get_run("study1", Outer())
    assert run.path == runs_in_tmp / "study1" / run.hash
    assert json.loads((run.path / "config.json").read_text()) == run.config
    assert not run.done and run.metrics is None
    assert get_run("study1", canonical_dict(Outer())).path == run.path
    with pytest.raises(ValueError, match="study name"):
        get_run("../escape", Outer())


def test_cached_computes_once_and_returns_saved_metrics():
    calls = []

    def fn(run):
        calls.append(run.hash)
        assert run.path.is_dir()
        return {"val_loss": 1.5, "steps": 10}

    first = cached("study1", Outer(), fn)
    second = cached("study1", Outer(), fn)
    assert first == second == {"val_loss": 1.5, "steps": 10}
    assert len(calls) == 1
    cached("study1", Outer(layers=5), fn)  # another config is another run
    assert len(calls) == 2


def test_cached_marks_nothing_done_when_fn_fails():
    def broken(run):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        cached("study1", Outer(), broken)
    run = get_run("study1", Outer())
    assert not run.done
    assert cached("study1", Outer(), lambda run: {"ok": 1}) == {"ok": 1}
    assert run.done


def _slow_counted_run(started, calls_file):
    def fn(run):
        with open(calls_file, "a") as calls:
            calls.write(f"{os.getpid()}\n")
        started.set()
        time.sleep(1.0)  # long enough for the second process to ask for the same run meanwhile
        return {"pid": os.getpid()}

    return cached("study1", Outer(), fn)


def test_a_second_process_waits_for_a_run_in_progress_instead_of_running_it_again(tmp_path):
    """Two processes sharing a run cache (a notebook and a worker script): the run is computed once, the second
    process returns the first one's saved metrics."""
    ctx = multiprocessing.get_context("fork")
    started, calls_file = ctx.Event(), tmp_path / "calls.txt"
    first = ctx.Process(target=_slow_counted_run, args=(started, calls_file))
    first.start()
    assert started.wait(30)
    metrics = _slow_counted_run(ctx.Event(), calls_file)  # asks while the first one is inside its run
    first.join(30)
    assert first.exitcode == 0
    assert calls_file.read_text().split() == [str(first.pid)]
    assert metrics == {"pid": first.pid}


def test_a_run_whose_process_died_is_run_by_the_next_one_to_ask(tmp_path):
    ctx = multiprocessing.get_context("fork")
    started, calls_file = ctx.Event(), tmp_path / "calls.txt"
    killed = ctx.Process(target=_slow_counted_run, args=(started, calls_file))
    killed.start()
    assert started.wait(30)
    killed.kill()  # the OS drops its lock
    killed.join(30)
    metrics = _slow_counted_run(ctx.Event(), calls_file)
    assert metrics == {"pid": os.getpid()}
    assert calls_file.read_text().split() == [str(killed.pid), str(os.getpid())]


def test_atomic_write_keeps_old_file_when_serialisation_fails(tmp_path):
    target = tmp_path / "metrics.json"
    atomic_write_json(target, {"a": 1})
    with pytest.raises(TypeError):
        atomic_write_json(target, {"a": object()})
    assert json.loads(target.read_text()) == {"a": 1}
    assert sorted(os.listdir(tmp_path)) == ["metrics.json"]


def test_atomic_write_leaves_no_partial_file_when_replace_fails(tmp_path, monkeypatch):
    target = tmp_path / "notes.txt"
    atomic_write_text(target, "old")

    def failing_replace(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(runs.os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk gone"):
        atomic_write_text(target, "new " * 1000)
    assert target.read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]  # the temp file was removed


def test_list_runs_flattens_configs_and_metrics():
    cached("grid", Outer(layers=1), lambda run: {"val_loss": 2.0, "layers": 99})
    cached("grid", Outer(layers=2), lambda run: {"val_loss": 1.0})
    get_run("grid", Outer(layers=3))  # started, not finished
    frame = list_runs("grid").sort_values("layers").reset_index(drop=True)
    assert list(frame["layers"]) == [1, 2, 3]
    assert list(frame["done"]) == [True, True, False]
    assert frame.loc[0, "train.lr"] == 0.001
    assert list(frame["val_loss"][:2]) == [2.0, 1.0] and frame["val_loss"].isna()[2]
    assert frame.loc[0, "metrics.layers"] == 99  # a metric named like a config field is kept apart
    assert list_runs("no_such_study").empty
