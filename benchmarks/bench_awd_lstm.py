"""Training speed of our AWD-LSTM against a plain LSTM language model of the same sizes, at 1 and 2 threads.

Timed: one full training step on one (B, T) window with the hidden state carried from the previous
step, i.e. forward, loss, backward, gradient clipping and an SGD update:

- ``awd``: ``AWDLSTM`` in training mode with all its regularisation (embedding dropout, locked dropout,
  DropConnect through ``torch.func.functional_call``) and the loss of ``AWDLSTMTask`` (CE + AR + TAR);
- ``plain``: ``PlainLSTMLM`` (``nn.Embedding`` -> one ``nn.LSTM`` per layer -> ``nn.Linear``, the same
  layer sizes: last layer ``emb_size`` wide), cross-entropy only.

Both see the same windows; steps alternate awd / plain so that load from other processes hits both
alike. Reported: tokens per second (B * T / median step time after ``--warmup`` steps) and the ratio
awd / plain (the target is >= 0.8), for each thread count in ``--threads``.

    python benchmarks/bench_awd_lstm.py                         # the cpu-scale sizes, 1 and 2 threads
    python benchmarks/bench_awd_lstm.py --emb 400 --hidden 1150 --batch 80 --bptt 70 --device cuda
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from lmstudy.lm_batches import get_bptt_window
from lmstudy.training import count_parameters
from lmstudy.welch.awd_lstm import AWDLSTM, AWDLSTMConfig, AWDLSTMTask, PlainLSTMLM, detach_hidden


def make_step(model, loss_fn, lr: float = 1.0, clip: float = 0.25):
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
    carry = None

    def step(x, y) -> None:
        nonlocal carry
        loss, carry = loss_fn(model, x, y, carry)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--emb", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--bptt", type=int, default=35)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per model and thread count")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)

    config = AWDLSTMConfig(vocab_size=args.vocab, emb_size=args.emb, hidden_size=args.hidden, n_layers=args.layers)
    torch.manual_seed(0)
    awd, plain = AWDLSTM(config).to(device).train(), PlainLSTMLM(config).to(device).train()
    data = torch.randint(0, args.vocab, (args.batch * args.bptt * (args.steps + args.warmup) + 1,))
    task = AWDLSTMTask(data, data[:100], batch_size=args.batch, bptt=args.bptt)  # its loss: CE + AR + TAR

    def awd_loss(model, x, y, carry):
        loss, _, carry = task.loss(model, (x, y), carry)
        return loss, carry

    def plain_loss(model, x, y, carry):
        out = model(x, carry)
        return F.cross_entropy(out.logits.reshape(-1, args.vocab), y.reshape(-1)), detach_hidden(out.hidden)

    windows = [tuple(t.to(device) for t in get_bptt_window(task.train_data, start, args.bptt))  # (B, T) each
               for start in range(0, args.bptt * (args.steps + args.warmup), args.bptt)]
    parameters = count_parameters(awd)
    print(f"device {device}, torch {torch.__version__}; vocab {args.vocab}, emb {args.emb}, hidden {args.hidden}, "
          f"{args.layers} layers ({parameters:,} parameters), batch {args.batch} x bptt {args.bptt}, "
          f"{args.steps} timed steps after {args.warmup} warm-up")
    print(f"{'threads':>7} {'awd tok/s':>10} {'plain tok/s':>12} {'awd/plain':>10}")
    for threads in args.threads:
        torch.set_num_threads(threads)
        steps = {"awd": make_step(awd, awd_loss), "plain": make_step(plain, plain_loss)}
        times: dict[str, list[float]] = {"awd": [], "plain": []}
        for index, (x, y) in enumerate(windows):
            for name, step in steps.items():  # interleaved
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                start = time.perf_counter()
                step(x, y)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                if index >= args.warmup:
                    times[name].append(time.perf_counter() - start)
        tokens = args.batch * args.bptt
        speed = {name: tokens / statistics.median(t) for name, t in times.items()}
        print(f"{threads:>7} {speed['awd']:>10,.0f} {speed['plain']:>12,.0f} {speed['awd'] / speed['plain']:>10.2f}")


if __name__ == "__main__":
    main()
