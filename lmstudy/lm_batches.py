"""Language-modelling batches from a token stream, and ``LMTask``: any causal LM on such streams.

A corpus arrives here as one 1-D tensor of token ids (documents concatenated, separated by
whatever end-of-text token the tokeniser uses). Three ways to cut it into ``(input, target)``
pairs, where ``target`` is ``input`` shifted left by one token:

- ``batchify`` + ``iter_bptt`` (PTB / awd-lstm-lm style): the stream is cut into ``B`` contiguous
  rows, ``(B, N)``, and read left to right in windows of ``seq_len``; row ``b`` of one window
  continues row ``b`` of the previous one, which is what lets an RNN carry its hidden state.
  ``get_bptt_window`` is the single-window primitive for variable-length BPTT.
- ``random_windows`` (nanoGPT ``get_batch``): ``B`` windows at random offsets, drawn from a
  ``torch.Generator`` seeded by ``(seed, epoch)`` (``epoch_generator``), so an epoch's batches can
  be replayed exactly when a training run resumes.
- ``eval_windows``: non-overlapping windows covering the whole stream, each predicting its
  ``seq_len`` tokens without context from the previous window; every token after the first is
  predicted exactly once, so the summed loss over ``eval_windows`` is the loss of the stream.

``lm_loss`` computes the cross-entropy from the model's logits and our already-shifted targets.
We do not pass ``labels=`` to HF models: they shift labels internally, which with our windows
would shift twice (or, with ``labels=input_ids``, drop one target per window).

``eval_windows``, ``lm_loss`` (and ``stream_loss``) live in ``lmstudy.evaluation``, the evaluation
protocol, and are imported here from there (so ``from lmstudy.lm_batches import lm_loss`` keeps
working); evaluation never imports this module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

from lmstudy.evaluation import check_token_stream as _check_stream
from lmstudy.evaluation import eval_windows, lm_loss, stream_loss
from lmstudy.training import TrainTask

SAMPLING = ("random", "contiguous")

__all__ = ["LMTask", "SAMPLING", "batchify", "epoch_generator", "eval_windows", "get_bptt_window", "iter_bptt",
           "lm_loss", "random_windows"]


def batchify(ids: torch.Tensor, batch_size: int) -> torch.Tensor:
    """(L,) -> (B, N) with N = L // B: B contiguous streams; the last L % B tokens are dropped."""
    _check_stream(ids, "ids", 2 * batch_size)
    n = ids.numel() // batch_size
    return ids[: n * batch_size].view(batch_size, n)  # (B, N)


def get_bptt_window(data: torch.Tensor, start: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The (input, target) window of ``data`` (B, N) at column ``start``; shorter at the end."""
    length = min(seq_len, data.size(1) - 1 - start)
    if length < 1:
        raise ValueError(f"no window at column {start}: data has only {data.size(1)} columns")
    x = data[:, start : start + length]  # (B, T)
    y = data[:, start + 1 : start + 1 + length]  # (B, T)
    return x, y


def iter_bptt(data: torch.Tensor, seq_len: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """All consecutive windows of ``data`` (B, N), left to right."""
    for start in range(0, data.size(1) - 1, seq_len):
        yield get_bptt_window(data, start, seq_len)


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """A torch.Generator seeded from (seed, epoch); distinct pairs give unrelated streams."""
    # SeedSequence mixes the pair properly (seed * K + epoch would make (1, 0) collide with (0, K)).
    words = np.random.SeedSequence([seed, epoch]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(words[0]) << 32 | int(words[1]))


def random_windows(
    ids: torch.Tensor, batch_size: int, seq_len: int, num_batches: int, generator: torch.Generator
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """``num_batches`` batches of ``batch_size`` windows at random offsets of ``ids`` (L,)."""
    _check_stream(ids, "ids", seq_len + 1)
    windows = ids.unfold(0, seq_len + 1, 1)  # (L - T, T + 1), a view: no copy
    for _ in range(num_batches):
        starts = torch.randint(windows.size(0), (batch_size,), generator=generator)
        chosen = windows[starts]  # (B, T + 1)
        yield chosen[:, :-1], chosen[:, 1:]  # (B, T), (B, T)


@dataclass
class LMTask(TrainTask):
    """Train any causal LM (``model(input_ids=x)`` -> logits) on a token stream.

    ``sampling="random"``: each epoch is ``batches_per_epoch`` nanoGPT-style random batches
    (default: as many as cover the training stream once). ``sampling="contiguous"``: each epoch
    reads ``batchify(train_ids, batch_size)`` once, left to right.
    ``evaluate`` reports ``val_loss`` (nats per token) and ``val_ppl`` over the whole validation
    stream in non-overlapping windows (the protocol of ``lmstudy.evaluation.stream_loss``), or
    over its first ``max_eval_tokens`` targets when set.
    """

    train_ids: torch.Tensor
    valid_ids: torch.Tensor
    batch_size: int
    seq_len: int
    sampling: str = "random"
    batches_per_epoch: int | None = None
    eval_batch_size: int | None = None
    max_eval_tokens: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.sampling not in SAMPLING:
            raise ValueError(f"LMTask.sampling {self.sampling!r} is not one of {SAMPLING}")
        if self.batch_size < 1 or self.seq_len < 1:
            raise ValueError(f"LMTask needs batch_size and seq_len >= 1, got {self.batch_size}, {self.seq_len}")
        _check_stream(self.train_ids, "train_ids", max(self.seq_len + 1, 2 * self.batch_size))
        _check_stream(self.valid_ids, "valid_ids", 2)
        # int64 once here: embeddings take any integer type, cross-entropy targets only int64.
        self.train_ids, self.valid_ids = self.train_ids.long(), self.valid_ids.long()
        if self.batches_per_epoch is None:
            self.batches_per_epoch = max(1, self.train_ids.numel() // (self.batch_size * self.seq_len))

    def batches(self, epoch: int):
        if self.sampling == "contiguous":
            return iter_bptt(batchify(self.train_ids, self.batch_size), self.seq_len)
        generator = epoch_generator(self.seed, epoch)
        return random_windows(self.train_ids, self.batch_size, self.seq_len, self.batches_per_epoch, generator)

    def loss(self, model, batch):
        x, y = batch
        return lm_loss(model, x, y)

    def evaluate(self, model) -> dict[str, float]:
        ids = self.valid_ids if self.max_eval_tokens is None else self.valid_ids[: self.max_eval_tokens + 1]
        loss = stream_loss(model, ids, self.seq_len, self.eval_batch_size or self.batch_size)
        return {"val_loss": loss, "val_ppl": math.exp(loss)}
