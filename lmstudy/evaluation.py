"""Evaluation shared by the studies: loss and perplexity of a token stream.

Protocol (used everywhere unless a study says otherwise): the stream is cut into non-overlapping
windows of ``seq_len`` (``lm_batches.eval_windows``); every token after the first is predicted
exactly once, with the context of its own window only. Perplexity = exp(mean loss in nats).
"""

from __future__ import annotations

import math

import torch

from lmstudy.lm_batches import eval_windows, lm_loss


@torch.no_grad()
def stream_loss(model: torch.nn.Module, ids: torch.Tensor, seq_len: int, batch_size: int) -> float:
    """Mean next-token loss (nats) of ``model`` over the 1-D stream ``ids``."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=device)
    count = 0
    for x, y in eval_windows(ids, seq_len, batch_size):
        total += lm_loss(model, x.to(device), y.to(device), reduction="sum").double()
        count += y.numel()
    model.train(was_training)
    return total.item() / count  # one device sync for the whole evaluation


def stream_perplexity(model: torch.nn.Module, ids: torch.Tensor, seq_len: int, batch_size: int) -> float:
    return math.exp(stream_loss(model, ids, seq_len, batch_size))
