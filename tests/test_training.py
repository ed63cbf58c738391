"""The training loop and LM batching: learning, early stopping, exact resume, the kill test."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from lmstudy.lm_batches import (
    LMTask,
    batchify,
    epoch_generator,
    eval_windows,
    iter_bptt,
    random_windows,
)
from lmstudy.paths import REPO_ROOT
from lmstudy.runs import cached, get_run, read_log_records
from lmstudy.training import (
    TrainConfig, TrainTask, latest_checkpoint, load_weights, lr_multiplier, train, train_and_restore,
)

sys.path.insert(0, str(Path(__file__).parent))
from train_tiny import VOCAB, synthetic_stream  # noqa: E402  (also pins torch to 1 thread)

TRAIN_TINY = Path(__file__).with_name("train_tiny.py")


def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.1,
                        embd_pdrop=0.1, attn_pdrop=0.1, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)  # tied input/output embeddings, dropout on


@pytest.fixture(autouse=True)
def runs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))


def assert_same_metrics(a: dict, b: dict, tol: float = 1e-6) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], float):
            assert math.isclose(a[key], b[key], rel_tol=0, abs_tol=tol), key
        else:
            assert a[key] == b[key], key


def assert_same_logs(a: list[dict], b: list[dict]) -> None:
    """Same records, wall-clock time (``train_s``) aside."""
    assert len(a) == len(b) and len(a) > 0
    for record_a, record_b in zip(a, b):
        assert (record_a.get("kind") == "train") == ("train_s" in record_a)
        assert_same_metrics({k: v for k, v in record_a.items() if k != "train_s"},
                            {k: v for k, v in record_b.items() if k != "train_s"})


def assert_no_duplicate_steps(records: list[dict]) -> None:
    for kind in ("train", "eval"):
        steps = [r["step"] for r in records if r["kind"] == kind]
        assert steps == sorted(set(steps)), kind


# --------------------------------------------------------------------------------------------
# lm_batches


def test_batchify_and_bptt_windows_read_contiguous_streams():
    ids = torch.arange(103)
    data = batchify(ids, 4)  # (4, 25): the last 3 tokens dropped
    assert data.shape == (4, 25)
    assert torch.equal(data[1], torch.arange(25, 50))
    windows = list(iter_bptt(data, 10))
    assert [x.shape[1] for x, _ in windows] == [10, 10, 4]  # 24 targets per row
    for x, y in windows:
        assert torch.equal(y, x + 1)  # targets are the next tokens of the same row
    assert torch.equal(torch.cat([x for x, _ in windows], 1), data[:, :-1])


def test_random_windows_are_seeded_by_seed_and_epoch():
    ids = synthetic_stream(500, seed=3)

    def draw(seed, epoch):
        return list(random_windows(ids, 4, 8, 3, epoch_generator(seed, epoch)))

    first, again, other_epoch = draw(0, 0), draw(0, 0), draw(0, 1)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(first, again))
    assert not torch.equal(first[0][0], other_epoch[0][0])
    assert not torch.equal(draw(1, 0)[0][0], first[0][0])
    windows = ids.unfold(0, 9, 1)
    for x, y in first:
        assert x.shape == y.shape == (4, 8)
        for row_x, row_y in zip(x, y):  # each row is a real window of the stream, shifted by one
            full = torch.cat([row_x, row_y[-1:]])
            assert (windows == full).all(1).any()


@pytest.mark.parametrize("length", [50, 51, 57])
def test_eval_windows_predict_every_token_once(length):
    ids = torch.arange(length)
    batches = list(eval_windows(ids, seq_len=7, batch_size=3))
    targets = torch.cat([y.reshape(-1) for _, y in batches])
    assert torch.equal(targets, ids[1:])
    for x, y in batches:
        assert torch.equal(y, x + 1)


def test_lm_task_names_bad_streams_and_accepts_any_integer_ids():
    with pytest.raises(ValueError, match="train_ids must be a 1-D tensor"):
        LMTask(torch.zeros(4, 100, dtype=torch.long), torch.arange(10), batch_size=2, seq_len=8)
    with pytest.raises(ValueError, match="valid_ids must hold integer token ids"):
        LMTask(torch.arange(100), torch.rand(10), batch_size=2, seq_len=8)
    with pytest.raises(ValueError, match="train_ids has 5 tokens"):
        LMTask(torch.arange(5), torch.arange(10), batch_size=2, seq_len=8)
    task = LMTask(torch.arange(100, dtype=torch.int32), torch.arange(10, dtype=torch.int16), batch_size=2, seq_len=8)
    x, y = next(iter(task.batches(0)))
    assert x.dtype == y.dtype == torch.int64 and x.shape == (2, 8)


def test_lr_schedule_warms_up_then_decays_to_min():
    config = TrainConfig(max_steps=100, lr_schedule="cosine", warmup_steps=10, min_lr_ratio=0.1)
    factors = [lr_multiplier(step, config) for step in range(100)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(factors[10:], factors[11:]))
    assert factors[-1] == pytest.approx(0.1, abs=1e-3)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "max_steps or max_epochs"),
        ({"max_steps": 10, "optimizer": "adam"}, "'adam'"),
        ({"max_epochs": 2, "lr_schedule": "cosine"}, "max_steps"),
        ({"max_steps": 10, "early_stopping_patience": 2}, "eval_every"),
        ({"max_steps": 0}, "max_steps"),
    ],
)
def test_bad_train_config_is_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**kwargs)


# --------------------------------------------------------------------------------------------
# training


def tiny_lm_task(**overrides) -> LMTask:
    data = synthetic_stream(4000, seed=0)
    settings = dict(batch_size=8, seq_len=16, batches_per_epoch=30, seed=7)
    settings.update(overrides)
    return LMTask(data[:3500], data[3500:], **settings)


class CountingTask(TrainTask):
    """Wraps a task: counts loss calls and can raise once at a given call (a crash mid-run)."""

    def __init__(self, inner: TrainTask, crash_at_call: int | None = None):
        self.inner, self.crash_at_call, self.calls = inner, crash_at_call, 0
        self.stateful = inner.stateful

    def batches(self, epoch):
        return self.inner.batches(epoch)

    def loss(self, model, batch, *carry):
        self.calls += 1
        if self.calls == self.crash_at_call:
            raise KeyboardInterrupt("simulated crash")
        return self.inner.loss(model, batch, *carry)

    def evaluate(self, model):
        return self.inner.evaluate(model)

    def on_eval(self, state, metrics, optimizer):
        return self.inner.on_eval(state, metrics, optimizer)


def test_loss_decreases_and_cached_training_is_not_repeated():
    task = CountingTask(tiny_lm_task(sampling="contiguous"))
    torch.manual_seed(0)
    before = task.evaluate(tiny_gpt2().eval())["val_loss"]
    config = TrainConfig(max_steps=60, lr=3e-3, eval_every=30, log_every=10)

    def fit(run):
        torch.manual_seed(0)
        return train(tiny_gpt2(), task, config, run)

    metrics = cached("tiny", {"train": config}, fit)
    assert metrics["steps"] == 60 and metrics["epochs"] >= 1
    assert metrics["val_loss"] < 0.6 * before  # log(48) = 3.87 at the start
    assert metrics["val_ppl"] == pytest.approx(math.exp(metrics["val_loss"]))
    records = read_log_records(get_run("tiny", {"train": config}).log_path)
    losses = [r["loss"] for r in records if r["kind"] == "train"]
    assert [r["step"] for r in records if r["kind"] == "train"] == [10, 20, 30, 40, 50, 60]
    assert losses[-1] < losses[0]

    calls = task.calls
    assert cached("tiny", {"train": config}, fit) == metrics
    assert task.calls == calls  # the finished run was read back, not trained again


def test_a_finished_run_keeps_no_optimizer_state_and_reads_back_through_train(tmp_path):
    config = TrainConfig(max_steps=20, lr=3e-3, eval_every=10, checkpoint_every=10, keep_checkpoints=(10,))
    run = get_run("finished", {"train": config})
    task = CountingTask(tiny_lm_task())
    torch.manual_seed(0)
    metrics = train(tiny_gpt2(), task, config, run)
    final = latest_checkpoint(run)
    assert final.name == "step-000000020"
    assert json.loads((final / "state.json").read_text())["optimizer"] is None
    assert not any(key.startswith("optimizer") for key in load_file(str(final / "state.safetensors")))
    kept = json.loads((run.checkpoint_dir / "step-000000010" / "state.json").read_text())
    assert kept["optimizer"]["class"] == "AdamW"  # a checkpoint mid-run keeps it: training goes on from there

    calls = task.calls
    assert train(tiny_gpt2(), task, config, run) == metrics  # read back through train (a fresh optimizer) ...
    assert task.calls == calls  # ... without a step


class ScriptedValidationTask(TrainTask):
    """A linear model on random data whose validation losses are given in advance."""

    def __init__(self, val_losses: list[float]):
        self.val_losses, self.snapshots = val_losses, []

    def batches(self, epoch):
        generator = epoch_generator(0, epoch)
        return [torch.randn(4, 3, generator=generator) for _ in range(10)]

    def loss(self, model, batch):
        return (model(batch) - batch.sum(1, keepdim=True)).pow(2).mean()

    def evaluate(self, model):
        self.snapshots.append({k: v.clone() for k, v in model.state_dict().items()})
        return {"val_loss": self.val_losses[len(self.snapshots) - 1]}


def test_early_stopping_stops_and_keeps_the_best_weights():
    task = ScriptedValidationTask([3.0, 2.0, 2.5, 2.6, 2.7, 2.8, 2.9])
    config = TrainConfig(max_steps=100, eval_every=5, early_stopping_patience=2, lr=0.01)
    run = get_run("early", {"train": config})
    model = nn.Linear(3, 1)
    metrics = train(model, task, config, run)
    assert metrics["stopped_early"] is True
    assert metrics["steps"] == 20  # evals at 5, 10 (best), 15, 20: two without improvement
    assert metrics["best_step"] == 10 and metrics["best_val_loss"] == 2.0
    assert metrics["val_loss"] == 2.6
    best = load_weights(nn.Linear(3, 1), run, "best")
    assert all(torch.equal(best.state_dict()[k], task.snapshots[1][k]) for k in task.snapshots[1])
    last = load_weights(nn.Linear(3, 1), run, "last")
    assert torch.equal(last.weight, model.weight) and not torch.equal(last.weight, best.weight)

    # The finished run resumes as finished; another TrainConfig in the same run is refused.
    assert train(nn.Linear(3, 1), task, config, run) == metrics
    with pytest.raises(ValueError, match="another TrainConfig"):
        train(nn.Linear(3, 1), task, TrainConfig(max_steps=100, eval_every=5, lr=0.02), run)


class PhasedValidationTask(ScriptedValidationTask):
    """Evaluations without improvement count for early stopping only from the ``counts_from``-th evaluation on (as
    an AWD-LSTM's count only once NT-ASGD has switched)."""

    def __init__(self, val_losses: list[float], counts_from: int):
        super().__init__(val_losses)
        self.counts_from = counts_from

    def patience_counts(self) -> bool:
        return len(self.snapshots) >= self.counts_from


def test_early_stopping_counts_only_the_evaluations_the_task_lets_count():
    losses = [3.0, 2.0, 2.5, 2.6, 2.7, 2.8, 2.9, 3.0]
    config = TrainConfig(max_steps=100, eval_every=5, early_stopping_patience=2, lr=0.01)
    metrics = train(nn.Linear(3, 1), PhasedValidationTask(losses, counts_from=5), config,
                    get_run("phased", {"train": config}))
    # evals 3 and 4 (steps 15, 20) do not count; 5 and 6 (steps 25, 30) do: stopped at 30, not at 20
    assert metrics["stopped_early"] is True and metrics["steps"] == 30 and metrics["best_step"] == 10


def test_train_and_restore_leaves_the_best_weights_and_merges_their_evaluation():
    task = ScriptedValidationTask([3.0, 2.0, 2.5])
    config = TrainConfig(max_steps=15, eval_every=5, lr=0.01)
    model = nn.Linear(3, 1)
    metrics = train_and_restore(model, task, config, get_run("restore", {"train": config}),
                                evaluate=lambda m: {"test_weight": m.weight.sum().item(), "steps": -1})
    assert metrics["best_step"] == 10 and metrics["val_loss"] == 2.5
    assert all(torch.equal(model.state_dict()[k], task.snapshots[1][k]) for k in task.snapshots[1])
    assert metrics["test_weight"] == model.weight.sum().item()  # evaluated with the best weights
    assert metrics["steps"] == -1 and list(metrics)[-1] == "test_weight"  # merged over train's metrics

    # A run whose evaluations never report the early-stopping metric has no best weights: the last stay.
    config = TrainConfig(max_steps=10, eval_every=5, lr=0.01, early_stopping_metric="val_other")
    model = nn.Linear(3, 1)
    metrics = train_and_restore(model, ScriptedValidationTask([3.0, 2.0]), config, get_run("last", {"t": config}))
    assert "best_step" not in metrics
    assert torch.equal(model.weight, load_weights(nn.Linear(3, 1), get_run("last", {"t": config}), "last").weight)


def test_mixed_precision_can_change_between_runs_of_one_process():
    # accelerate keeps one precision per process; a notebook may train fp32 and then bf16 models.
    for precision in ("no", "bf16", "no"):
        config = TrainConfig(max_steps=3, mixed_precision=precision, lr=0.01)
        metrics = train(nn.Linear(3, 1), ScriptedValidationTask([1.0]), config, get_run(precision, {"t": config}))
        assert metrics["steps"] == 3


def test_a_model_trained_in_bf16_is_scored_in_full_precision_afterwards():
    # accelerate patches forward with autocast in place; train() must hand back the plain forward.
    torch.manual_seed(0)
    model = tiny_gpt2()
    config = TrainConfig(max_steps=2, mixed_precision="bf16", lr=1e-3)
    train(model, tiny_lm_task(), config, get_run("bf16", {"t": config}))
    fresh = tiny_gpt2()
    fresh.load_state_dict(model.state_dict())
    ids = torch.arange(16).view(1, 16) % 48
    with torch.no_grad():
        assert torch.equal(model.eval()(input_ids=ids).logits, fresh.eval()(input_ids=ids).logits)


def test_resume_after_a_crash_gives_identical_results():
    config = TrainConfig(max_steps=70, lr=3e-3, lr_schedule="cosine", warmup_steps=5, weight_decay=0.1,
                         eval_every=25, checkpoint_every=20, log_every=5, seed=3)

    def fit(study, task, init_seed=0):
        torch.manual_seed(init_seed)
        return train(tiny_gpt2(), task, config, get_run(study, {"train": config}))

    reference = fit("reference", tiny_lm_task())
    # Crash at the 47th batch: after the step-40 checkpoint, mid-epoch (30 batches per epoch).
    with pytest.raises(KeyboardInterrupt):
        fit("resumed", CountingTask(tiny_lm_task(), crash_at_call=47))
    run = get_run("resumed", {"train": config})
    assert latest_checkpoint(run).name == "step-000000040"
    assert max(r["step"] for r in read_log_records(run.log_path)) == 45  # logged past the checkpoint
    assert {p.suffix for p in latest_checkpoint(run).iterdir()} == {".json", ".safetensors"}

    resumed = fit("resumed", tiny_lm_task(), init_seed=99)  # weights come from the checkpoint
    assert_same_metrics(resumed, reference)
    records = read_log_records(run.log_path)
    assert_no_duplicate_steps(records)
    assert_same_logs(records, read_log_records(get_run("reference", {"train": config}).log_path))


class TinyLSTM(nn.Module):
    def __init__(self, vocab: int = VOCAB, size: int = 16):
        super().__init__()
        self.embed, self.drop = nn.Embedding(vocab, size), nn.Dropout(0.2)
        self.lstm, self.head = nn.LSTM(size, size, batch_first=True), nn.Linear(size, vocab)

    def forward(self, x, hidden=None):
        output, hidden = self.lstm(self.drop(self.embed(x)), hidden)  # (B, T, H)
        return self.head(self.drop(output)), hidden  # (B, T, V)


class StatefulStreamTask(TrainTask):
    """AWD-LSTM's two needs: hidden state carried across batches, and SGD -> ASGD at an eval."""

    stateful = True

    def __init__(self):
        data = synthetic_stream(400, seed=1)
        self.train_data, self.valid_data = batchify(data[:240], 4), batchify(data[240:], 2)  # (4, 60), (2, 80)

    def batches(self, epoch):
        return iter_bptt(self.train_data, 10)  # 6 windows per epoch

    def loss(self, model, batch, carry):
        x, y = batch
        logits, hidden = model(x, carry)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        return loss, {}, tuple(h.detach() for h in hidden)

    def evaluate(self, model):
        averaged = isinstance(self.optimizer, torch.optim.ASGD)
        if averaged:  # evaluate the running average of the weights, as awd-lstm-lm does
            current = [p.detach().clone() for p in model.parameters()]
            for p in model.parameters():
                p.data.copy_(self.optimizer.state[p]["ax"])
        hidden, total, count = None, 0.0, 0
        for x, y in iter_bptt(self.valid_data, 10):
            logits, hidden = model(x, hidden)
            total += F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), reduction="sum").item()
            count += y.numel()
        if averaged:
            for p, saved in zip(model.parameters(), current):
                p.data.copy_(saved)
        return {"val_loss": total / count}

    def on_eval(self, state, metrics, optimizer):
        # The decision reads the checkpointed history only (here: switch at the second evaluation).
        if isinstance(optimizer, torch.optim.SGD) and len(state.history) >= 2:
            params = [p for group in optimizer.param_groups for p in group["params"]]
            return torch.optim.ASGD(params, lr=optimizer.param_groups[0]["initial_lr"], t0=0, lambd=0.0)
        return None


def test_stateful_task_and_optimizer_switch_resume_exactly():
    config = TrainConfig(max_steps=40, optimizer="sgd", lr=0.5, grad_clip=0.25, eval_every=10,
                         checkpoint_every=7, log_every=1, seed=5)

    def fit(study, task, init_seed=0):
        torch.manual_seed(init_seed)
        return train(TinyLSTM(), task, config, get_run(study, {"train": config}))

    reference = fit("reference", StatefulStreamTask())
    # Crash at batch 26: resume from the step-21 checkpoint, 3 batches into epoch 3, after the switch.
    with pytest.raises(KeyboardInterrupt):
        fit("resumed", CountingTask(StatefulStreamTask(), crash_at_call=26))
    run = get_run("resumed", {"train": config})
    state = json.loads((latest_checkpoint(run) / "state.json").read_text())
    assert state["optimizer"]["class"] == "ASGD" and len(state["train_state"]["history"]) == 2
    assert state["train_state"]["batch_in_epoch"] == 3 and state["carry"] is not None

    resumed = fit("resumed", StatefulStreamTask(), init_seed=99)
    assert_same_metrics(resumed, reference)
    assert_same_logs(read_log_records(run.log_path),
                     read_log_records(get_run("reference", {"train": config}).log_path))


def test_killed_process_resumes_to_the_metrics_of_an_uninterrupted_run(tmp_path):
    """SIGKILL a training process mid-run, run it again, and compare with an uninterrupted run."""
    env = {**os.environ, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}

    def start(runs_dir: Path) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(TRAIN_TINY), str(runs_dir)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    killed_dir, reference_dir = tmp_path / "killed", tmp_path / "reference"
    reference = start(reference_dir)  # runs alongside: two cores
    victim = start(killed_dir)
    try:
        # Kill once the log shows a step after the first checkpoint (step 20): the resumed run
        # must then both reload the checkpoint and cut the log back to it.
        deadline = time.monotonic() + 180
        while True:
            assert victim.poll() is None, f"training ended before it was killed:\n{victim.communicate()[1]}"
            assert time.monotonic() < deadline, "no checkpoint appeared within 180 s"
            logs = list(killed_dir.glob("tiny/*/log.jsonl"))
            if logs and list(killed_dir.glob("tiny/*/checkpoint/step-*")):
                steps = [r["step"] for r in read_log_records(logs[0])]
                if steps and steps[-1] > 20:
                    break
            time.sleep(0.05)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
    finally:
        if victim.poll() is None:
            victim.kill()
    run_dir = logs[0].parent
    assert not (run_dir / "metrics.json").exists()

    completed = subprocess.run([sys.executable, str(TRAIN_TINY), str(killed_dir)], env=env,
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    out, err = reference.communicate(timeout=300)
    assert reference.returncode == 0, err

    resumed_metrics = json.loads((run_dir / "metrics.json").read_text())
    reference_metrics = json.loads(next(reference_dir.glob("tiny/*/metrics.json")).read_text())
    assert resumed_metrics["steps"] == 200
    assert_same_metrics(resumed_metrics, reference_metrics)
    assert json.loads(completed.stdout) == resumed_metrics
    records = read_log_records(run_dir / "log.jsonl")
    assert_no_duplicate_steps(records)
    assert_same_logs(records, read_log_records(next(reference_dir.glob("tiny/*/log.jsonl"))))


def test_keep_checkpoints_survive_later_checkpoints(tmp_path, monkeypatch):
    """Steps listed in TrainConfig.keep_checkpoints keep their folders; other checkpoints are replaced."""
    from lmstudy.runs import get_run
    from lmstudy.checkpoints import kept_checkpoint, latest_checkpoint

    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path))
    torch.manual_seed(0)
    config = TrainConfig(max_steps=12, checkpoint_every=4, keep_checkpoints=(3, 8), log_every=4)
    run = get_run("keep", {"test": 1})
    train(tiny_gpt2(), tiny_lm_task(), config, run)
    kept = sorted(p.name for p in run.checkpoint_dir.iterdir())
    assert kept == ["step-000000003", "step-000000008", "step-000000012"]
    assert latest_checkpoint(run).name == "step-000000012"
    assert kept_checkpoint(run, 3).name == "step-000000003"
    with pytest.raises(FileNotFoundError, match="no checkpoint at step 4"):
        kept_checkpoint(run, 4)


def test_train_seconds_add_up_over_a_resume(tmp_path):
    """``train_s`` in the log grows step by step and keeps counting after a resume."""
    config = TrainConfig(max_steps=20, checkpoint_every=10, log_every=5)
    run = get_run("timed", {"train": config})
    with pytest.raises(KeyboardInterrupt):
        train(tiny_gpt2(), CountingTask(tiny_lm_task(), crash_at_call=13), config, run)
    before = [r["train_s"] for r in read_log_records(run.log_path) if r["kind"] == "train"]
    train(tiny_gpt2(), tiny_lm_task(), config, run)
    seconds = [r["train_s"] for r in read_log_records(run.log_path) if r["kind"] == "train"]
    assert len(seconds) == 4 and seconds == sorted(seconds) and seconds[0] > 0
    assert seconds[:2] == before[:2]  # steps 5 and 10 come from the first process, kept by the checkpoint
    assert seconds[2] > seconds[1]  # the resumed process starts from the checkpoint's time, not zero


def _flatten_like_cudnn(lstm: nn.LSTM) -> None:
    """Make the LSTM's weights views into one flat buffer, as cuDNN does on a GPU (``flatten_parameters``)."""
    flat = torch.cat([w.detach().reshape(-1) for w in lstm.parameters()])
    offset = 0
    for weight in lstm.parameters():
        weight.data = flat[offset:offset + weight.numel()].view_as(weight)
        offset += weight.numel()


def test_weights_of_a_flattened_lstm_save_and_load(tmp_path):
    """On a GPU an LSTM's weights share one storage none of them covers, which safetensors refuses; the training
    loop's save and load cope (the NER probe's tagger crashed on its first GPU run). Simulated on the CPU."""
    from safetensors.torch import save_model

    from lmstudy.checkpoints import load_model_file, save_model_file

    torch.manual_seed(0)
    tagger = nn.Sequential(nn.Embedding(10, 4), nn.LSTM(4, 6, batch_first=True))
    _flatten_like_cudnn(tagger[1])
    with pytest.raises(RuntimeError, match="covering the entire storage"):
        save_model(tagger, str(tmp_path / "refused.safetensors"))
    first = [w.detach().clone() for w in tagger.parameters()]
    save_model_file(tagger, tmp_path / "model.safetensors", metadata={"step": "3"})

    other = nn.Sequential(nn.Embedding(10, 4), nn.LSTM(4, 6, batch_first=True))
    _flatten_like_cudnn(other[1])
    parameters = list(other.parameters())
    load_model_file(other, tmp_path / "model.safetensors")
    assert all(a is b for a, b in zip(other.parameters(), parameters))  # the same Parameter objects (optimizer state)
    assert all(torch.equal(a, b) for a, b in zip(first, other.parameters()))
