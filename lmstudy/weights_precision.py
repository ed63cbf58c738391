"""Serving a model with lighter weights: float32 (as trained), bfloat16, or int8 linear layers.

On a CPU, generating a token reads every weight once: a step of SmolLM2-135M in float32 streams 538 MB from
memory, which bounds the app's speed long before the arithmetic does. Two lighter forms:

- ``bfloat16``: every parameter cast to bfloat16 (half the bytes; matmuls in bfloat16 through oneDNN, fast where
  the CPU has AVX-512 BF16 or AMX, slow elsewhere);
- ``int8``: PyTorch's dynamic quantisation of every ``nn.Linear`` (the output projection included: a tied
  output layer gets an int8 copy of its own, the input embedding stays float32): int8 weights with one scale
  per output row (per-channel: a row of large weights does not coarsen the others), activations quantised on
  the fly per batch; a quarter of the bytes.

Neither is used where it changes the model's numbers beyond what we measured: the speed benchmark
(``benchmarks/bench_smollm2.py``) states each form's WikiText-2 bits per byte beside float32's, and the app
uses a lighter form only when asked (``app.py --weights``). Training and the studies' evaluations always use
float32.
"""

from __future__ import annotations

import warnings

import torch

WEIGHTS = ("float32", "bfloat16", "int8")


def with_weights(model: torch.nn.Module, weights: str) -> torch.nn.Module:
    """``model`` (eval mode) with ``weights`` precision for inference (module docstring); float32 returns it as is."""
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}, not {weights!r}")
    model = model.eval()
    if weights == "bfloat16":
        return model.to(torch.bfloat16)
    if weights == "int8":
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        with warnings.catch_warnings():  # torch.ao's notices that quantisation is moving to torchao
            warnings.simplefilter("ignore")
            return quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)
    return model


__all__ = ["WEIGHTS", "with_weights"]
