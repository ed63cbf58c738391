"""Overhead of lmstudy's training loop: steps/second of ``train()`` vs a bare PyTorch loop.

    python benchmarks/bench_training_loop.py [--steps 150] [--repeats 5] [--threads 1]

Both loops train the same tiny GPT-2 on the same synthetic batches (``LMTask`` random windows)
with the same work per step: forward, cross-entropy, backward, gradient clipping, AdamW step.
``train()`` adds what the project needs (accelerate, the learning-rate schedule, logging every
``log_every`` steps, a progress bar) but no periodic evaluation or checkpoint.

Timing: the task records the moment each batch is requested, so the steady-state time per step
is measured inside each loop, from the ``--warmup``-th batch to the last one: building the model
and the Accelerator, the first steps, and the final evaluation and checkpoint of ``train()`` are
left out (the latter are reported on their own line as the fixed cost of one call). Each repeat
runs both loops one after the other, so both see the same machine load; a warm-up run of each
comes first and is not counted. Reported: the median over repeats.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

from lmstudy.lm_batches import LMTask, lm_loss  # noqa: E402
from lmstudy.runs import get_run  # noqa: E402
from lmstudy.training import TrainConfig, count_parameters, train  # noqa: E402

VOCAB = 256


@dataclass
class TimedLMTask(LMTask):
    """An LMTask that notes when each training batch is requested (= when the previous step ended)."""

    stamps: list[float] = field(default_factory=list)

    def batches(self, epoch: int):
        for batch in super().batches(epoch):
            self.stamps.append(time.perf_counter())
            yield batch

    def seconds_per_step(self, warmup: int) -> float:
        return (self.stamps[-1] - self.stamps[warmup]) / (len(self.stamps) - 1 - warmup)


def make_model(args) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=args.seq_len, n_embd=args.n_embd, n_layer=args.n_layer,
                        n_head=4, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


def make_task(args) -> TimedLMTask:
    data = torch.randint(VOCAB, (50_000,), generator=torch.Generator().manual_seed(0))
    return TimedLMTask(data[:45_000], data[45_000:], batch_size=args.batch_size, seq_len=args.seq_len,
                       max_eval_tokens=args.batch_size * args.seq_len)


def bare_loop(args, device: torch.device) -> tuple[float, float]:
    """(seconds per step, seconds of the whole call) of a hand-written loop (nanoGPT style)."""
    start = time.perf_counter()
    model, task = make_model(args).to(device), make_task(args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0, fused=True)  # as TrainConfig (fused)
    model.train()
    done, epoch = 0, 0
    while done < args.steps:
        for x, y in task.batches(epoch):
            loss = lm_loss(model, x.to(device), y.to(device))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            done += 1
            if done == args.steps:
                break
        epoch += 1
    if device.type == "cuda":
        torch.cuda.synchronize()
    return task.seconds_per_step(args.warmup), time.perf_counter() - start


def our_loop(args) -> tuple[float, float]:
    """(seconds per step, seconds of the whole call) of ``train()`` into a fresh run."""
    start = time.perf_counter()
    model, task = make_model(args), make_task(args)
    config = TrainConfig(max_steps=args.steps, lr=1e-3, grad_clip=1.0, log_every=10)
    run = get_run("bench", {"train": config, "nonce": time.perf_counter_ns()})  # always a fresh run
    train(model, task, config, run)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return task.seconds_per_step(args.warmup), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--warmup", type=int, default=10, help="first steps of each run left out")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--n-embd", type=int, default=64)
    parser.add_argument("--n-layer", type=int, default=2)
    args = parser.parse_args()
    if args.steps < args.warmup + 2:
        parser.error("--steps must exceed --warmup by at least 2")
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # what accelerate picks

    with tempfile.TemporaryDirectory() as runs_root:
        os.environ["LMSTUDY_RUNS"] = runs_root
        bare_loop(args, device), our_loop(args)  # warm-up
        bare_step, ours_step, ours_fixed = [], [], []
        for _ in range(args.repeats):
            bare_step.append(bare_loop(args, device)[0])
            per_step, total = our_loop(args)
            ours_step.append(per_step)
            ours_fixed.append(total - args.steps * per_step)

    bare, ours = statistics.median(bare_step), statistics.median(ours_step)
    params = count_parameters(make_model(args))
    print(f"device {device} | torch {torch.__version__} | threads {args.threads} | GPT-2 {args.n_layer}x{args.n_embd} "
          f"({params:,} parameters) | batch {args.batch_size}x{args.seq_len} | {args.steps} steps, first "
          f"{args.warmup} left out | median of {args.repeats}")
    print(f"{'loop':<16}{'steps/s':>10}{'ms/step':>10}{'time vs bare':>14}")
    print(f"{'bare PyTorch':<16}{1 / bare:>10.1f}{1000 * bare:>10.2f}{1.0:>13.3f}x")
    print(f"{'lmstudy train()':<16}{1 / ours:>10.1f}{1000 * ours:>10.2f}{ours / bare:>13.3f}x")
    print(f"fixed cost of one train() call (model, accelerate setup, final eval + checkpoint): "
          f"{1000 * statistics.median(ours_fixed):.0f} ms")


if __name__ == "__main__":
    main()
