"""Serving a model with lighter weights: float32 (as trained) or bfloat16.

On a CPU, generating a token reads every weight once: a step of SmolLM2-135M in float32 streams 538 MB from
memory, which bounds the app's speed long before the arithmetic does. In bfloat16 the weights take half the
bytes and the matmuls run on the CPU's bfloat16 instructions (AVX-512 BF16 or AMX), where it has them.

Measured on SmolLM2 (``benchmarks/bench_smollm2.py``, figures in docs/base-models.md): bfloat16 weights change its
WikiText-2 bits per byte by -0.01% and generate the app's 4 x 128 tokens 2.4x faster than float32. PyTorch's
dynamic int8 quantisation of the linear layers was faster still but raised the bits per byte by 38%, so it is
not offered (the benchmark keeps it as a measured row).

``auto`` (the app's default) serves models of at least ``AUTO_BFLOAT16_PARAMETERS`` parameters in bfloat16
where the hardware computes in it natively (a CUDA GPU, or a CPU with AVX-512 BF16 or AMX), and everything
else in float32: our own small models gain nothing from it, and a CPU without bfloat16 instructions would
emulate it slowly. Training and the studies' evaluations always use float32.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from lmstudy.training import count_parameters

WEIGHTS = ("auto", "float32", "bfloat16")
AUTO_BFLOAT16_PARAMETERS = 50_000_000


@functools.cache
def native_bfloat16() -> bool:
    """Whether this machine computes in bfloat16 natively: a CUDA GPU, or a CPU flagged avx512_bf16 or amx_bf16."""
    if torch.cuda.is_available():
        return True
    cpuinfo = Path("/proc/cpuinfo")
    flags = cpuinfo.read_text(errors="replace").split() if cpuinfo.is_file() else []
    return "avx512_bf16" in flags or "amx_bf16" in flags


def chosen_weights(model: torch.nn.Module, weights: str) -> str:
    """``weights`` itself, or for ``auto`` the form it means for ``model`` on this machine (module docstring)."""
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}, not {weights!r}")
    if weights != "auto":
        return weights
    large = count_parameters(model) >= AUTO_BFLOAT16_PARAMETERS
    return "bfloat16" if large and native_bfloat16() else "float32"


def with_weights(model: torch.nn.Module, weights: str) -> torch.nn.Module:
    """``model`` in eval mode with ``weights`` (a resolved form, or ``auto``) for inference."""
    weights = chosen_weights(model, weights)
    return model.eval().to(getattr(torch, weights))


__all__ = ["AUTO_BFLOAT16_PARAMETERS", "WEIGHTS", "chosen_weights", "native_bfloat16", "with_weights"]
