"""AWD-LSTM (Merity et al. 2017, "Regularizing and Optimizing LSTM Language Models") for current PyTorch,
and ``AWDLSTMTask``, its training recipe as a stateful task of the shared loop (``lmstudy.training``).

The recipe, copied from the paper / awd-lstm-lm (the code itself is not copied):

- weight drop (DropConnect) on each layer's hidden-to-hidden matrix ``weight_hh``: one mask per
  forward pass, shared by every time step and every sequence of the batch;
- embedding dropout (``dropoute``): whole rows of the input embedding matrix (= word types) are
  dropped for a forward pass, the rest rescaled by 1 / (1 - p);
- locked (variational) dropout, one mask per sequence shared over time, on the embedded inputs
  (``dropouti``), between LSTM layers (``dropouth``) and on the last layer's output (``dropout``);
- AR (``alpha``: L2 of the dropped last-layer output) and TAR (``beta``: L2 of the difference of
  consecutive raw last-layer outputs) added to the loss;
- variable-length BPTT: the window length is drawn around ``bptt`` (half of it with probability 0.05,
  then N(len, 5), at least 5), and the learning rate of that step is scaled by ``length / bptt``;
- gradient clipping (the loop's ``TrainConfig.grad_clip``, 0.25 in the paper);
- NT-ASGD: SGD until the validation loss has not improved on the best of all evaluations but the
  last ``nonmono`` ones, then averaged SGD (``torch.optim.ASGD``, t0=0, lambd=0); evaluation uses
  the averaged weights.

Why not awd-lstm-lm's ``WeightDrop``: it deletes ``weight_hh_l0`` from the ``nn.LSTM`` and sets a
plain tensor attribute in its place before each call, which breaks on modern PyTorch (flattened
weights, ``_flat_weights`` bookkeeping). Here ``nn.LSTM`` keeps its parameter (it is what the
optimizer updates and what checkpoints save), and each training forward calls the LSTM through
``torch.func.functional_call`` with a dropped copy of ``weight_hh_l0`` substituted for the call
only. Gradients flow through the dropout mask into the raw parameter. In eval mode the LSTM runs
with its own weights (DropConnect at test time = the expected weights, since F.dropout rescales).

Decisions:

- Batch-first tensors everywhere: ids (B, T), activations (B, T, C).
- The last LSTM layer outputs ``emb_size`` features, tied or not, so the decoder's weight always has
  the shape of an embedding matrix (V, emb_size): Welch et al. initialise *output* embeddings with
  pretrained vectors too. (awd-lstm-lm gives the last layer ``nhid`` outputs when untied.)
- Initialisation as awd-lstm-lm: encoder and decoder weights U(-0.1, 0.1), decoder bias 0, LSTM
  PyTorch's default. Tying is decided at construction (``tie_weights``); freezing and pretrained
  rows are applied afterwards by ``lmstudy.welch.embedding_config.apply_embedding_config``.
- Weight decay: the loop applies ``TrainConfig.weight_decay`` to matrices and embeddings only, not to
  biases (awd-lstm-lm decays every parameter; the difference at 1.2e-6 is negligible).
- Validation loss is the paper's (awd-lstm-lm's) protocol: the stream is cut into ``eval_batch_size``
  rows and read in windows of ``bptt`` with the hidden state carried from window to window
  (``carried_state_loss``), not the shared no-context window protocol of ``lmstudy.evaluation``,
  which suits transformers but would penalise an RNN for losing its state every 70 tokens.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from lmstudy.lm_batches import batchify, epoch_generator, get_bptt_window, iter_bptt
from lmstudy.training import TrainTask

Hidden = tuple[tuple[torch.Tensor, torch.Tensor], ...]  # per layer (h, c), each (1, B, H_l)


@dataclass
class AWDLSTMConfig:
    """Sizes and dropouts; defaults are awd-lstm-lm's PTB settings (Welch et al.'s "Baseline" column)."""

    vocab_size: int
    emb_size: int = 400
    hidden_size: int = 1150
    n_layers: int = 3
    dropout: float = 0.4  # locked dropout on the last layer's output
    dropouth: float = 0.25  # locked dropout between LSTM layers
    dropouti: float = 0.4  # locked dropout on the embedded input
    dropoute: float = 0.1  # embedding dropout (whole word types)
    wdrop: float = 0.5  # DropConnect on each weight_hh
    init_range: float = 0.1
    tie_weights: bool = False


@dataclass
class AWDLSTMOutput:
    """What the LSTM LMs return: logits, the new hidden state, the last layer's output before and after dropout."""

    logits: torch.Tensor  # (B, T, V)
    hidden: Hidden
    raw_output: torch.Tensor  # (B, T, E) last LSTM layer before the output dropout (TAR)
    output: torch.Tensor  # (B, T, E) the same after the output dropout (AR; what the decoder reads)


def locked_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Variational dropout on (B, T, C): one mask per sequence and feature, shared by all time steps."""
    if not training or p == 0.0:
        return x
    mask = x.new_empty(x.size(0), 1, x.size(2)).bernoulli_(1.0 - p) / (1.0 - p)  # (B, 1, C)
    return x * mask


def embedding_dropout(weight: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """The embedding matrix (V, E) with whole rows zeroed with probability ``p``, the rest rescaled."""
    if not training or p == 0.0:
        return weight
    mask = weight.new_empty(weight.size(0), 1).bernoulli_(1.0 - p) / (1.0 - p)  # (V, 1)
    return weight * mask


class WeightDropLSTM(nn.Module):
    """One ``nn.LSTM`` layer whose hidden-to-hidden matrix gets DropConnect in training mode."""

    def __init__(self, input_size: int, hidden_size: int, wdrop: float):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, batch_first=True)
        self.wdrop = wdrop

    def forward(self, x: torch.Tensor, hx: tuple[torch.Tensor, torch.Tensor] | None = None):
        if not self.training or self.wdrop == 0.0:
            return self.lstm(x, hx)
        # The dropped matrix replaces the parameter for this call only; the parameter itself stays
        # registered (optimizer, checkpoints) and receives the gradient through the mask.
        dropped = F.dropout(self.lstm.weight_hh_l0, p=self.wdrop, training=True)  # (4H, H)
        return functional_call(self.lstm, {"weight_hh_l0": dropped}, (x, hx))


class AWDLSTM(nn.Module):
    """Embedding -> n_layers weight-dropped LSTMs -> linear decoder; ``forward`` returns ``AWDLSTMOutput``.

    ``forward(input_ids, hidden=None)``: ``hidden`` is the previous call's ``output.hidden`` (or None
    for zeros), which is how a stream is read window by window. ``output.logits`` makes the model
    usable by ``lmstudy.lm_batches.lm_loss``.
    """

    def __init__(self, config: AWDLSTMConfig):
        super().__init__()
        self.config = config
        c = config
        self.encoder = nn.Embedding(c.vocab_size, c.emb_size)
        sizes = [c.emb_size] + [c.hidden_size] * (c.n_layers - 1) + [c.emb_size]  # layer l: sizes[l] -> sizes[l+1]
        self.rnns = nn.ModuleList(WeightDropLSTM(sizes[i], sizes[i + 1], c.wdrop) for i in range(c.n_layers))
        self.decoder = nn.Linear(c.emb_size, c.vocab_size)
        nn.init.uniform_(self.encoder.weight, -c.init_range, c.init_range)
        nn.init.uniform_(self.decoder.weight, -c.init_range, c.init_range)
        nn.init.zeros_(self.decoder.bias)
        if c.tie_weights:
            self.decoder.weight = self.encoder.weight  # one Parameter, one storage

    def forward(self, input_ids: torch.Tensor, hidden: Hidden | None = None) -> AWDLSTMOutput:
        c = self.config
        weight = embedding_dropout(self.encoder.weight, c.dropoute, self.training)  # (V, E)
        x = F.embedding(input_ids, weight)  # (B, T, E)
        x = locked_dropout(x, c.dropouti, self.training)
        new_hidden = []
        for i, rnn in enumerate(self.rnns):
            x, h = rnn(x, None if hidden is None else hidden[i])  # (B, T, H_i)
            new_hidden.append(h)
            if i != c.n_layers - 1:
                x = locked_dropout(x, c.dropouth, self.training)
        raw_output = x  # (B, T, E)
        output = locked_dropout(raw_output, c.dropout, self.training)
        return AWDLSTMOutput(self.decoder(output), tuple(new_hidden), raw_output, output)


class PlainLSTMLM(nn.Module):
    """Reference for the benchmark: nn.Embedding -> one multi-layer nn.LSTM -> nn.Linear, no regularisation,
    with the same layer sizes as ``AWDLSTM`` (last layer ``emb_size``) so their costs compare directly."""

    def __init__(self, config: AWDLSTMConfig):
        super().__init__()
        c = config
        sizes = [c.emb_size] + [c.hidden_size] * (c.n_layers - 1) + [c.emb_size]
        self.encoder = nn.Embedding(c.vocab_size, c.emb_size)
        self.rnns = nn.ModuleList(nn.LSTM(sizes[i], sizes[i + 1], batch_first=True) for i in range(c.n_layers))
        self.decoder = nn.Linear(c.emb_size, c.vocab_size)

    def forward(self, input_ids: torch.Tensor, hidden: Hidden | None = None) -> AWDLSTMOutput:
        x = self.encoder(input_ids)  # (B, T, E)
        new_hidden = []
        for i, rnn in enumerate(self.rnns):
            x, h = rnn(x, None if hidden is None else hidden[i])
            new_hidden.append(h)
        return AWDLSTMOutput(self.decoder(x), tuple(new_hidden), x, x)


def detach_hidden(hidden: Hidden) -> Hidden:
    """The hidden state cut from the autograd graph (truncated backpropagation between batches)."""
    return tuple((h.detach(), c.detach()) for h, c in hidden)


@torch.no_grad()
def per_token_losses(model: nn.Module, ids: torch.Tensor, batch_size: int, bptt: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token next-token losses (nats) and their targets over the stream ``ids`` (L,), awd-lstm-lm's
    protocol: ``batchify`` into ``batch_size`` rows (the last L % batch_size tokens are dropped), windows
    of ``bptt``, hidden state carried across windows."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    data = batchify(ids.long(), batch_size).to(device)  # (B, N)
    losses, targets, hidden = [], [], None
    with torch.no_grad():
        for x, y in iter_bptt(data, bptt):
            out = model(x, hidden)
            logits = out.logits.reshape(-1, out.logits.size(-1)).float()  # (B*T, V)
            losses.append(F.cross_entropy(logits, y.reshape(-1), reduction="none"))
            targets.append(y.reshape(-1))
            hidden = out.hidden
    model.train(was_training)
    return torch.cat(losses), torch.cat(targets)


def carried_state_loss(model: nn.Module, ids: torch.Tensor, batch_size: int, bptt: int) -> float:
    """Mean next-token loss (nats) over the stream ``ids`` with :func:`per_token_losses`' protocol."""
    losses, _ = per_token_losses(model, ids, batch_size, bptt)
    return losses.double().mean().item()


@contextmanager
def averaged_weights(model: nn.Module, optimizer: torch.optim.Optimizer | None) -> Iterator[None]:
    """Inside the block the parameters hold ASGD's running averages (``state[p]["ax"]``); outside, their
    own values. A no-op for any other optimizer (and for parameters ASGD has not stepped yet)."""
    saved = []
    if isinstance(optimizer, torch.optim.ASGD):
        for group in optimizer.param_groups:
            for p in group["params"]:
                ax = optimizer.state.get(p, {}).get("ax")
                if ax is not None:
                    saved.append((p, p.detach().clone()))
                    p.data.copy_(ax)
    try:
        yield
    finally:
        for p, value in saved:
            p.data.copy_(value)


@dataclass
class AWDLSTMTask(TrainTask):
    """The AWD-LSTM recipe on a token stream, for ``lmstudy.training.train`` with ``optimizer="sgd"``,
    a constant schedule, ``grad_clip`` 0.25 and ``eval_every`` = one epoch's steps (``steps_per_epoch``).

    The carry is the LSTM state, detached, passed from batch to batch within an epoch.
    """

    train_ids: torch.Tensor
    valid_ids: torch.Tensor
    batch_size: int = 20
    bptt: int = 70
    eval_batch_size: int = 10
    alpha: float = 2.0  # AR
    beta: float = 1.0  # TAR
    nonmono: int = 5  # NT-ASGD: evaluations that may pass without improvement
    asgd: bool = True  # False: plain SGD throughout
    max_seq_len_delta: int = 40  # variable BPTT windows are at most bptt + this
    max_eval_tokens: int | None = None  # evaluate on the first N tokens of valid only (smoke runs)
    seed: int = 0

    stateful = True

    def __post_init__(self) -> None:
        self.train_ids, self.valid_ids = self.train_ids.long(), self.valid_ids.long()
        self.train_data = batchify(self.train_ids, self.batch_size)  # (B, N)

    @property
    def steps_per_epoch(self) -> int:
        """About how many windows one epoch has (variable BPTT: the exact number depends on the draws)."""
        return max(1, (self.train_data.size(1) - 1) // self.bptt)

    def batches(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        # Deterministic per (seed, epoch), as the loop's exact resume requires.
        generator = epoch_generator(self.seed, epoch)
        start, columns = 0, self.train_data.size(1)
        while start < columns - 2:
            base = self.bptt if torch.rand((), generator=generator).item() < 0.95 else self.bptt / 2
            length = max(5, int(base + 5.0 * torch.randn((), generator=generator).item()))
            length = min(length, self.bptt + self.max_seq_len_delta)
            x, y = get_bptt_window(self.train_data, start, length)  # (B, T), (B, T)
            yield x, y
            start += length

    def batch_lr(self, lr: float, batch) -> float:
        """awd-lstm-lm: a window of length T updates with lr * T / bptt, so every token weighs the same.

        The loop asks once per step, with the whole batch (every process and accumulation part shares its
        window length). (torch's ASGD steps with the eta it computed from the previous step's lr: after the
        switch the scaling lags one step, as it did in awd-lstm-lm.)"""
        x, _ = batch
        return lr * x.size(1) / self.bptt

    def loss(self, model, batch, carry):
        x, y = batch
        out = model(x, carry)
        ce = F.cross_entropy(out.logits.reshape(-1, out.logits.size(-1)).float(), y.reshape(-1))
        ar = self.alpha * out.output.pow(2).mean()
        tar = self.beta * (out.raw_output[:, 1:] - out.raw_output[:, :-1]).pow(2).mean()
        extras = {"ce": ce.detach(), "ar": ar.detach(), "tar": tar.detach()}
        return ce + ar + tar, extras, detach_hidden(out.hidden)

    def validation_ids(self) -> torch.Tensor:
        if self.max_eval_tokens is None:
            return self.valid_ids
        return self.valid_ids[: self.max_eval_tokens + 1]

    def eval_weights(self, model):
        # Evaluation and the loop's best/ weights use ASGD's averages once it has switched (awd-lstm-lm
        # evaluates and saves the averaged model).
        return averaged_weights(model, self.optimizer)

    def evaluate(self, model) -> dict[str, float]:
        loss = carried_state_loss(model, self.validation_ids(), self.eval_batch_size, self.bptt)
        return {"val_loss": loss, "val_ppl": math.exp(loss),
                "averaged": float(isinstance(self.optimizer, torch.optim.ASGD))}

    def patience_counts(self) -> bool:
        """Early stopping counts only evaluations made after NT-ASGD switched (or without NT-ASGD): before it,
        validation that stops improving is what triggers the switch, and awd-lstm-lm trains on from there. (Counted
        from the start, patience fired at the same evaluation as the switch in 3 of the first 11 runs of the
        freezing trend: runs of 3-6 epochs beside same-configuration runs of 40.)"""
        return not self.asgd or isinstance(self.optimizer, torch.optim.ASGD)

    def on_eval(self, state, metrics, optimizer):
        """NT-ASGD: switch SGD -> ASGD once validation is worse than the best before the last ``nonmono``
        evaluations (awd-lstm-lm's test, on the loop's checkpointed history)."""
        if not self.asgd or isinstance(optimizer, torch.optim.ASGD):
            return None
        losses = [record["val_loss"] for record in state.history]
        previous, current = losses[:-1], losses[-1]
        if len(previous) > self.nonmono and current > min(previous[: len(previous) - self.nonmono]):
            groups = [{"params": group["params"], "weight_decay": group["weight_decay"]}
                      for group in optimizer.param_groups]
            return torch.optim.ASGD(groups, lr=optimizer.param_groups[0]["initial_lr"], t0=0, lambd=0.0)
        return None
