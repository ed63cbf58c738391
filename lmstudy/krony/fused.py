"""The fused CPU kernel of the Kronecker layer (issue 20's speed goal), built on first use.

``fused_kernel.cpp`` computes a ``KroneckerLinear``'s forward and backward token by token, every product of a
token in L1/L2, through one register-blocked micro-kernel (AVX-512 or AVX2 + FMA, whichever the CPU has; a
portable loop elsewhere). The reasons are in its header comment and in ``benchmarks/README.md`` ("Kronecker layer").

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


class FusedKronecker(torch.autograd.Function):
    """``y (..., p*r) = sum_f (A_f ⊗ B_f) x + bias`` for ``x (..., q*t)``, with the fused kernel's forward and backward.

    The leading dimensions are flattened in here rather than by the caller: a reshape outside would add two view
    nodes to the autograd graph, about 25 microseconds a step (a tenth of the layer's fixed cost).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, a_first: bool):
        shape = x.shape
        x = x.reshape(-1, shape[-1]).contiguous()  # (..., q*t) -> (N, q*t)
        a, b = a.contiguous(), b.contiguous()  # (f, p, q), (f, r, t)
        # A first, backward reads each token's intermediate U = A X kept here (recomputing it cost more than its
        # round trip through memory); B first, the kernel keeps nothing and backward recomputes W = X Bᵀ. None is
        # kept when no gradient is wanted.
        y, intermediates = kernel().forward(x, a, b, bias.contiguous(), a_first, any(ctx.needs_input_grad))
        ctx.save_for_backward(x, a, b, intermediates)
        ctx.a_first, ctx.x_shape = a_first, shape
        return y.view(*shape[:-1], y.shape[-1])  # (N, p*r) -> (..., p*r)

    @staticmethod
    def backward(ctx, grad_y: torch.Tensor):
        x, a, b, intermediates = ctx.saved_tensors
        grad_y = grad_y.reshape(-1, grad_y.shape[-1])  # (..., p*r) -> (N, p*r)
        grad_x, grad_a, grad_b, grad_bias = kernel().backward(grad_y, x, a, b, intermediates, ctx.a_first)
        return grad_x.view(ctx.x_shape), grad_a, grad_b, grad_bias, None


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
