"""Speed of the Kronecker-factored MLP layer against the dense GPT-2 ``Conv1D``, forward + backward.

This times one forward and backward pass of a batch of tokens (default 2,048) through

- the dense ``Conv1D`` (``x @ W + b``) and
- ``KroneckerLinear`` (``lmstudy.krony.model``: never ``A ⊗ B``),

at three sizes:

- ``gpt2 768->3072``: GPT-2 small's ``c_fc`` with every scheme of Krony-PT's Table 1 (A = the "Dimension"
  column, in the paper's (out, in) layout of ``c_fc``), one factor pair;
- ``ours 192->768`` and ``ours 768->192``: ``c_fc`` and ``c_proj`` of the shared base (a 3x192 GPT-2, MLP 768)
  with the Krony study's size classes (``lmstudy.krony.classes.class_a_shape``; ``c_proj`` uses A transposed, as
  ``compress`` does) and the Table 6 variants of the 67M class (4 factors, with and without scalars);
- ``smollm2 576->1536`` and ``smollm2 1536->576``: SmolLM2's gate/up and down projections (bias-free
  ``nn.Linear``) with its size classes (``lmstudy.krony.llama.llama_classes``: ``B = (r, 1)``, so no factor is 8
  wide and the goal does not apply) and balanced schemes whose factors are at least 8 wide on every side.

The input requires a gradient (as inside a network), so backward computes the input gradient and the factor
gradients. Times are the median of ``--repeats`` runs after ``--warmup`` runs; the layers alternate so that
load from other processes hits all alike, and a speed-up is the median of the per-round ratios dense / other.
``--clock cpu`` measures the process's CPU time instead of elapsed time: on a machine shared with other jobs
the elapsed time of a one-thread run includes waiting for a core, its CPU time does not (memory bandwidth and
caches are still shared). ``--keep-freed-memory`` asks glibc to keep freed memory (``mallopt``), as the A/B tool
always does: by default glibc may give large freed blocks back to the system, and a round that allocates them
again page-faults its outputs in, a cost of the allocator, not of the layer (in a loop of the kernel alone up to
2 ms of the shared base's 67M-class layer; in this benchmark's interleaved rounds the two settings gave the same
speed-ups within noise). ``--previous`` also times the layer's forward as it was before
issue 20 (the reference that ``tests/test_kronecker.py`` pins the layer to), for a before / after table from one
run.

The FLOP ratio is dense multiply-adds over factored multiply-adds per token for the forward pass (the
backward pass of a chain of matmuls costs twice its forward for both layers, so the ratio is the same).
The goal (issue 20): a speed-up of at least half the FLOP ratio for every scheme whose factors are at least
8 wide (every side of A and B >= 8); the ``goal`` column says ``met`` / ``NOT met``, or ``-`` where a factor
is narrower. A speed-up below the FLOP ratio is overhead: small matmuls, memory passes, the bias add.
``goal ms`` is the time that half the FLOP ratio allows (dense ms * 2 / FLOP ratio). ``floor ms`` is what this
machine takes, in the same rounds, for the memory traffic that any implementation of the layer's forward +
backward does when its inputs and outputs do not fit in cache: write ``y`` and ``dx``, read ``x`` twice (forward,
and backward for the factor gradients) and ``dy`` once (:func:`memory_floor`, plain torch fills and sums). Where
the floor is a large share of ``goal ms``, the arithmetic has to run under the memory traffic to meet the goal.

    python benchmarks/bench_kronecker.py                  # all sizes, CPU, 1 thread, 2048 tokens
    python benchmarks/bench_kronecker.py --size "ours 192->768" --previous
    python benchmarks/bench_kronecker.py --device cuda --tokens 8192
    python benchmarks/bench_kronecker.py --size "gpt2 768->3072" --scheme 64,32 --compile max-autotune --clock cpu

``--compile MODE`` also times the factored layer under ``torch.compile(mode=MODE)``, interleaved with the eager
one (the warm-up runs compile it; ``goal`` stays the eager layer's, the one the models use);
with ``max-autotune`` Inductor's C++ GEMM template is offered beside ATen's kernels (on the CPU that is what the
mode can add: a generated micro-GEMM, autotuned against MKL per matmul).
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import ctypes.util
import importlib.util
import os
import statistics
import time
from pathlib import Path

import torch
from transformers.pytorch_utils import Conv1D

from lmstudy.krony import fused
from lmstudy.krony.model import KroneckerConfig, KroneckerLinear, partner_shape
from lmstudy.krony.classes import CLASSES, class_a_shape
from lmstudy.krony.llama import SMOLLM2_SHAPES, llama_classes
from lmstudy.krony.table import PAPER_TABLE_1

GPT2_C_FC = (3072, 768)  # (out, in)
OUR_EMBD = 192  # the shared base's n_embd (lmstudy/scales.py, base preset "cpu": 3x192, MLP 4 * 192)
# balanced A shapes (out, in) of SmolLM2's 1536 x 576 gate/up, every side of A and B at least 8 wide
SMOL_BALANCED = [(48, 24), (64, 32), (96, 48), (32, 32)]
GOAL_MIN_SIDE = 8  # the goal covers schemes whose factors are at least this wide on every side
TESTS = Path(__file__).resolve().parent.parent / "tests"

Scheme = tuple[tuple[int, int], int, bool]  # (A shape, factors, scalars)


def sizes() -> dict[str, tuple[tuple[int, int], list[Scheme]]]:
    """Size name -> ((out, in), schemes): Table 1 at GPT-2 small dims; the study's classes at the base's dims."""
    table = [(dimension, 1, False) for _, dimension, _, _ in PAPER_TABLE_1]
    tiny = class_a_shape("67M", OUR_EMBD)
    ours_fc = [(class_a_shape(name, OUR_EMBD), 1, False) for name in CLASSES] + [(tiny, 4, False), (tiny, 4, True)]
    ours_proj = [(KroneckerConfig(a_shape).a_shape_for("c_proj"), f, s) for a_shape, f, s in ours_fc]
    smol = SMOLLM2_SHAPES.hidden_size, SMOLLM2_SHAPES.intermediate_size
    smol_up = [(c.a_shape, c.n_factors, False) for c in llama_classes(SMOLLM2_SHAPES).values()]
    smol_up += [(a_shape, 1, False) for a_shape in SMOL_BALANCED]
    smol_down = [(KroneckerConfig(a_shape).a_shape_for("c_proj"), f, s) for a_shape, f, s in smol_up]
    return {
        "gpt2 768->3072": (GPT2_C_FC, table),
        f"ours {OUR_EMBD}->{4 * OUR_EMBD}": ((4 * OUR_EMBD, OUR_EMBD), ours_fc),
        f"ours {4 * OUR_EMBD}->{OUR_EMBD}": ((OUR_EMBD, 4 * OUR_EMBD), ours_proj),
        f"smollm2 {smol[0]}->{smol[1]}": ((smol[1], smol[0]), smol_up),
        f"smollm2 {smol[1]}->{smol[0]}": ((smol[0], smol[1]), smol_down),
    }


def previous_forward():
    """The layer's forward before issue 20, ``f(layer, x)``, read from ``tests/test_kronecker.py`` (its one copy)."""
    spec = importlib.util.spec_from_file_location("test_kronecker", TESTS / "test_kronecker.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.previous_forward


class _Previous(torch.nn.Module):
    """``layer`` computed with the pre-issue-20 forward (same parameters)."""

    def __init__(self, layer: KroneckerLinear, forward) -> None:
        super().__init__()
        self.layer, self.previous = layer, forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.previous(self.layer, x)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def time_forward_backward(layer: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor, clock=time.perf_counter) -> float:
    """Seconds for one forward + backward pass (gradients cleared first, not timed)."""
    layer.zero_grad(set_to_none=True)
    x.grad = None
    _synchronize(x.device)
    start = clock()
    layer(x).backward(grad)
    _synchronize(x.device)
    return clock() - start


def memory_floor(x: torch.Tensor, grad: torch.Tensor, clock=time.perf_counter) -> float:
    """Seconds to write ``y`` (the size of ``grad``) and ``dx`` (of ``x``), read ``x`` twice and ``grad`` once:
    the traffic of a forward + backward that computes everything else in cache."""
    x = x.detach()
    _synchronize(x.device)
    start = clock()
    torch.empty_like(grad).fill_(1.0)  # forward writes y
    x.sum()  # forward reads x
    grad.sum()  # backward reads dy ...
    x.sum()  # ... and x again, for the factor gradients
    torch.empty_like(x).fill_(1.0)  # and writes dx
    _synchronize(x.device)
    return clock() - start


def keep_freed_memory() -> bool:
    """glibc: no mmap per large block, no heap trimming, so that a freed output is reused instead of page-faulted in
    again (what a caching allocator such as jemalloc or tcmalloc gives). Process-wide; False where it is not glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        largest = 2**31 - 1  # mallopt takes a C int (1 << 40 would arrive as 0: trim always)
        # M_MMAP_THRESHOLD (-3): blocks up to 1 GiB from the heap; M_TRIM_THRESHOLD (-1): never give its top back
        return bool(libc.mallopt(-3, 1 << 30)) and bool(libc.mallopt(-1, largest))
    except (OSError, AttributeError):
        return False  # not glibc: the allocator's own behaviour


def parse_a_shape(text: str) -> tuple[int, int]:
    """``"64,32"`` -> ``(64, 32)``; a clear error otherwise."""
    try:
        rows, cols = (int(side) for side in text.split(","))
    except ValueError:
        raise SystemExit(f"--scheme wants two integers P,Q (A's shape, e.g. 64,32), got {text!r}") from None
    return rows, cols


def goal_status(a_shape, b_shape, flop_ratio: float, speedup: float) -> str:
    """``met`` / ``NOT met`` against half the FLOP ratio, or ``-`` when a factor side is below 8."""
    if min(*a_shape, *b_shape) < GOAL_MIN_SIDE:
        return "-"
    return "met" if speedup >= flop_ratio / 2 else "NOT met"


def benchmark_scheme(
    shape: tuple[int, int], scheme: Scheme, tokens: int, repeats: int, warmup: int, device: torch.device,
    previous=None, clock=time.perf_counter, compile_mode: str | None = None, bias: bool = True,
) -> dict:
    """Median forward+backward times of the dense and the factored layer (and the previous forward) for one scheme."""
    out_features, in_features = shape
    a_shape, n_factors, scalars = scheme
    generator = torch.Generator(device=device).manual_seed(0)
    if bias:
        dense = Conv1D(out_features, in_features).to(device)
        factored = KroneckerLinear.from_conv1d(dense, a_shape, n_factors, scalars, init="random", generator=generator)
    else:  # a Llama MLP's bias-free nn.Linear
        dense = torch.nn.Linear(in_features, out_features, bias=False).to(device)
        factored = KroneckerLinear.from_linear(dense, a_shape, n_factors, scalars, init="random", generator=generator)
    x = torch.randn(tokens, in_features, device=device, generator=generator, requires_grad=True)
    grad = torch.randn(tokens, out_features, device=device, generator=generator)
    layers = {"dense": dense, "kron": factored}
    if factored.fused and fused.applies(x, factored.a_factors):
        blas = copy.deepcopy(factored)
        blas.fused = False  # the same layer on its BLAS plans, beside the fused kernel
        layers["blas"] = blas
    if previous is not None:
        layers["previous"] = _Previous(factored, previous)
    if compile_mode:
        layers["compiled"] = torch.compile(factored, mode=compile_mode)
    times = {name: [] for name in [*layers, "floor"]}
    for run in range(warmup + repeats):
        for name, layer in layers.items():
            elapsed = time_forward_backward(layer, x, grad, clock)
            if run >= warmup:
                times[name].append(elapsed)
        floor = memory_floor(x, grad, clock)
        if run >= warmup:
            times["floor"].append(floor)
    flop_ratio = in_features * out_features / factored.multiply_adds_per_token()
    # Median of the paired ratios: each round ran back to back, so slow drifts in load cancel.
    speedups = {name: statistics.median(d / t for d, t in zip(times["dense"], times[name])) for name in layers}
    b_shape = partner_shape(shape, a_shape)
    ms = {name: 1e3 * statistics.median(values) for name, values in times.items()}
    return {
        "a_shape": a_shape,
        "b_shape": b_shape,
        "factors": n_factors if not scalars else f"{n_factors}+s",
        "flop_ratio": flop_ratio,
        "ms": ms,
        "goal_ms": ms["dense"] * 2 / flop_ratio,
        "speedup": speedups["kron"],
        "previous_speedup": speedups.get("previous"),
        "compiled_speedup": speedups.get("compiled"),
        "blas_speedup": speedups.get("blas"),
        "goal": goal_status(a_shape, b_shape, flop_ratio, speedups["kron"]),
    }


def format_rows(size: str, rows: list[dict]) -> str:
    """One size's rows as a text table."""
    previous = rows[0]["previous_speedup"] is not None
    header = f"{'size':<16} {'A':<12} {'B':<9} {'factors':<7} {'FLOP ratio':>10} {'dense ms':>9} "
    header += f"{'before ms':>9} {'before':>7} " if previous else ""
    blas = any(row["blas_speedup"] is not None for row in rows)  # schemes on the fused kernel: BLAS beside it
    header += f"{'BLAS ms':>9} {'BLAS':>7} " if blas else ""
    header += f"{'kron ms':>9} {'speed-up':>9} {'goal':>8} {'goal ms':>8} {'floor ms':>8}"
    compiled = rows[0]["compiled_speedup"] is not None
    header += f" {'compiled ms':>11} {'speed-up':>9}" if compiled else ""
    lines = [header, "-" * len(header)]
    for row in rows:
        line = (f"{size:<16} {str(row['a_shape']):<12} {str(row['b_shape']):<9} {str(row['factors']):<7} "
                f"{row['flop_ratio']:>10.1f} {row['ms']['dense']:>9.2f} ")
        if previous:
            line += f"{row['ms']['previous']:>9.2f} {row['previous_speedup']:>7.2f} "
        if blas and row["blas_speedup"] is None:
            line += f"{'-':>9} {'-':>7} "  # this scheme's layer runs its BLAS plan: the kron columns are it
        elif blas:
            line += f"{row['ms']['blas']:>9.2f} {row['blas_speedup']:>7.2f} "
        line += (f"{row['ms']['kron']:>9.2f} {row['speedup']:>9.2f} {row['goal']:>8} {row['goal_ms']:>8.2f} "
                 f"{row['ms']['floor']:>8.2f}")
        if compiled:
            line += f" {row['ms']['compiled']:>11.2f} {row['compiled_speedup']:>9.2f}"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Time every scheme of the chosen sizes and print one table per size."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=2048, help="tokens per batch (default 2048)")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per layer (median reported)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs first")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--size", choices=list(sizes()), action="append", help="only these sizes (repeatable)")
    parser.add_argument("--scheme", action="append", metavar="P,Q",
                        help="only the schemes whose A (c_fc's, paper layout) is P x Q (repeatable)")
    parser.add_argument("--previous", action="store_true", help="also time the forward from before issue 20")
    parser.add_argument("--compile", metavar="MODE", help="also time the factored layer under "
                        "torch.compile(mode=MODE), e.g. default or max-autotune (the warm-up runs compile it)")
    parser.add_argument("--clock", choices=list(CLOCKS), default="wall",
                        help="wall: elapsed time (default); cpu: this process's CPU time, which other jobs on a "
                             "shared machine do not inflate (meaningful with one thread on the CPU)")
    parser.add_argument("--keep-freed-memory", action="store_true",
                        help="ask glibc to keep freed memory (mallopt), so that no layer pays page faults for its "
                             "outputs in every round (the default allocator gives large blocks back to the system)")
    args = parser.parse_args(argv)
    schemes_wanted = {parse_a_shape(text) for text in args.scheme or []}
    if args.compile and args.warmup < 1:
        parser.error("--compile needs at least one warm-up run (the first call compiles)")
    if args.compile == "max-autotune":
        import torch._inductor.config as inductor_config

        inductor_config.max_autotune_gemm_backends = "CPP,ATEN"  # offer the C++ micro-GEMM template beside MKL

    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(min(args.threads, len(os.sched_getaffinity(0))))
    previous = previous_forward() if args.previous else None
    kept = args.keep_freed_memory and keep_freed_memory()
    if args.keep_freed_memory and not kept:
        print("--keep-freed-memory: not glibc, the allocator keeps its own behaviour")
    print(
        f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, "
        f"{args.tokens} tokens, median of {args.repeats} after {args.warmup} warm-up, forward + backward, "
        f"{args.clock} clock, load average {os.getloadavg()[0]:.2f}"
        + (", freed memory kept (mallopt)" if kept else "")
        + (f", compiled: torch.compile(mode={args.compile!r})" if args.compile else "")
    )
    with torch.no_grad():
        torch.zeros(1, device=device)  # initialise the device before timing
    for size, (shape, schemes) in sizes().items():
        if args.size and size not in args.size:
            continue
        if schemes_wanted:
            schemes = [scheme for scheme in schemes if scheme[0] in schemes_wanted]
        if not schemes:
            continue
        rows = [benchmark_scheme(shape, scheme, args.tokens, args.repeats, args.warmup, device, previous,
                                 CLOCKS[args.clock], args.compile, bias=not size.startswith("smollm2"))
                for scheme in schemes]
        print()
        print(format_rows(size, rows), flush=True)
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
