"""AWD-LSTM: weight drop, the 20 embedding configurations, the stateful task and NT-ASGD."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from lmstudy.welch.awd_lstm import (AWDLSTM, AWDLSTMConfig, AWDLSTMTask, averaged_weights,
                                     carried_state_loss, embedding_dropout, locked_dropout,
                                     per_token_losses)
from lmstudy.welch.embedding_config import ALL_CONFIGS, SECTION3_CONFIGS, EmbeddingConfig, apply_embedding_config
from lmstudy.runs import get_run, read_log_records
from lmstudy.training import TrainConfig, build_optimizer, latest_checkpoint, load_weights, train

VOCAB, EMB = 40, 6


@pytest.fixture(autouse=True)
def runs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))
    torch.set_num_threads(1)


def tiny(tied: bool = False, **overrides) -> AWDLSTM:
    torch.manual_seed(0)
    config = dict(vocab_size=VOCAB, emb_size=EMB, hidden_size=10, n_layers=2, tie_weights=tied)
    return AWDLSTM(AWDLSTMConfig(**{**config, **overrides}))


def pretrained_fixture() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    vectors = torch.randn(VOCAB, EMB, generator=generator)
    found = torch.arange(VOCAB) % 3 != 0  # every third word has no pretrained vector
    return vectors, found


# --- configurations ----------------------------------------------------------------------------


def test_there_are_20_configurations_with_unique_names_that_round_trip():
    assert len(ALL_CONFIGS) == 20
    assert sum(c.tied for c in ALL_CONFIGS) == 4
    names = [c.name for c in ALL_CONFIGS]
    assert len(set(names)) == 20
    assert "untied/in=pretrained,frozen/out=pretrained,trainable" in names
    assert "tied/random,trainable" in names
    assert all(EmbeddingConfig.from_name(n) == c for n, c in zip(names, ALL_CONFIGS))
    assert set(SECTION3_CONFIGS) <= set(ALL_CONFIGS) and len(set(SECTION3_CONFIGS)) == 6
    with pytest.raises(ValueError):
        EmbeddingConfig(True, "random", True, "pretrained", True)  # tied = one matrix
    with pytest.raises(ValueError):
        EmbeddingConfig.from_name("untied/in=random,frozen")


@pytest.mark.parametrize("config", ALL_CONFIGS, ids=lambda c: c.name)
def test_every_configuration_builds_loads_freezes_and_trains_one_step(config):
    vectors, found = pretrained_fixture()
    reference = tiny(config.tied)  # the same seed: its rows are the "random init" of the model below
    model = tiny(config.tied)
    apply_embedding_config(model, config, vectors, found)

    # Step 0: pretrained sides hold the loaded vectors where found, the random init elsewhere.
    sides = [("encoder", config.input_init, config.input_frozen)]
    if not config.tied:
        sides.append(("decoder", config.output_init, config.output_frozen))
    for name, init, _ in sides:
        weight, random_init = getattr(model, name).weight, getattr(reference, name).weight
        if init == "pretrained":
            assert torch.equal(weight[found], vectors[found])
            assert torch.equal(weight[~found], random_init[~found])
        else:
            assert torch.equal(weight, random_init)
    if config.tied:
        assert model.decoder.weight is model.encoder.weight
        assert model.decoder.weight.data_ptr() == model.encoder.weight.data_ptr()

    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = build_optimizer(model, TrainConfig(max_steps=1, optimizer="sgd", lr=1.0))
    in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
    x = torch.randint(0, VOCAB, (3, 8))
    out = model(x)
    F.cross_entropy(out.logits.reshape(-1, VOCAB), x.roll(-1, 1).reshape(-1)).backward()
    optimizer.step()

    frozen = {"encoder.weight": config.input_frozen}
    if not config.tied:
        frozen["decoder.weight"] = config.output_frozen
    for name, parameter in model.named_parameters():
        is_frozen = frozen.get(name, False)
        assert parameter.requires_grad is not is_frozen, name
        assert (id(parameter) in in_optimizer) is not is_frozen, name
        if is_frozen:
            assert parameter.grad is None, name
            assert torch.equal(parameter, before[name]), name
        else:
            assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
            assert not torch.equal(parameter, before[name]), name
    assert model.decoder.bias.requires_grad  # trainable bias, also when the output matrix is frozen
    if config.tied:
        assert model.decoder.weight.data_ptr() == model.encoder.weight.data_ptr()


def test_configuration_must_match_the_model_tying_and_needs_vectors():
    with pytest.raises(ValueError, match="tie_weights"):
        apply_embedding_config(tiny(tied=False), EmbeddingConfig.from_name("tied/random,trainable"))
    with pytest.raises(ValueError, match="pretrained vectors"):
        apply_embedding_config(tiny(), EmbeddingConfig.from_name(
            "untied/in=pretrained,frozen/out=random,trainable"))


# --- regularisation ------------------------------------------------------------------------------


def test_weight_drop_is_active_in_training_and_off_in_eval():
    model = tiny(dropout=0.0, dropouth=0.0, dropouti=0.0, dropoute=0.0, wdrop=0.5)
    x = torch.randint(0, VOCAB, (2, 9))
    raw = [rnn.lstm.weight_hh_l0.detach().clone() for rnn in model.rnns]
    model.train()
    first, second = model(x).logits, model(x).logits
    assert not torch.allclose(first, second)  # a fresh DropConnect mask each call
    first.sum().backward()
    assert all(rnn.lstm.weight_hh_l0.grad.abs().sum() > 0 for rnn in model.rnns)  # through the mask
    assert all(torch.equal(rnn.lstm.weight_hh_l0, w) for rnn, w in zip(model.rnns, raw))  # never modified
    model.eval()
    assert torch.equal(model(x).logits, model(x).logits)
    # In eval the LSTM runs with its own weights: the same as the model with weight drop switched off.
    no_drop = tiny(dropout=0.0, dropouth=0.0, dropouti=0.0, dropoute=0.0, wdrop=0.0)
    no_drop.eval()
    assert torch.allclose(model(x).logits, no_drop(x).logits)
    no_drop.train()  # and with no dropout of any kind, training mode is deterministic
    assert torch.allclose(no_drop(x).logits, model(x).logits, atol=1e-6)


def test_locked_and_embedding_dropout_masks():
    x = torch.ones(4, 7, 5)
    y = locked_dropout(x, 0.5, training=True)
    assert torch.equal(y, y[:, :1].expand_as(y))  # one mask per sequence, shared over time
    assert set(y.unique().tolist()) <= {0.0, 2.0}
    assert torch.equal(locked_dropout(x, 0.5, training=False), x)
    w = torch.ones(50, 3)
    dropped = embedding_dropout(w, 0.5, training=True)
    assert all(len(set(row.tolist())) == 1 for row in dropped)  # whole rows (word types) dropped
    assert 0 < (dropped[:, 0] == 0).sum() < 50


# --- the task -------------------------------------------------------------------------------------


def stream(length: int, seed: int) -> torch.Tensor:
    # A learnable pattern: a mostly repeating sequence of 10 symbols with some noise.
    generator = torch.Generator().manual_seed(seed)
    ids = torch.arange(length) % 10
    noise = torch.rand(length, generator=generator) < 0.1
    return torch.where(noise, torch.randint(0, VOCAB, (length,), generator=generator), ids)


def test_variable_bptt_batches_are_contiguous_deterministic_and_vary():
    task = AWDLSTMTask(stream(2000, 0), stream(200, 1), batch_size=4, bptt=12, eval_batch_size=2, seed=1)
    windows = list(task.batches(0))
    lengths = [x.size(1) for x, _ in windows]
    assert len(set(lengths)) > 2 and min(lengths) >= 5 and max(lengths) <= 12 + 40
    rebuilt = torch.cat([x for x, _ in windows], dim=1)
    assert torch.equal(rebuilt, task.train_data[:, : rebuilt.size(1)])  # contiguous, no gaps
    assert rebuilt.size(1) >= task.train_data.size(1) - 2
    for (x, y), (x2, _) in zip(windows, list(task.batches(0))):
        assert torch.equal(x, x2)
        assert torch.equal(y[:, :-1], x[:, 1:])
    assert [x.size(1) for x, _ in task.batches(1)] != lengths  # another epoch, other draws


def no_dropout_tiny() -> AWDLSTM:
    return tiny(dropout=0.0, dropouth=0.0, dropouti=0.0, dropoute=0.0, wdrop=0.0)


def test_loss_adds_ar_and_tar_and_carries_a_detached_state():
    task = AWDLSTMTask(stream(600, 0), stream(200, 1), batch_size=4, bptt=10, eval_batch_size=2,
                       alpha=2.0, beta=1.0)
    model = tiny()
    batch = next(iter(task.batches(0)))
    torch.manual_seed(5)
    loss, extras, carry = task.loss(model, batch, None)
    assert extras["ar"] > 0 and extras["tar"] > 0
    assert torch.allclose(loss.detach(), extras["ce"] + extras["ar"] + extras["tar"])
    assert len(carry) == 2 and all(not h.requires_grad and not c.requires_grad for h, c in carry)
    assert carry[0][0].shape == (1, 4, 10) and carry[1][0].shape == (1, 4, EMB)
    _, extras_no_reg, _ = AWDLSTMTask(stream(600, 0), stream(200, 1), batch_size=4, bptt=10,
                                      alpha=0.0, beta=0.0).loss(model, batch, carry)
    assert extras_no_reg["ar"] == 0 and extras_no_reg["tar"] == 0


def test_the_task_carries_the_final_state_of_each_window_into_the_next():
    """Two windows read with the task's carry give exactly what one LSTM pass over both gives (no dropout,
    so the comparison is deterministic): the state is carried, it is the final (h, c) of every layer, and
    it is detached (no graph back into the first window)."""
    task = AWDLSTMTask(stream(600, 0), stream(200, 1), batch_size=4, bptt=10, alpha=0.0, beta=0.0)
    model = no_dropout_tiny()
    (x1, y1), (x2, y2) = list(task.batches(0))[:2]
    assert torch.equal(y1[:, -1], x2[:, 0])  # consecutive windows of the same rows
    _, _, carry = task.loss(model, (x1, y1), None)
    _, extras2, carry2 = task.loss(model, (x2, y2), carry)
    with torch.no_grad():
        whole = model(torch.cat([x1, x2], dim=1))  # one pass over both windows
        first = model(x1)
    logits2 = whole.logits[:, x1.size(1):]  # (B, T2, V)
    expected = F.cross_entropy(logits2.reshape(-1, VOCAB), y2.reshape(-1))
    assert extras2["ce"].item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-6), \
        "the second window's loss is not that of a state carried from the first"
    fresh = F.cross_entropy(model(x2).logits.reshape(-1, VOCAB), y2.reshape(-1)).item()
    assert abs(fresh - expected.item()) > 1e-4  # resetting the state would be visible at this size
    for (h, c), (h_ref, c_ref) in zip(carry, first.hidden):
        assert torch.allclose(h, h_ref, atol=1e-6) and torch.allclose(c, c_ref, atol=1e-6)
    for (h, c), (h_ref, c_ref) in zip(carry2, whole.hidden):
        assert torch.allclose(h, h_ref, atol=1e-6) and torch.allclose(c, c_ref, atol=1e-6)
    assert all(not h.requires_grad and h.grad_fn is None for pair in carry + carry2 for h in pair)  # detached


def test_carried_state_loss_equals_one_pass_over_the_stream_and_differs_from_resetting_the_state():
    """``carried_state_loss`` reads the stream in ``bptt`` windows with the state carried; in eval mode (no
    dropout) that is exactly one LSTM pass over each row of ``batchify``'s layout, which is computed here
    independently. The model is handed over in training mode with dropouts on: the loss must switch to
    eval (deterministic) and give training mode back."""
    model = tiny()  # awd-lstm-lm's dropouts, all non-zero
    model.train()
    ids = stream(401, 2)  # 401 = 2 x 200 + 1: batchify drops the last token; the last window is shorter
    carried = carried_state_loss(model, ids, batch_size=2, bptt=10)
    per_token, targets = per_token_losses(model, ids, batch_size=2, bptt=10)
    assert model.training
    data = ids[:400].view(2, 200)  # batchify: row b is the contiguous slice b * 200 .. (b + 1) * 200
    model.eval()
    with torch.no_grad():
        logits = model(data[:, :-1]).logits  # (2, 199, V): the whole row in one go, state never reset
        reference = F.cross_entropy(logits.reshape(-1, VOCAB), data[:, 1:].reshape(-1),
                                    reduction="none").view(2, 199)
    # per_token_losses concatenates window by window: (B*T) of each window in turn
    windows = [reference[:, s:s + 10].reshape(-1) for s in range(0, 199, 10)]
    window_targets = [data[:, s + 1:s + 11].reshape(-1) for s in range(0, 199, 10)]
    assert torch.equal(targets, torch.cat(window_targets))
    gap = (per_token - torch.cat(windows)).abs().max().item()
    assert gap < 1e-5, f"per-token losses differ from one pass over the stream by up to {gap:.3g}"
    assert carried == pytest.approx(reference.double().mean().item(), rel=1e-6)
    # Resetting the hidden state at every window gives another (and for a trained RNN worse) loss.
    reset = []
    with torch.no_grad():
        for start in range(0, 199, 10):
            x, y = data[:, start:start + 10], data[:, start + 1:start + 11]
            x = x[:, : y.size(1)]
            reset.append(F.cross_entropy(model(x).logits.reshape(-1, VOCAB), y.reshape(-1), reduction="none"))
    reset = torch.cat(reset)
    assert (reset - torch.cat(windows)).abs().max().item() > 1e-3  # the carried state is visible per token
    assert carried != pytest.approx(reset.double().mean().item(), rel=1e-6)
    assert 0 < carried < 2 * torch.log(torch.tensor(float(VOCAB))).item()


def test_nt_asgd_rule_reads_the_history():
    task = AWDLSTMTask(stream(600, 0), stream(200, 1), batch_size=4, bptt=10, nonmono=2)
    model = tiny()
    sgd = build_optimizer(model, TrainConfig(max_steps=1, optimizer="sgd", lr=5.0, weight_decay=0.1))
    for group in sgd.param_groups:
        group["initial_lr"] = group["lr"]

    class State:
        history = []

    def decide(losses):
        State.history = [{"step": i, "val_loss": v} for i, v in enumerate(losses)]
        return task.on_eval(State, State.history[-1], sgd)

    assert decide([5.0, 4.0, 3.0, 2.9]) is None  # still improving
    assert decide([5.0, 4.0, 4.5]) is None  # too few evaluations (needs more than nonmono before)
    assert decide([5.0, 4.0, 3.0, 3.5, 3.4]) is None  # worse than recent, better than min(5.0, 4.0)
    switched = decide([5.0, 3.0, 3.5, 3.4, 3.6])  # not better than the best before the last two
    assert isinstance(switched, torch.optim.ASGD)
    assert switched.param_groups[0]["lr"] == 5.0
    assert [g["weight_decay"] for g in switched.param_groups] == [g["weight_decay"] for g in sgd.param_groups]
    assert task.on_eval(State, {}, switched) is None  # already averaging


def test_a_stalling_validation_switches_to_asgd_and_evaluates_the_averages():
    # Validation text is pure noise: nothing learnt on the training pattern helps, so it stalls.
    generator = torch.Generator().manual_seed(9)
    noise = torch.randint(0, VOCAB, (300,), generator=generator)
    task = AWDLSTMTask(stream(1200, 0), noise, batch_size=4, bptt=10, eval_batch_size=2, nonmono=1, seed=0)
    config = TrainConfig(max_steps=40, optimizer="sgd", lr=2.0, grad_clip=0.25, eval_every=3,
                         checkpoint_every=20, log_every=5, seed=0)
    model = tiny()
    run = get_run("awd_asgd", {"test": 1})
    metrics = train(model, task, config, run)
    evals = [r for r in read_log_records(run.log_path) if r["kind"] == "eval"]
    assert evals[0]["averaged"] == 0.0 and evals[-1]["averaged"] == 1.0
    assert isinstance(task.optimizer, torch.optim.ASGD)  # (a checkpoint mid-run records it: the resume test)
    # The reported loss is the one of the averaged weights, and the swap leaves the model as it was.
    weights = [p.detach().clone() for p in model.parameters()]
    with averaged_weights(model, task.optimizer):
        averaged = carried_state_loss(model, task.valid_ids, 2, 10)
        assert any(not torch.equal(p, w) for p, w in zip(model.parameters(), weights))
    assert all(torch.equal(p, w) for p, w in zip(model.parameters(), weights))
    assert metrics["val_loss"] == pytest.approx(averaged, rel=1e-9)
    assert carried_state_loss(model, task.valid_ids, 2, 10) != pytest.approx(averaged, rel=1e-9)
    # best/ holds the weights the best validation loss was measured with (the averages under ASGD).
    best = tiny()
    load_weights(best, run, "best")
    assert carried_state_loss(best, task.valid_ids, 2, 10) == pytest.approx(metrics["best_val_loss"], rel=1e-6)


class CrashingTask(AWDLSTMTask):
    """Raises KeyboardInterrupt at the ``crash_at``-th call of loss (a killed run)."""

    crash_at: int = 0
    calls: int = 0

    def loss(self, model, batch, carry):
        self.calls += 1
        if self.calls == self.crash_at:
            raise KeyboardInterrupt
        return super().loss(model, batch, carry)


def test_interrupted_training_resumes_exactly_through_the_switch():
    generator = torch.Generator().manual_seed(9)
    noise = torch.randint(0, VOCAB, (300,), generator=generator)
    config = TrainConfig(max_steps=30, optimizer="sgd", lr=2.0, grad_clip=0.25, eval_every=3,
                         checkpoint_every=7, log_every=1, seed=0)

    def fit(study, task):
        model = tiny()
        metrics = train(model, task, config, get_run(study, {"test": 2}))
        return metrics, model

    def make(cls=AWDLSTMTask):
        return cls(stream(1200, 0), noise, batch_size=4, bptt=10, eval_batch_size=2, nonmono=1, seed=0)

    reference, reference_model = fit("reference", make())
    crashing = make(CrashingTask)
    crashing.crash_at = 25
    with pytest.raises(KeyboardInterrupt):
        fit("resumed", crashing)
    state = json.loads((latest_checkpoint(get_run("resumed", {"test": 2})) / "state.json").read_text())
    assert state["optimizer"]["class"] == "ASGD" and state["train_state"]["step"] == 21
    resumed, resumed_model = fit("resumed", make())
    assert resumed == reference
    assert all(torch.equal(a, b) for a, b in zip(resumed_model.parameters(), reference_model.parameters()))
    def without_time(records):  # train_s is wall-clock time: the one field that may differ
        return [{k: v for k, v in r.items() if k != "train_s"} for r in records]

    assert without_time(read_log_records(get_run("resumed", {"test": 2}).log_path)) == \
        without_time(read_log_records(get_run("reference", {"test": 2}).log_path))


def test_early_stopping_patience_counts_only_after_nt_asgd_switched():
    task = AWDLSTMTask(stream(600, 0), stream(200, 1), batch_size=4, bptt=10, eval_batch_size=2)
    parameters = [torch.nn.Parameter(torch.zeros(2))]
    task.optimizer = torch.optim.SGD(parameters, lr=1.0)
    assert not task.patience_counts()  # validation that stops improving now switches to ASGD, it does not stop
    task.optimizer = torch.optim.ASGD(parameters, lr=1.0, t0=0, lambd=0.0)
    assert task.patience_counts()
    plain = AWDLSTMTask(stream(600, 0), stream(200, 1), batch_size=4, bptt=10, eval_batch_size=2, asgd=False)
    plain.optimizer = torch.optim.SGD(parameters, lr=1.0)
    assert plain.patience_counts()
