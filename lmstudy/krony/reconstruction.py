"""How well one Kronecker pair fits each MLP matrix of a model: Van Loan's error per layer against the SVD bound and
a same-size low-rank fit (notebook 03's reconstruction cell)."""

from __future__ import annotations

import pandas as pd
import torch
from transformers import GPT2LMHeadModel

from lmstudy.krony.classes import class_a_shape
from lmstudy.krony.model import KroneckerConfig, factor_pair_parameters, partner_shape, van_loan


def _squared_singular_values(matrix: torch.Tensor) -> torch.Tensor:
    """The squared singular values of ``matrix``, largest first, as the eigenvalues of its smaller Gram matrix.

    Only tail sums are needed (the error of the best rank-k fit is ``sqrt(sum(sigma[k:]**2))``), and in float64 the
    Gram route gives them to rounding: GPT-2 small's ``c_fc`` is a 768 x 768 ``eigvalsh`` instead of a 3072 x 768
    SVD, a third of the time (the SVD was a seventh of notebook 03's paper dry run).
    """
    gram = matrix.T @ matrix if matrix.shape[0] >= matrix.shape[1] else matrix @ matrix.T
    return torch.linalg.eigvalsh(gram).flip(0).clamp(min=0)  # ascending -> largest first; rounding can dip below 0


def reconstruction_errors(model: GPT2LMHeadModel, classes: list[str]) -> pd.DataFrame:
    """Per block, MLP matrix and size class: the relative Frobenius error ``||W - A ⊗ B|| / ||W||`` of the rank-1
    Van Loan factors, the Eckart–Young bound from the singular values of the rearranged ``R(W)`` (they coincide:
    Van Loan is optimal) and, as a reference, the best truncated SVD of ``W`` with at most the pair's parameters."""
    rows = []
    n_embd = model.config.n_embd
    for index, block in enumerate(model.transformer.h):
        for matrix in ("c_fc", "c_proj"):
            weight = getattr(block.mlp, matrix).weight.detach().T.double()  # HF (in, out) -> paper (out, in)
            norm = weight.norm()
            squared_singular_values = _squared_singular_values(weight)  # W's, the same for every class
            for size_class in classes:
                kron = KroneckerConfig(a_shape=class_a_shape(size_class, n_embd, model.config.n_inner))
                a_shape = kron.a_shape_for(matrix)
                b_shape = partner_shape(tuple(weight.shape), a_shape)
                a, b = van_loan(weight, a_shape, b_shape)
                error = (weight - torch.kron(a[0], b[0])).norm() / norm
                (p, q), (r, t) = a_shape, b_shape
                rearranged = weight.reshape(p, r, q, t).permute(0, 2, 1, 3).reshape(p * q, r * t)  # R(W): (p*q, r*t)
                # Eckart–Young: the error of the best rank-1 approximation of R(W)
                bound = _squared_singular_values(rearranged)[1:].sum().sqrt() / norm
                # Truncated SVD of W itself with at most the pair's parameter count (k * (out + in) <= p*q + r*t).
                k = factor_pair_parameters(a_shape, b_shape) // sum(weight.shape)
                lowrank = squared_singular_values[k:].sum().sqrt() / norm
                rows.append({"layer": index, "matrix": matrix, "class": size_class,
                             "van_loan_error": error.item(), "svd_bound": bound.item(),
                             "lowrank_same_params_error": lowrank.item(), "lowrank_rank": k})
    return pd.DataFrame(rows)
