"""Several processes and gradient accumulation in the one training loop (lmstudy.training).

The same tiny run of each study's task kind (tests/train_multi.py: an LSTM on ``LMTask``, AWD-LSTM, GPT2E on
``EntityLMTask``) with one global batch, trained whole, in accumulation parts, and by two gloo processes
under ``accelerate launch``, must give the same losses; a two-process run killed mid-way resumes to the
metrics of an uninterrupted one.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lmstudy.paths import REPO_ROOT
from lmstudy.runs import read_log_records, runs_dir
from lmstudy.training import TrainConfig, TrainTask, split_batch

sys.path.insert(0, str(Path(__file__).parent))
import train_multi  # noqa: E402  (also pins torch to 1 thread)

TRAIN_MULTI = Path(__file__).with_name("train_multi.py")
SHARED_CACHE = runs_dir() / "cache"  # the normalised corpora of the real run cache (read before runs_in_tmp)


@pytest.fixture(autouse=True)
def runs_in_tmp(tmp_path, monkeypatch):
    """train_multi.main sets LMSTUDY_RUNS and RANK is the launcher's: both are restored after each test."""
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))
    monkeypatch.delenv("RANK", raising=False)


def run_dir(runs_dir: Path, kind: str) -> Path:
    (path,) = (runs_dir / f"multi-{kind}").iterdir()
    return path


def train_losses(records: list[dict]) -> list[float]:
    return [r["loss"] for r in records if r["kind"] == "train"]


def numbers(record: dict) -> dict:
    """The numeric values of a log record or metrics (booleans and wall-clock time aside)."""
    return {k: v for k, v in record.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "train_s"}


def assert_close_runs(a: Path, b: Path, rel: float) -> None:
    """Same steps logged once each, same losses, evaluations and final metrics within ``rel``."""
    records_a, records_b = read_log_records(a / "log.jsonl"), read_log_records(b / "log.jsonl")
    for kind in ("train", "eval"):
        steps_a = [r["step"] for r in records_a if r["kind"] == kind]
        assert steps_a == sorted(set(steps_a)) and steps_a == [r["step"] for r in records_b if r["kind"] == kind]
    assert train_losses(records_a) == pytest.approx(train_losses(records_b), rel=rel)
    evals_a = [r for r in records_a if r["kind"] == "eval"]
    evals_b = [r for r in records_b if r["kind"] == "eval"]
    for eval_a, eval_b in zip(evals_a, evals_b):
        assert numbers(eval_a) == pytest.approx(numbers(eval_b), rel=rel)
    metrics_a = json.loads((a / "metrics.json").read_text())
    metrics_b = json.loads((b / "metrics.json").read_text())
    assert metrics_a.keys() == metrics_b.keys()
    assert numbers(metrics_a) == pytest.approx(numbers(metrics_b), rel=rel)


# --------------------------------------------------------------------------------------------
# one process


def test_split_batch_cuts_every_tensor_of_tuples_dicts_and_dataclasses_along_rows():
    from lmstudy.entity.data import EntityBatch

    x = torch.arange(24).view(8, 3)
    parts = split_batch((x, {"y": x + 1, "name": "shared"}), 4)
    assert len(parts) == 4 and torch.equal(parts[1][0], x[2:4]) and torch.equal(parts[3][1]["y"], x[6:8] + 1)
    assert parts[2][1]["name"] == "shared"
    batch = EntityBatch(x, x, x, torch.ones(8, dtype=torch.bool))
    (first, second) = split_batch(batch, 2)
    assert isinstance(second, EntityBatch) and torch.equal(second.targets, x[4:]) and second.new_document.shape == (4,)
    assert split_batch(batch, 1)[0] is batch
    with pytest.raises(ValueError, match="batch of 8 rows cannot be cut into 3 equal parts.*multiple of 3"):
        split_batch(x, 3)


def test_grad_accum_steps_is_checked():
    with pytest.raises(ValueError, match="grad_accum_steps must be a positive integer"):
        TrainConfig(max_steps=1, grad_accum_steps=0)


@pytest.mark.parametrize("kind", train_multi.KINDS)
def test_gradient_accumulation_gives_the_losses_of_the_whole_batch(kind, tmp_path, monkeypatch):
    """Batch 8 in 4 accumulation parts of 2 rows = batch 8 at once (a padded GPT2E part counts by its tokens)."""
    whole = train_multi.main(kind, str(tmp_path / "whole"), batch=8, accum=1, steps=8)
    parts = train_multi.main(kind, str(tmp_path / "parts"), batch=8, accum=4, steps=8)
    assert whole["steps"] == parts["steps"] == 8
    assert_close_runs(run_dir(tmp_path / "whole", kind), run_dir(tmp_path / "parts", kind), rel=1e-5)


def test_parts_of_a_batch_count_by_their_weight_and_the_lr_is_set_once_per_step(tmp_path, monkeypatch):
    """A task whose parts hold different token counts: the scaled part losses average to the batch's loss;
    ``batch_lr`` sees the whole batch once per step."""
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))
    from lmstudy.runs import get_run
    from lmstudy.training import train

    seen_rows = []

    class Weighted(TrainTask):
        def batches(self, epoch):
            generator = torch.Generator().manual_seed(epoch)
            return [(torch.randn(4, 3, generator=generator), torch.tensor([3.0, 1.0, 0.0, 2.0]))] * 2

        def loss(self, model, batch):
            x, weight = batch
            per_row = (model(x).squeeze(-1) - 1.0) ** 2 * weight
            return per_row.sum() / weight.sum().clamp(min=1)

        def batch_weight(self, batch):
            return float(batch[1].sum())

        def batch_lr(self, lr, batch):
            seen_rows.append(batch[0].size(0))
            return lr

        def evaluate(self, model):
            return {"val_loss": 0.0}

    def fit(accum):
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        config = TrainConfig(max_steps=4, lr=0.1, log_every=1, grad_accum_steps=accum, grad_clip=None)
        train(model, Weighted(), config, get_run(f"weighted-{accum}", {"train": config}))
        return model.weight.detach().clone(), train_losses(read_log_records(get_run(f"weighted-{accum}", {
            "train": config}).log_path))

    (weight_whole, losses_whole), (weight_parts, losses_parts) = fit(1), fit(2)
    assert seen_rows == [4] * 16  # the whole batch, once per step and parameter group (2 runs x 4 steps x 2)
    assert losses_parts == pytest.approx(losses_whole, rel=1e-6)
    assert torch.allclose(weight_parts, weight_whole, rtol=1e-6, atol=1e-7)


def test_the_run_cache_writes_from_the_main_process_only(tmp_path, monkeypatch):
    """Process 1 of a launch runs the function (it trains too) but writes neither config.json nor metrics.json."""
    from lmstudy.runs import cached, get_run

    monkeypatch.setenv("RANK", "1")  # WORLD_SIZE stays unset: no barrier to wait at
    calls = []
    assert cached("ranks", {"a": 1}, lambda run: calls.append(run) or {"loss": 1.0}) is None
    run = calls[0]
    assert not (run.path / "config.json").exists() and not run.done
    monkeypatch.setenv("RANK", "0")
    assert cached("ranks", {"a": 1}, lambda run: {"loss": 1.0}) == {"loss": 1.0}
    assert (run.path / "config.json").exists() and get_run("ranks", {"a": 1}).done


# --------------------------------------------------------------------------------------------
# two processes (gloo on CPU) under accelerate launch

LAUNCH = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
          "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]


def free_port() -> int:
    """A free TCP port for the launch's rendezvous (two launches at once must not share one)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch_env() -> dict:
    return {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1",
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}


def launch(kind: str, runs_dir: Path, *args: str, script: Path = TRAIN_MULTI) -> subprocess.Popen:
    """Two processes of ``script`` (train_multi.py) under accelerate launch (gloo on CPU)."""
    command = [*LAUNCH, "--main_process_port", str(free_port()), str(script), *filter(None, [kind]), str(runs_dir),
               *args]
    return subprocess.Popen(command, env=launch_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def finish(process: subprocess.Popen, timeout: float = 300) -> str:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err[-4000:]
    return out


@pytest.mark.slow
def test_two_processes_give_the_losses_of_one_with_the_same_global_batch(tmp_path):
    """Each kind, global batch 8: two processes x two accumulation parts of 2 rows = one process, whole batch."""
    two = launch("all", tmp_path / "two", "--accum", "2")  # lstm, awd, gpt2e one after the other
    ones = {kind: train_multi.main(kind, str(tmp_path / "one"), batch=8, accum=1) for kind in train_multi.KINDS}
    out = finish(two)
    printed = [json.loads(line) for line in out.strip().splitlines()]  # printed once, by the main process
    assert [m.pop("kind") for m in printed] == list(train_multi.KINDS)
    for kind, metrics in zip(train_multi.KINDS, printed):
        one = ones[kind]
        assert numbers(metrics) == pytest.approx(numbers(one), rel=1e-5), kind
        two_run = run_dir(tmp_path / "two", kind)
        assert_close_runs(two_run, run_dir(tmp_path / "one", kind), rel=1e-5)
        # Logged once (assert_close_runs: each step once), checkpointed once: one folder, no temp folders.
        assert [p.name for p in (two_run / "checkpoint").iterdir()] == ["step-000000012"], kind
        state = json.loads((two_run / "checkpoint" / "step-000000012" / "state.json").read_text())
        assert state["processes"] == 2 and len(state["other_ranks"]) == 1
    # NT-ASGD switched in both, at the same evaluation (the logs' "averaged" agree above).
    assert ones["awd"]["averaged"] == 1.0


@pytest.mark.slow
def test_a_killed_process_of_two_resumes_to_the_metrics_of_an_uninterrupted_run(tmp_path):
    """SIGKILL one of two processes mid-run (dropout on: each process's RNG state matters); one process refuses
    the two-process checkpoint; launched again, the two end as an uninterrupted run does."""
    args = ("--steps", "60", "--checkpoint-every", "10", "--dropout")
    reference = launch("lstm", tmp_path / "reference", *args)
    victim = launch("lstm", tmp_path / "killed", *args)
    try:
        deadline = time.monotonic() + 240
        while True:
            assert victim.poll() is None, f"training ended before it was killed:\n{victim.communicate()[1][-4000:]}"
            assert time.monotonic() < deadline, "no checkpoint appeared within 240 s"
            logs = list((tmp_path / "killed").glob("multi-lstm/*/log.jsonl"))
            if logs and list(logs[0].parent.glob("checkpoint/step-*")):
                steps = [r["step"] for r in read_log_records(logs[0])]
                if steps and steps[-1] > 10:
                    break
            time.sleep(0.02)
        os.kill(int((tmp_path / "killed" / "pid-1").read_text()), signal.SIGKILL)  # the second process only
        victim.communicate(timeout=120)
    finally:
        if victim.poll() is None:
            os.killpg(victim.pid, signal.SIGKILL)
    assert victim.returncode != 0  # the launcher ends the job when one process dies
    killed_run = logs[0].parent
    assert not (killed_run / "metrics.json").exists()
    assert read_log_records(killed_run / "log.jsonl")[-1]["step"] < 60
    with pytest.raises(ValueError, match="written by 2 process.*this is 1: resume it with 2"):
        train_multi.main("lstm", str(tmp_path / "killed"), steps=60, checkpoint_every=10, dropout=True)

    resumed = json.loads(finish(launch("lstm", tmp_path / "killed", *args)))
    expected = json.loads(finish(reference))
    assert resumed["steps"] == 60
    for key, value in expected.items():
        assert resumed[key] == value or math.isclose(resumed[key], value, rel_tol=0, abs_tol=1e-6), key
    records = read_log_records(killed_run / "log.jsonl")
    reference_records = read_log_records(run_dir(tmp_path / "reference", "lstm") / "log.jsonl")
    assert [r["kind"] for r in records] == [r["kind"] for r in reference_records]
    for record, reference_record in zip(records, reference_records):
        assert numbers(record) == pytest.approx(numbers(reference_record), rel=0, abs=1e-6)


@pytest.mark.slow
def test_the_base_data_is_prepared_once_under_two_processes(tmp_path):
    """The smoke shared base under accelerate launch: the main process writes the data streams, the other finds
    them done (without main_process_first both wrote the same files at once), and both train on the same ones."""
    (tmp_path / "runs").mkdir()
    SHARED_CACHE.mkdir(parents=True, exist_ok=True)  # as in tests/test_base.py
    (tmp_path / "runs" / "cache").symlink_to(SHARED_CACHE, target_is_directory=True)
    out = finish(launch("", tmp_path / "runs", script=Path(__file__).parent / "prepare_multi.py"))
    ranks = sorted((json.loads(line) for line in out.strip().splitlines()), key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1]
    # The data step's barrier comes first: made without ACCELERATE_USE_CPU, accelerate's state said one process,
    # the barriers did nothing and each process trained the base alone.
    assert [r["processes"] for r in ranks] == [2, 2]
    assert [r["writes"] for r in ranks] == [1, 0]
    assert ranks[0]["train_sha"] == ranks[1]["train_sha"]
    assert ranks[0]["val_loss"] == ranks[1]["val_loss"]  # the main process's metrics, read back by both
