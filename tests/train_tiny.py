"""A tiny LSTM language model trained on synthetic tokens: the process the kill test of test_training.py
interrupts with SIGKILL and runs again.

    python tests/train_tiny.py RUNS_DIR [MAX_STEPS]

Trains into the run cache under RUNS_DIR (study ``tiny``), resuming from the run's checkpoint
when there is one, and prints the final metrics as JSON. Everything that could make two runs
differ is pinned: one torch thread, a fixed seed, seeded batches, dropout on (so the saved RNG
state matters), AdamW with warm-up + cosine (so the saved optimizer state and step matter), and
epochs shorter than the run (so the position in the epoch matters). An LSTM rather than GPT-2
because importing transformers costs seconds per process, and the test starts three; the
in-process resume tests of test_training.py cover GPT-2 (with its tied weights).
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

torch.set_num_threads(1)  # bit-identical CPU results between runs, and fair to a shared machine

from torch import nn  # noqa: E402

from lmstudy.lm_batches import LMTask  # noqa: E402
from lmstudy.runs import cached  # noqa: E402
from lmstudy.training import TrainConfig, train  # noqa: E402

VOCAB = 48


def synthetic_stream(length: int, seed: int) -> torch.Tensor:
    """Tokens with structure a tiny model can learn: noisy counting modulo the vocabulary."""
    generator = torch.Generator().manual_seed(seed)
    steps = torch.randint(1, 4, (length,), generator=generator)
    return torch.cumsum(steps, 0) % VOCAB


class TinyLSTMLM(nn.Module):
    """Embedding -> dropout -> LSTM -> dropout -> vocabulary logits; ``model(input_ids=x)`` like HF."""

    def __init__(self, vocab: int = VOCAB, size: int = 32):
        super().__init__()
        self.embed, self.drop = nn.Embedding(vocab, size), nn.Dropout(0.1)
        self.lstm, self.head = nn.LSTM(size, size, batch_first=True), nn.Linear(size, vocab)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        output, _ = self.lstm(self.drop(self.embed(input_ids)))  # (B, T, H)
        return self.head(self.drop(output))  # (B, T, V)


def main(runs_dir: str, max_steps: int = 200) -> dict:
    os.environ["LMSTUDY_RUNS"] = runs_dir
    train_config = TrainConfig(
        max_steps=max_steps, lr=3e-3, lr_schedule="cosine", warmup_steps=20, weight_decay=0.1,
        eval_every=50, checkpoint_every=20, log_every=5, seed=1234,
    )
    data = synthetic_stream(6000, seed=0)
    task = LMTask(data[:5000], data[5000:], batch_size=8, seq_len=16, batches_per_epoch=50, seed=1234)

    def run_training(run):
        torch.manual_seed(train_config.seed)
        return train(TinyLSTMLM(), task, train_config, run)

    return cached("tiny", {"model": "tiny_lstm", "train": train_config}, run_training)


if __name__ == "__main__":
    metrics = main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
    print(json.dumps(metrics))
