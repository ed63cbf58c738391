"""Speed of the Kronecker-factored MLP layer against the dense GPT-2 ``Conv1D``, forward + backward.

This times one forward and backward pass of a batch of tokens (default 2,048) through

- the dense ``Conv1D`` (``x @ W + b``) and
- ``KroneckerLinear`` (two matmuls, never ``A ⊗ B``),

at two sizes:

- ``gpt2 768->3072``: GPT-2 small's ``c_fc`` with every scheme of Krony-PT's Table 1 (A = the "Dimension"
  column, in the paper's (out, in) layout of ``c_fc``), one factor pair;
- ``cpu 256->1024`` and ``cpu 1024->256``: ``c_fc`` and ``c_proj`` of the cpu-scale Krony study's 4x256 GPT-2,
  with the study's size classes (``lmstudy.krony.study.class_a_shape``; ``c_proj`` uses A transposed,
  as ``compress`` does) and the Table 6 variant (67M shapes, 4 factors + scalars).

The input requires a gradient (as inside a network), so backward computes the input gradient and the factor
gradients. Times are the median of ``--repeats`` runs after
``--warmup`` runs; dense and factored runs alternate so that load from other processes hits both alike,
and the speed-up is the median of the per-pair ratios dense / factored.

The FLOP ratio is dense multiply-adds over factored multiply-adds per token for the forward pass (the
backward pass of a chain of matmuls costs twice its forward for both layers, so the ratio is the same).
A speed-up below the FLOP ratio is overhead: small matmuls, permute copies, the bias add.

    python benchmarks/bench_kronecker.py                  # both sizes, CPU, 1 thread, 2048 tokens
    python benchmarks/bench_kronecker.py --size "cpu 256->1024" --threads 2
    python benchmarks/bench_kronecker.py --device cuda --tokens 8192
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from transformers.pytorch_utils import Conv1D

from lmstudy.krony.table import PAPER_TABLE_1
from lmstudy.krony.model import KroneckerConfig, KroneckerLinear, partner_shape
from lmstudy.krony.study import CLASSES, class_a_shape

GPT2_C_FC = (3072, 768)  # (out, in)
CPU_EMBD = 256  # the cpu preset's n_embd (lmstudy/scales.py, 03_kronecker)

Scheme = tuple[tuple[int, int], int, bool]  # (A shape, factors, scalars)


def sizes() -> dict[str, tuple[tuple[int, int], list[Scheme]]]:
    """Size name -> ((out, in), schemes): Table 1 at GPT-2 small dims; the study's classes at cpu dims."""
    table = [(dimension, 1, False) for _, dimension, _, _ in PAPER_TABLE_1]
    cpu_fc = [(class_a_shape(name, CPU_EMBD), 1, False) for name in CLASSES] + [(class_a_shape("67M", CPU_EMBD), 4, True)]
    cpu_proj = [(KroneckerConfig(a_shape).a_shape_for("c_proj"), f, s) for a_shape, f, s in cpu_fc]
    return {
        "gpt2 768->3072": (GPT2_C_FC, table),
        "cpu 256->1024": ((4 * CPU_EMBD, CPU_EMBD), cpu_fc),
        "cpu 1024->256": ((CPU_EMBD, 4 * CPU_EMBD), cpu_proj),
    }


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_forward_backward(layer: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor) -> float:
    """Seconds for one forward + backward pass (gradients cleared first, not timed)."""
    layer.zero_grad(set_to_none=True)
    x.grad = None
    _synchronize(x.device)
    start = time.perf_counter()
    layer(x).backward(grad)
    _synchronize(x.device)
    return time.perf_counter() - start


def benchmark_scheme(
    shape: tuple[int, int], scheme: Scheme, tokens: int, repeats: int, warmup: int, device: torch.device,
) -> dict:
    """Median forward+backward times of the dense and the factored layer for one scheme."""
    out_features, in_features = shape
    a_shape, n_factors, scalars = scheme
    generator = torch.Generator(device=device).manual_seed(0)
    dense = Conv1D(out_features, in_features).to(device)
    factored = KroneckerLinear.from_conv1d(dense, a_shape, n_factors, scalars, init="random", generator=generator)
    x = torch.randn(tokens, in_features, device=device, generator=generator, requires_grad=True)
    grad = torch.randn(tokens, out_features, device=device, generator=generator)
    dense_times, factored_times = [], []
    for run in range(warmup + repeats):
        dense_time = time_forward_backward(dense, x, grad)
        factored_time = time_forward_backward(factored, x, grad)
        if run >= warmup:
            dense_times.append(dense_time)
            factored_times.append(factored_time)
    dense_ms, factored_ms = 1e3 * statistics.median(dense_times), 1e3 * statistics.median(factored_times)
    return {
        "a_shape": a_shape,
        "b_shape": partner_shape(shape, a_shape),
        "factors": n_factors if not scalars else f"{n_factors}+s",
        "order": "A first" if factored.a_first else "B first",
        "flop_ratio": in_features * out_features / factored.multiply_adds_per_token(),
        "dense_ms": dense_ms,
        "factored_ms": factored_ms,
        # Median of the paired ratios: each pair ran back to back, so slow drifts in load cancel.
        "speedup": statistics.median(d / f for d, f in zip(dense_times, factored_times)),
    }


def format_rows(size: str, rows: list[dict]) -> str:
    header = (f"{'size':<16} {'A':<12} {'B':<9} {'factors':<7} {'order':<8} {'FLOP ratio':>10} {'dense ms':>9} "
              f"{'kron ms':>9} {'speed-up':>9}")
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{size:<16} {str(row['a_shape']):<12} {str(row['b_shape']):<9} {str(row['factors']):<7} {row['order']:<8} "
            f"{row['flop_ratio']:>10.1f} {row['dense_ms']:>9.2f} {row['factored_ms']:>9.2f} {row['speedup']:>9.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=2048, help="tokens per batch (default 2048)")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per layer (median reported)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs first")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1, as the cpu study)")
    parser.add_argument("--size", choices=list(sizes()), action="append", help="only these sizes (repeatable)")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(min(args.threads, len(os.sched_getaffinity(0))))
    print(
        f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, "
        f"{args.tokens} tokens, median of {args.repeats} after {args.warmup} warm-up, forward + backward"
    )
    with torch.no_grad():
        torch.zeros(1, device=device)  # initialise the device before timing
    for size, (shape, schemes) in sizes().items():
        if args.size and size not in args.size:
            continue
        rows = [benchmark_scheme(shape, scheme, args.tokens, args.repeats, args.warmup, device) for scheme in schemes]
        print()
        print(format_rows(size, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
