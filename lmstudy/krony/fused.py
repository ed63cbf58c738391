"""The fused CPU kernel of the Kronecker layer (issue 20's speed goal), built on first use.

``fused_kernel.cpp`` computes a ``KroneckerLinear``'s forward and backward token by token, every product of a
token in L1/L2, through one register-blocked micro-kernel (AVX-512 or AVX2 + FMA, whichever the CPU has; a
portable loop elsewhere). The reasons are in its header comment and in ``docs/benchmarks.md`` ("Kronecker layer").

It is compiled with ``torch.utils.cpp_extension.load`` the first time a process asks for it (g++ and ninja;
about a minute once per machine, then cached in ``$TORCH_EXTENSIONS_DIR``, default
``~/.cache/torch_extensions``) with ``-O3 -march=native -funroll-loops``: for this machine's CPU (a cache folder
shared with a machine of another CPU family needs ``TORCH_EXTENSIONS_DIR`` set apart). Where it cannot be built,
:func:`kernel` returns ``None`` with one warning and the layer keeps its BLAS plans: the result is the same up to
float rounding. ``LMSTUDY_KRONY_FUSED=0`` turns it off; ``layer.fused = False`` keeps one layer on its BLAS plans.
"""

from __future__ import annotations

import os
import warnings
from functools import lru_cache
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("fused_kernel.cpp")
BUILD_FLAGS = ["-O3", "-march=native", "-funroll-loops"]  # for this machine's CPU (see the module docstring)
ENV_SWITCH = "LMSTUDY_KRONY_FUSED"


def enabled() -> bool:
    """False when ``LMSTUDY_KRONY_FUSED`` is ``0`` / ``false`` / ``no``."""
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in {"0", "false", "no", "off"}


@lru_cache(maxsize=None)
def kernel():
    """The compiled extension module (``forward``, ``backward``), or ``None`` where it cannot be built."""
    if not enabled():
        return None
    try:
        from torch.utils.cpp_extension import load

        return load(name="lmstudy_krony_fused", sources=[str(SOURCE)], verbose=False,
                    extra_cflags=BUILD_FLAGS)
    except Exception as error:  # no compiler, no ninja, a build error: keep the BLAS plans, say so once
        warnings.warn(f"the fused Kronecker kernel could not be built ({type(error).__name__}: "
                      f"{str(error).strip().splitlines()[-1] if str(error).strip() else ''}); "
                      f"using the BLAS plans (set {ENV_SWITCH}=0 to skip the attempt)", RuntimeWarning, stacklevel=2)
        return None


def applies(x: torch.Tensor, a: torch.Tensor) -> bool:
    """Whether the fused kernel runs this call: float32 on the CPU outside autocast (bf16 mixed precision keeps
    the BLAS plans, whose matmuls autocast), and the kernel built."""
    return (x.device.type == "cpu" and x.dtype == a.dtype == torch.float32 and not torch.is_autocast_enabled("cpu")
            and kernel() is not None)


def kronecker(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, a_first: bool,
              keep: bool) -> torch.Tensor:
    """``y (..., p*r) = sum_f (A_f ⊗ B_f) x + bias`` for ``x (..., q*t)``, ``a (f, p, q)``, ``b (f, r, t)``,
    differentiable: the kernel's own autograd function (``KronFunction`` in ``fused_kernel.cpp``, C++ so that
    backward runs with no Python frame). ``keep``: gradients will be wanted; A first, forward then keeps each
    token's intermediate ``U = A X`` for backward (recomputing it cost more than its round trip through memory);
    B first, backward recomputes ``W = X Bᵀ``."""
    return kernel().apply(x, a, b, bias, a_first, keep)


def main() -> int:
    """``python -m lmstudy.krony.fused``: build the kernel now (``make setup`` and ``make test`` do) and say where."""
    import time

    start = time.perf_counter()
    module = kernel()
    if module is None:
        print("the fused Kronecker kernel is not available (switched off, or the build failed: see the warning); "
              "Krony layers use their BLAS plans")
        return 1
    print(f"fused Kronecker kernel: {module.__file__} ({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
