"""Paired timing of two versions of the fused Kronecker kernel (``lmstudy/krony/fused_kernel.cpp``).

A change to the kernel moves the layer's time by a few percent, while on a shared machine the same run moves by
10-30% between minutes (another job on the sibling hyperthread halves the FMA rate, a trimmed heap makes an output
page-fault). So this compares the working tree's kernel with the kernel at a git revision inside one process:
both are built (``torch.utils.cpp_extension.load``, about 40 s each the first time, then cached), and for every
scheme the two run forward + backward alternately on the same inputs, ``--repeats`` rounds after 2 warm-up rounds.
Reported: each version's median CPU time and the median of the per-round ratios ``new / old`` (below 1: the
working tree is faster), and whether the two agree on the output and every gradient (``ok``; float rounding only).

Times are the kernel alone (``forward`` then ``backward`` of the extension, as ``FusedKronecker`` calls them),
2,048 tokens, one thread, CPU time; glibc is asked to keep freed memory (``mallopt``) so that neither version pays
page faults for its outputs. Schemes are written ``P,Q,R,T[,F]``: ``A`` is ``(P, Q)``, ``B`` is ``(R, T)``, ``F``
factors; the order (A first or B first) is the layer's, the FLOP-cheaper one.

    python benchmarks/bench_kronecker_kernel_ab.py --against HEAD           # uncommitted changes vs the last commit
    python benchmarks/bench_kronecker_kernel_ab.py --against dd45a79 64,32,48,24 12,24,16,32
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import hashlib
import importlib.util
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from lmstudy.krony.fused import BUILD_FLAGS
from lmstudy.krony.model import FUSED_MIN_SIDE, KroneckerLinear, partner_shape

ROOT = Path(__file__).resolve().parent.parent
KERNEL = "lmstudy/krony/fused_kernel.cpp"
TOKENS = 2048


def default_schemes() -> list[str]:
    """bench_kronecker.py's schemes that run the fused kernel (factors at least ``FUSED_MIN_SIDE`` wide), as
    ``P,Q,R,T[,F]``: Table 1 at GPT-2 small's dims, the Krony study's 67M class at the shared base's (c_fc, c_proj;
    1 and 4 factors; the scalars variant is the same work for the kernel, so it appears once)."""
    spec = importlib.util.spec_from_file_location("bench_kronecker", Path(__file__).with_name("bench_kronecker.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    schemes = []
    for shape, size_schemes in bench.sizes().values():
        for a_shape, factors, _scalars in size_schemes:
            b_shape = partner_shape(shape, a_shape)
            text = ",".join(map(str, (*a_shape, *b_shape))) + (f",{factors}" if factors > 1 else "")
            if min(*a_shape, *b_shape) >= FUSED_MIN_SIDE and text not in schemes:
                schemes.append(text)
    return schemes


DEFAULT_SCHEMES = default_schemes()


def source_at(revision: str) -> str:
    """The kernel's source at a git revision; a clear error when the revision or the file is not there."""
    result = subprocess.run(["git", "-C", str(ROOT), "show", f"{revision}:{KERNEL}"], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"no {KERNEL} at revision {revision!r}: {result.stderr.strip()}")
    return result.stdout


def build(source: str, folder: Path):
    """Compile one version as its own extension module (named by its hash, so a rerun reuses the build)."""
    from torch.utils.cpp_extension import load

    digest = hashlib.sha1(source.encode()).hexdigest()[:10]
    path = folder / f"kron_{digest}.cpp"
    path.write_text(source)
    return load(name=f"kron_ab_{digest}", sources=[str(path)], extra_cflags=BUILD_FLAGS)


def parse_scheme(text: str) -> tuple[int, int, int, int, int]:
    """``"64,32,48,24"`` or ``"24,12,32,16,4"`` -> (p, q, r, t, factors); a clear error otherwise."""
    try:
        sides = [int(side) for side in text.split(",")]
    except ValueError:
        sides = []
    if len(sides) not in (4, 5) or min(sides) < 1:
        raise SystemExit(f"a scheme is P,Q,R,T or P,Q,R,T,F with positive integers (e.g. 64,32,48,24), got {text!r}")
    return (*sides[:4], sides[4] if len(sides) == 5 else 1)


def keep_freed_memory() -> None:
    """glibc: no mmap per large block, no heap trimming (a freed output is reused, not page-faulted in again)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        largest = 2**31 - 1  # mallopt takes a C int (1 << 40 would arrive as 0: trim always)
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD: blocks up to 1 GiB from the heap
        libc.mallopt(-1, largest)  # M_TRIM_THRESHOLD: never give the heap's top back
    except (OSError, AttributeError):
        pass  # not glibc: the allocator's own behaviour


def compare(modules: dict, scheme: tuple[int, int, int, int, int], repeats: int) -> dict:
    """Alternate the versions on one scheme; medians, the median paired ratio and whether the results agree."""
    p, q, r, t, factors = scheme
    a_first = KroneckerLinear(q * t, p * r, (p, q)).a_first  # the order the layer picks for these shapes
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(TOKENS, q * t, generator=generator)
    a, b = torch.randn(factors, p, q, generator=generator), torch.randn(factors, r, t, generator=generator)
    bias, dy = torch.randn(p * r, generator=generator), torch.randn(TOKENS, p * r, generator=generator)
    times = {name: [] for name in modules}
    results = {}
    for round_ in range(repeats + 2):
        for name, module in modules.items():
            start = time.process_time()
            y, kept = module.forward(x, a, b, bias, a_first, True)
            grads = module.backward(dy, x, a, b, kept, a_first)
            elapsed = time.process_time() - start
            if round_ >= 2:
                times[name].append(elapsed)
            results[name] = [y, *grads]
    agree = all(torch.allclose(new, old, rtol=1e-4, atol=1e-4 * old.abs().max().item())
                for new, old in zip(results["new"], results["old"]))
    return {
        "order": "A first" if a_first else "B first",
        "old_ms": 1e3 * statistics.median(times["old"]),
        "new_ms": 1e3 * statistics.median(times["new"]),
        "ratio": statistics.median(new / old for new, old in zip(times["new"], times["old"])),
        "agree": agree,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("schemes", nargs="*", help="P,Q,R,T[,F] (default: bench_kronecker.py's fused schemes)")
    parser.add_argument("--against", required=True, metavar="REV", help="git revision of the old kernel (e.g. HEAD)")
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds per scheme (default 15)")
    args = parser.parse_args(argv)
    schemes = [parse_scheme(text) for text in args.schemes or DEFAULT_SCHEMES]
    old_source, new_source = source_at(args.against), (ROOT / KERNEL).read_text()
    keep_freed_memory()
    torch.set_num_threads(1)
    folder = Path(tempfile.gettempdir()) / "lmstudy_kernel_ab"  # the sources stay put, so a rerun reuses the builds
    folder.mkdir(exist_ok=True)
    print(f"building the kernel at {args.against} and the working tree's (about 40 s each, once)", flush=True)
    modules = {"old": build(old_source, folder), "new": build(new_source, folder)}
    print(f"torch {torch.__version__}, 1 thread, {TOKENS} tokens, forward + backward, CPU time, median of "
          f"{args.repeats} rounds after 2 warm-up, versions alternating")
    header = f"{'scheme (P,Q,R,T,F)':<20} {'order':<8} {'old ms':>8} {'new ms':>8} {'new/old':>8}  results"
    print(header + "\n" + "-" * len(header))
    for scheme in schemes:
        row = compare(modules, scheme, args.repeats)
        print(f"{','.join(map(str, scheme)):<20} {row['order']:<8} {row['old_ms']:>8.2f} {row['new_ms']:>8.2f} "
              f"{row['ratio']:>8.3f}  {'ok' if row['agree'] else 'DIFFER'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
