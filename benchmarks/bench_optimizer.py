"""Seconds per AdamW step: torch's default (per-tensor loop on the CPU), ``foreach`` and ``fused`` kernels.

    OMP_NUM_THREADS=1 python benchmarks/bench_optimizer.py [--size gpt2-small] [--repeats 3]

The parameters are GPT-2 small's matrices (``gpt2-small``: 12 blocks of 768 x 2304, 768 x 768, 768 x 3072 and
3072 x 768, and the 50,257 x 768 embedding: 124M) or a tenth of the blocks (``tiny``), with random gradients.
``lmstudy.training.adamw`` (every AdamW of the package) takes the fused kernel where torch has one. Also printed:
the largest difference from the default's parameters after the timed steps (the kernels round differently).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

SIZES = {"gpt2-small": 12, "tiny": 1}  # transformer blocks


def parameters(blocks: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    shapes = [(768, 2304), (768, 768), (768, 3072), (3072, 768)] * blocks + [(50257, 768)]
    return [torch.randn(shape, generator=generator) for shape in shapes]


def time_steps(initial: list[torch.Tensor], repeats: int, **kernel) -> tuple[float, list[torch.Tensor]]:
    params = [torch.nn.Parameter(p.clone()) for p in initial]
    generator = torch.Generator().manual_seed(1)
    for p in params:
        p.grad = torch.randn(p.shape, generator=generator) * 1e-3
    optimizer = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, **kernel)
    optimizer.step()  # warm-up: allocates the state
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        optimizer.step()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), [p.detach() for p in params]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=SIZES, default="gpt2-small")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    initial = parameters(SIZES[args.size])
    count = sum(p.numel() for p in initial)
    print(f"{count / 1e6:.1f}M parameters, {torch.get_num_threads()} thread(s), median of {args.repeats} steps")
    print("kernel | s/step | speed-up | max |difference| from default")
    reference_seconds, reference = time_steps(initial, args.repeats)
    for name, kernel in (("default", {}), ("foreach", {"foreach": True}), ("fused", {"fused": True})):
        seconds, params = (reference_seconds, reference) if not kernel else time_steps(initial, args.repeats, **kernel)
        difference = max((p - r).abs().max().item() for p, r in zip(params, reference))
        print(f"{name} | {seconds:.3f} | {reference_seconds / seconds:.1f}x | {difference:.1e}")


if __name__ == "__main__":
    main()
