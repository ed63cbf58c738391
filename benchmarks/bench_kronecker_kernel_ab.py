"""Paired timing of two versions of the fused Kronecker kernel (``lmstudy/krony/fused_kernel.cpp``).

A change to the kernel moves the layer's time by a few percent, while on a shared machine the same run moves by
10-30% between minutes (another job on the sibling hyperthread halves the FMA rate, a trimmed heap makes an output
page-fault). So this compares the working tree's kernel with the kernel at a git revision inside one process:
both are built (``torch.utils.cpp_extension.load``, about 40 s each the first time, then cached), and for every
scheme the two run forward + backward alternately on the same inputs, ``--repeats`` rounds after 2 warm-up rounds.
Reported: each version's median CPU time and the median of the per-round ratios ``new / old`` (below 1: the
working tree is faster), and whether the two agree on the output and every gradient (``ok``; float rounding only).

Times are the kernel alone (``forward`` then ``backward`` of the extension, as ``KronFunction`` calls them),
2,048 tokens, one thread, CPU time; glibc is asked to keep freed memory (``mallopt``) so that neither version pays
page faults for its outputs. Schemes are written ``P,Q,R,T[,F]``: ``A`` is ``(P, Q)``, ``B`` is ``(R, T)``, ``F``
factors; the order (A first or B first) is the one the layer runs the kernel in for training.

    python benchmarks/bench_kronecker_kernel_ab.py --against HEAD           # uncommitted changes vs the last commit
    python benchmarks/bench_kronecker_kernel_ab.py --against dd45a79 64,32,48,24 12,24,16,32
    python benchmarks/bench_kronecker_kernel_ab.py --orders 24,12,32,16     # one kernel: B first (old) vs A first (new)
    python benchmarks/bench_kronecker_kernel_ab.py --against HEAD --new-flags=-falign-loops=64  # a flag alone
    python benchmarks/bench_kronecker_kernel_ab.py --against HEAD --apart   # forward and backward also apart
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import operator
import shlex
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


def load_bench_kronecker():
    """``bench_kronecker.py`` as a module (its schemes and its allocator setting)."""
    spec = importlib.util.spec_from_file_location("bench_kronecker", Path(__file__).with_name("bench_kronecker.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


BENCH = load_bench_kronecker()


def default_schemes() -> list[str]:
    """bench_kronecker.py's schemes that run the fused kernel (factors at least ``FUSED_MIN_SIDE`` wide), as
    ``P,Q,R,T[,F]``: Table 1 at GPT-2 small's dims, the Krony study's 67M class at the shared base's (c_fc, c_proj;
    1 and 4 factors; the scalars variant is the same work for the kernel, so it appears once)."""
    schemes = []
    for shape, size_schemes in BENCH.sizes().values():
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


def build(source: str, folder: Path, flags: list[str] | None = None):
    """Compile one version as its own extension module (named by its hash and build flags, so a rerun reuses it);
    ``flags``: compiler flags after the kernel's own (``BUILD_FLAGS``)."""
    from torch.utils.cpp_extension import load

    cflags = BUILD_FLAGS + (flags or [])
    digest = hashlib.sha1((source + " ".join(cflags)).encode()).hexdigest()[:10]
    path = folder / f"kron_{digest}.cpp"
    path.write_text(source)
    return load(name=f"kron_ab_{digest}", sources=[str(path)], extra_cflags=cflags)


def parse_scheme(text: str) -> tuple[int, int, int, int, int]:
    """``"64,32,48,24"`` or ``"24,12,32,16,4"`` -> (p, q, r, t, factors); a clear error otherwise."""
    try:
        sides = [int(side) for side in text.split(",")]
    except ValueError:
        sides = []
    if len(sides) not in (4, 5) or min(sides) < 1:
        raise SystemExit(f"a scheme is P,Q,R,T or P,Q,R,T,F with positive integers (e.g. 64,32,48,24), got {text!r}")
    return (*sides[:4], sides[4] if len(sides) == 5 else 1)


def compare(modules: dict, scheme: tuple[int, int, int, int, int], repeats: int, orders: dict | None = None) -> dict:
    """Alternate the versions on one scheme; medians, the median paired ratio and whether the results agree.
    ``orders``: each version's order (name -> A first?); by default the one training runs the kernel in."""
    p, q, r, t, factors = scheme
    # by default both versions in the order training runs the kernel in
    orders = orders or dict.fromkeys(modules, KroneckerLinear(q * t, p * r, (p, q)).fused_a_first)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(TOKENS, q * t, generator=generator)
    a, b = torch.randn(factors, p, q, generator=generator), torch.randn(factors, r, t, generator=generator)
    bias, dy = torch.randn(p * r, generator=generator), torch.randn(TOKENS, p * r, generator=generator)
    times = {name: [] for name in modules}  # per round: (forward, backward) seconds
    results = {}
    for round_ in range(repeats + 2):
        for name, module in modules.items():
            start = time.process_time()
            y, kept = module.forward(x, a, b, bias, orders[name], True)
            middle = time.process_time()
            grads = module.backward(dy, x, a, b, kept, orders[name])
            if round_ >= 2:
                times[name].append((middle - start, time.process_time() - middle))
            results[name] = [y, *grads]
    agree = all(torch.allclose(new, old, rtol=1e-4, atol=1e-4 * old.abs().max().item())
                for new, old in zip(results["new"], results["old"]))

    def median_ms(name: str, part=sum) -> float:
        return 1e3 * statistics.median(part(round_) for round_ in times[name])

    forward, backward = operator.itemgetter(0), operator.itemgetter(1)
    return {
        "order": ("A first" if orders["old"] else "B first") if orders["old"] == orders["new"] else "B vs A",
        "old_ms": median_ms("old"),
        "new_ms": median_ms("new"),
        "ratio": statistics.median(sum(new) / sum(old) for new, old in zip(times["new"], times["old"])),
        "agree": agree,
        "apart": [median_ms(name, part) for name in ("old", "new") for part in (forward, backward)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("schemes", nargs="*", help="P,Q,R,T[,F] (default: bench_kronecker.py's fused schemes)")
    parser.add_argument("--against", metavar="REV", help="git revision of the old kernel (e.g. HEAD)")
    parser.add_argument("--orders", action="store_true",
                        help="instead of two versions: the working tree's kernel B first (old) and A first (new)")
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds per scheme (default 15)")
    parser.add_argument("--apart", action="store_true", help="also report forward and backward apart")
    parser.add_argument("--new-flags", metavar="FLAGS", default="",
                        help="compiler flags for the new version only, after the kernel's own, joined by '=' "
                             "(--new-flags=-mno-avx512f: a value that starts with '-'; with --against HEAD and no "
                             "change: the flags' effect alone)")
    args = parser.parse_args(argv)
    if (args.against is None) == (not args.orders):
        parser.error("give either --against REV (two versions) or --orders (one kernel, both orders)")
    schemes = [parse_scheme(text) for text in args.schemes or DEFAULT_SCHEMES]
    new_source = (ROOT / KERNEL).read_text()
    BENCH.keep_freed_memory()
    torch.set_num_threads(1)
    folder = Path(tempfile.gettempdir()) / "lmstudy_kernel_ab"  # the sources stay put, so a rerun reuses the builds
    folder.mkdir(exist_ok=True)
    if args.orders:  # one kernel, B first as "old" and A first as "new"
        print("building the working tree's kernel (about 40 s, once)", flush=True)
        modules = dict.fromkeys(("old", "new"), build(new_source, folder))
        orders = {"old": False, "new": True}
    else:
        print(f"building the kernel at {args.against} and the working tree's (about 40 s each, once)", flush=True)
        modules = {"old": build(source_at(args.against), folder),
                   "new": build(new_source, folder, shlex.split(args.new_flags))}
        orders = None
    print(f"torch {torch.__version__}, 1 thread, {TOKENS} tokens, forward + backward, CPU time, median of "
          f"{args.repeats} rounds after 2 warm-up, " + ("orders" if args.orders else "versions") + " alternating")
    apart = ["old fwd", "old bwd", "new fwd", "new bwd"] if args.apart else []
    header = f"{'scheme (P,Q,R,T,F)':<20} {'order':<8} {'old ms':>8} {'new ms':>8} {'new/old':>8}  results"
    header += "".join(f" {name:>8}" for name in apart)
    print(header + "\n" + "-" * len(header))
    for scheme in schemes:
        row = compare(modules, scheme, args.repeats, orders)
        line = (f"{','.join(map(str, scheme)):<20} {row['order']:<8} {row['old_ms']:>8.2f} {row['new_ms']:>8.2f} "
                f"{row['ratio']:>8.3f}  {'ok' if row['agree'] else 'DIFFER':<7}")
        print((line + "".join(f" {ms:>8.2f}" for ms in row["apart"][:len(apart)])).rstrip(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
