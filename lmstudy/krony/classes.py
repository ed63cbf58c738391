"""The Krony study's size classes: Kronecker factor shapes of the paper's three classes at our dims, and the dense
MLP width whose parameter count matches a class (the dense baselines').

Size classes keep the paper's *factor shapes*, not its parameter counts (our dims differ): ``c_fc`` is ``(4d, d)``
in the paper's ``(out, in)`` orientation; the 96M class is ``B = (2, 1)`` (A = (2d, d): half the MLP), the 81M class
``B = (4, 1)`` (A = (d, d): a quarter), the 67M class a balanced pair with both factors tiny (A's sides the divisors
nearest the square roots: (24, 12) at d = 192). ``size_ratio`` (parameters over the base's) is reported beside the
paper's 95/124, 81/124, 67/124 (:data:`PAPER_RATIOS`); our embeddings are a larger share of a small model, so the same
shapes remove less.
"""

from __future__ import annotations

import math

from transformers import GPT2Config

from lmstudy.krony.model import KroneckerConfig, compressed_parameter_count, gpt2_parameter_count, partner_shape

CLASSES = ("96M", "81M", "67M")
PAPER_RATIOS = {"96M": 95 / 124, "81M": 81 / 124, "67M": 67 / 124}  # the paper's sizes over GPT-2's 124M


def _nearest_divisor(n: int, target: float) -> int:
    return min((d for d in range(1, n + 1) if n % d == 0), key=lambda d: (abs(d - target), d))


def class_a_shape(name: str, n_embd: int, n_inner: int | None = None) -> tuple[int, int]:
    """A's shape for ``c_fc`` (paper orientation ``(out, in) = (4d, d)``) of a size class (module docstring)."""
    out, inp = n_inner or 4 * n_embd, n_embd
    if name == "96M":
        return partner_shape((out, inp), (2, 1))  # B = (2, 1): A = (out/2, in)
    if name == "81M":
        return partner_shape((out, inp), (4, 1))  # B = (4, 1): A = (out/4, in)
    if name == "67M":
        return _nearest_divisor(out, math.sqrt(out)), _nearest_divisor(inp, math.sqrt(inp))
    raise ValueError(f"unknown size class {name!r}; choose one of {', '.join(CLASSES)}")


def max_factors(name: str, n_embd: int) -> int:
    """The most Van Loan terms a class allows: the rank of the rearranged ``c_fc``, ``min(p*q, r*t)``."""
    a_shape = class_a_shape(name, n_embd)
    b_shape = partner_shape((4 * n_embd, n_embd), a_shape)
    return min(a_shape[0] * a_shape[1], b_shape[0] * b_shape[1])


def matched_dense_inner(model_config: GPT2Config, target_parameters: int) -> int:
    """The MLP hidden size whose dense GPT-2 has the parameter count closest to ``target_parameters`` (the
    smaller one on a tie), among 1 .. 4 x n_embd.

    The count is linear in the hidden size (each block's c_fc and c_proj), so two counts give the line and only
    the sizes beside its solution are compared (a scan of all 3,072 of GPT-2 small built 3,072 configs: a tenth
    of the paper dry run's time)."""
    def size(inner: int) -> int:
        return gpt2_parameter_count(GPT2Config(**{**model_config.to_dict(), "n_inner": inner}))
    first, per_unit = size(1), size(2) - size(1)
    solution = 1 + (target_parameters - first) // per_unit
    candidates = [inner for inner in (solution, solution + 1) if 1 <= inner <= 4 * model_config.n_embd]
    candidates = candidates or [1 if solution < 1 else 4 * model_config.n_embd]
    return min(candidates, key=lambda inner: abs(first + (inner - 1) * per_unit - target_parameters))


def class_width(model_config: GPT2Config, size_class: str) -> int:
    """The dense MLP width matched to the one-factor Krony model of ``size_class`` on ``model_config``."""
    kron = KroneckerConfig(a_shape=class_a_shape(size_class, model_config.n_embd, model_config.n_inner))
    return matched_dense_inner(model_config, compressed_parameter_count(model_config, kron))
