"""Kronecker-factored GPT-2 MLP layers (Krony-PT, Ayoub 2024).

Krony-PT replaces the two MLP matrices of every GPT-2 block (``mlp.c_fc`` and ``mlp.c_proj``) by sums
of Kronecker products and leaves attention and embeddings alone. This module holds the layer, its three
initialisations, ``compress`` / ``decompress`` for a Hugging Face ``GPT2LMHeadModel`` and the parameter
arithmetic behind the paper's Tables 1 and 2 (``lmstudy.krony.table`` prints them).

Orientation (the one thing to keep straight)
--------------------------------------------
The paper (and the official nanoGPT-based code) writes weights the ``nn.Linear`` way, ``W`` of shape
``(out, in)``: ``c_fc.weight`` is ``(3072, 768)``. Hugging Face's ``Conv1D`` stores the transpose,
``(in, out)``, and computes ``x @ weight + bias``. Here the *factors* live in the paper's orientation:

    W (out, in) = sum_f s_f * (A_f ⊗ B_f),   A_f: (p, q) = a_shape,   B_f: (r, t) = b_shape,
    out = p * r,   in = q * t,

so a row of the paper's Table 1 ("Dimension" ``(m1, n1)``) *is* ``a_shape`` of ``c_fc`` and
``B = (3072 // m1, 768 // n1)``. ``c_proj`` (paper shape ``(768, 3072)``) uses the transposed shapes,
``A = (n1, m1)``, exactly as the official code does, so both matrices of a block cost the same.
``to_dense_weight()`` returns the Hugging Face ``(in, out)`` weight, ready for a ``Conv1D``.

Forward without the Kronecker product
-------------------------------------
With ``x`` of length ``in`` read as a ``(q, t)`` matrix ``X`` (``x[j*t + l] = X[j, l]``), the identity
``(A ⊗ B) vec(X) = vec(A X Bᵀ)`` (row-major vec) gives ``y`` as the ``(p, r)`` matrix ``A X Bᵀ``: two
small matmuls. Per token and factor the two orders cost

    A first:  (A X) Bᵀ   p*q*t + p*t*r  = p*t*(q + r)  multiply-adds
    B first:  A (X Bᵀ)   q*t*r + q*r*p  = q*r*(t + p)  multiply-adds

against ``p*q*r*t`` for the dense matmul. The layer picks the cheaper order once, from the shapes. All
factors go through the same two contractions at once (a leading factor axis ``f``); the sum over factors
happens inside the second contraction, and each scalar ``s_f`` is folded into ``A_f`` first (cheap: the
size of ``A``), as the paper suggests. ``A ⊗ B`` is never materialised in ``forward``; only
``to_dense_weight()`` builds it, for export.

Speed: four plans (issue 20)
----------------------------
The memory layout decides the speed as much as the FLOPs. The tokens' ``X`` arrive as ``(N, q, t)`` and
``Y`` must leave as ``(N, p, r)`` (row-major, ``y[i*r + k]``). A single GEMM over all tokens needs the
contracted index to be a matrix side, so each order has two ways to run:

- **GEMM** (``_a_first_gemm`` / ``_b_first_gemm``): both steps are one big GEMM over all tokens; the
  layout fix-ups are copies. A first copies the input (``X`` transposed) and the intermediate ``A X`` and
  writes ``Y`` in place; B first copies the intermediate and the output (the transpose back, fused with the
  bias add). Copies of size 1 sides are free, so this is the plan for ``B = (2, 1)`` / ``(4, 1)`` (the 96M
  and 81M classes: one full-width GEMM plus a cheap broadcast).
- **per token** (``_a_first_per_token`` / ``_b_first_per_token``): one step is a batched matmul over
  tokens (``torch.bmm`` with ``A`` expanded, a view), the other one big GEMM; no copy at all, the sum over
  factors included (``A_f`` are stacked so that the factor axis lands next to the contracted one).

``per_token`` is chosen when the per-token product is at least ``PER_TOKEN_MIN_WIDTH`` (24) wide (its
output width: ``t`` for A first, ``r`` for B first): narrower, BLAS runs the N small products far below its
GEMM rate and the copies are cheaper (measured for every Table 1 scheme at 2,048 tokens, one thread:
``benchmarks/bench_kronecker.py``; the rule picks the fastest plan, or one within noise of it, for every
scheme there and at the shared base's dims). The order stays the FLOP-cheaper one. Two more changes, both
memory passes over output-sized tensors: the bias is added in place into the fresh matmul result (never into
a view of it: autograd would then copy the whole gradient again in backward, ``CopySlices``), and B first
adds it in the same pass that transposes the output back.

What the BLAS plans give, forward + backward of one MLP matrix, 2,048 tokens, one thread, speed-up over the dense
``Conv1D`` (before -> after; CPU time on the shared 2-core machine, ``--clock cpu --previous``): the shared
base's 67M class 1.74 -> 2.76 (``c_fc``) and 2.32 -> 3.87 (``c_proj``) of a 9.6 FLOP ratio, its 4 factors
0.70 -> 0.80-0.94 of 2.4; GPT-2 small's tiny-factor schemes 3.6-8.5 -> 3.8-8.7 of 11.5-27.4 (e.g.
``(96, 32)``: 5.53 -> 7.70 of 19.2); the 96M / 81M classes unchanged (1.3 / 2.2-2.4 at our dims).

Their limit: every matmul of a tiny-factor scheme has a side of 8-48, where MKL runs far below its GEMM rate, and
every intermediate and the output make a round trip through memory between the BLAS calls.

The fused kernel (``lmstudy.krony.fused``, ``fused_kernel.cpp``)
-----------------------------------------------------------------
On the CPU in float32, for factors at least ``FUSED_MIN_SIDE`` (6) wide on every side, the layer runs neither
plan but a C++ kernel (built on first use): each token's products run back to back while its ``X``, intermediate
and ``Y`` are in cache, all through one register-blocked micro-kernel (AVX-512, or AVX2 + FMA); each product is
oriented so that its output rows fill the vector lanes; the first factor starts from the bias and the factor and
bias gradients accumulate in per-thread buffers. A first, forward keeps each token's intermediate ``U = A X`` for
backward; B first, backward recomputes ``W = X Bᵀ``, so for training the kernel runs the order cheaper over forward +
backward (``fused_a_first``). Backward runs ``dA`` and mostly ``dX`` (and ``dB`` for one factor) once per tile of
tokens (A first), transposes in register blocks and prefetches the next token's inputs between the products.
Narrower factors (``B = (4, 1)``) keep the GEMM plan, where it is several times faster. Measured for every scheme,
with the BLAS plans beside it: ``docs/benchmarks.md`` ("Kronecker layer"); the same numbers as the reference
forward, in both orders: ``tests/test_kronecker.py``.

Initialisations
---------------
- ``van_loan``: nearest sum of ``rank`` Kronecker products in Frobenius norm (Van Loan & Pitsianis 1993):
  rearrange ``W`` into ``R(W)`` with rows ``vec(A)``-indexed and columns ``vec(B)``-indexed, so that
  ``A ⊗ B`` becomes the rank-one ``vec(A) vec(B)ᵀ``; the best rank-k approximation of ``R(W)`` (Eckart–
  Young) is the best sum of k Kronecker products. The paper's script calls the randomised
  ``torch.svd_lowrank``; we use an exact ``torch.linalg.svd`` in float64 and fix the sign of every
  singular pair (largest entry of ``u`` positive), so the result is deterministic and reproducible.
  Both factors carry ``sqrt(sigma)`` like the paper's script; scalars (when on) start at 1.
- ``prune``: the paper's pruning initialisation (Sec. 3.4.2), read as written: "inducing sparsity ... and
  prune it by half. This is equivalent to picking the second factor as [1 0]ᵀ": ``B`` is the one-hot
  matrix with a 1 at ``(0, 0)`` and ``A = W[::r, ::t]`` (every r-th row and t-th column, starting with
  the first), so ``A ⊗ B`` equals ``W`` at the kept positions and 0 elsewhere. For the paper's worked
  example (a 6x5 matrix, ``B = [1 0]ᵀ`` of shape (2, 1)) this keeps rows 1, 3, 5 and zeroes rows 2, 4, 6;
  the extracted figure shows a stray seventh row, which we read as a typo. (The official repository's
  commented-out ``init_prune`` keeps the *second* entry of every pair with ``B = [0 1]``; we follow the
  paper.) With Table 1's 96M shape ``(1536, 768)``, ``B`` is ``(2, 1)`` for ``c_fc`` and ``(1, 2)`` for
  ``c_proj``, so the initial model is GPT-2 with every second MLP hidden unit pruned away. The paper
  defines it for one factor; with ``n_factors > 1`` the extra factors start with ``A = 0`` and a random
  ``B`` (our choice), so the initial function is the pruned one and the extra factors still get gradients.
- ``random``: ``A`` and ``B`` i.i.d. normal with equal std chosen so the folded weight has the std that
  GPT-2 itself would use (``initializer_range``, divided by ``sqrt(2 * n_layer)`` for ``c_proj``). The
  official code draws every factor from N(0, 0.02), which makes the folded weight ~50x too small.

Parameter counting
------------------
``lmstudy.training.count_parameters(model)`` counts unique parameters (tied embeddings once). ``gpt2_parameter_count``
and ``compressed_parameter_count`` compute the same from a ``GPT2Config`` alone. The paper's Table 1
counts a factor pair as ``p*q + r*t``; its "GPT2" row treats the dense matrix as ``W ⊗ (1x1)``, hence
124,439,808 + 24 = 124,439,832.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import nn
from tqdm.auto import tqdm
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.pytorch_utils import Conv1D

from lmstudy.krony import fused

INITS = ("van_loan", "prune", "random")
PER_TOKEN_MIN_WIDTH = 24  # KroneckerLinear.per_token: see the module docstring, "Speed"
FUSED_MIN_SIDE = 6  # KroneckerLinear.fused: the fused kernel for factors at least this wide on every side
MLP_MATRICES = ("c_fc", "c_proj")
LLAMA_MATRICES = ("gate_proj", "up_proj", "down_proj")  # a Llama block's gated MLP (lmstudy.krony.llama)
WIDENING, NARROWING = ("c_fc", "gate_proj", "up_proj"), ("c_proj", "down_proj")  # (out, in) = (I, d) / (d, I)

Shape = tuple[int, int]


# ---------------------------------------------------------------------------------------------------
# Shapes and configuration
# ---------------------------------------------------------------------------------------------------


def partner_shape(weight_shape: Shape, a_shape: Shape) -> Shape:
    """The shape of B such that A (a_shape) ⊗ B has ``weight_shape``; a clear error if A does not fit."""
    (rows, cols), (a_rows, a_cols) = weight_shape, a_shape
    if a_rows < 1 or a_cols < 1 or rows % a_rows or cols % a_cols:
        raise ValueError(
            f"a_shape {tuple(a_shape)} does not divide the {tuple(weight_shape)} weight (out, in): each side "
            f"of A must divide the matching side of the weight (GPT-2 small's c_fc is (3072, 768): e.g. (768, 768))"
        )
    return rows // a_rows, cols // a_cols


@dataclass
class KroneckerConfig:
    """How to factor the MLPs of a GPT-2 model.

    ``a_shape`` is the first factor of ``c_fc`` in the paper's ``(out, in)`` orientation, i.e. the
    "Dimension" column of the paper's Table 1 (``(768, 768)`` is the 81M model of GPT-2 small).
    ``c_proj`` uses the transposed shape. ``scalars`` adds one learnable ``s_f`` per factor.
    """

    a_shape: Shape
    n_factors: int = 1
    scalars: bool = False
    matrices: tuple[str, ...] = MLP_MATRICES

    def __post_init__(self) -> None:
        # Accept lists (YAML / papermill parameters) but store tuples, so configs hash and compare.
        self.a_shape = tuple(int(side) for side in self.a_shape)
        self.matrices = tuple(self.matrices)
        if len(self.a_shape) != 2:
            raise ValueError(f"a_shape must be two integers (rows, cols), got {self.a_shape}")
        if self.n_factors < 1:
            raise ValueError(f"n_factors must be at least 1, got {self.n_factors}")
        if not self.matrices or not (set(self.matrices) <= set(MLP_MATRICES)
                                     or set(self.matrices) <= set(LLAMA_MATRICES)):
            raise ValueError(f"matrices must be a non-empty subset of {MLP_MATRICES} (GPT-2) or of {LLAMA_MATRICES} "
                             f"(Llama), got {self.matrices}")

    def a_shape_for(self, matrix: str) -> Shape:
        """A's shape for ``c_fc`` (as given) or ``c_proj`` (transposed: its weight is c_fc's transposed); for a
        Llama MLP, ``gate_proj`` and ``up_proj`` as ``c_fc``, ``down_proj`` as ``c_proj``."""
        if matrix in WIDENING:
            return self.a_shape
        if matrix in NARROWING:
            return self.a_shape[1], self.a_shape[0]
        raise ValueError(f"unknown MLP matrix {matrix!r}; expected one of {MLP_MATRICES + LLAMA_MATRICES}")


# ---------------------------------------------------------------------------------------------------
# Initialisations: each returns A (rank, *a_shape) and B (rank, *b_shape) with W ≈ sum_f A_f ⊗ B_f
# ---------------------------------------------------------------------------------------------------


def _check_factor_shapes(weight: torch.Tensor, a_shape: Shape, b_shape: Shape) -> None:
    if weight.dim() != 2:
        raise ValueError(f"expected a 2-D weight matrix, got shape {tuple(weight.shape)}")
    expected = (a_shape[0] * b_shape[0], a_shape[1] * b_shape[1])
    if tuple(weight.shape) != expected:
        raise ValueError(
            f"A {tuple(a_shape)} ⊗ B {tuple(b_shape)} has shape {expected}, but the weight is "
            f"{tuple(weight.shape)}; pass b_shape=partner_shape(weight.shape, a_shape)"
        )


def van_loan(weight: torch.Tensor, a_shape: Shape, b_shape: Shape, rank: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Nearest sum of ``rank`` Kronecker products to ``weight`` in Frobenius norm (exact SVD, deterministic).

    ``weight`` is ``(p*r, q*t)`` for ``a_shape=(p, q)``, ``b_shape=(r, t)``. Returns ``A`` of shape
    ``(rank, p, q)`` and ``B`` of shape ``(rank, r, t)``, each scaled by the square root of its singular
    value. ``rank = min(p*q, r*t)`` reproduces ``weight`` exactly (up to float error).
    """
    _check_factor_shapes(weight, a_shape, b_shape)
    (p, q), (r, t) = a_shape, b_shape
    max_rank = min(p * q, r * t)
    if not 1 <= rank <= max_rank:
        raise ValueError(f"rank must be between 1 and {max_rank} for A {tuple(a_shape)}, B {tuple(b_shape)}; got {rank}")
    # R(W)[(i, j), (k, l)] = W[i*r + k, j*t + l], so A ⊗ B becomes the rank-one vec(A) vec(B)ᵀ.
    rearranged = (
        weight.detach().to(torch.float64)
        .reshape(p, r, q, t)  # (p, r, q, t): row index i*r + k, column index j*t + l
        .permute(0, 2, 1, 3)  # (p, q, r, t)
        .reshape(p * q, r * t)  # (p*q, r*t)
    )
    u, sigma, vh = torch.linalg.svd(rearranged, full_matrices=False)  # u: (p*q, k), sigma: (k,), vh: (k, r*t)
    u, sigma, vh = u[:, :rank], sigma[:rank], vh[:rank]
    # Singular pairs are defined up to a joint sign; fix it so results do not depend on the LAPACK build.
    largest = u.abs().argmax(dim=0)  # (rank,)
    signs = torch.sign(u[largest, torch.arange(rank)])
    signs[signs == 0] = 1.0
    u, vh = u * signs, vh * signs[:, None]  # flipping both keeps every product u_i v_iᵀ
    root = sigma.sqrt()  # (rank,): each factor carries sqrt(sigma_i), like the paper's script
    a = (u * root).T.reshape(rank, p, q)  # (p*q, rank) -> (rank, p*q) -> (rank, p, q)
    b = (vh * root[:, None]).reshape(rank, r, t)  # (rank, r*t) -> (rank, r, t)
    return a.to(weight.dtype), b.to(weight.dtype)


def prune_init(weight: torch.Tensor, a_shape: Shape, b_shape: Shape) -> tuple[torch.Tensor, torch.Tensor]:
    """The paper's pruning initialisation: ``B`` one-hot at (0, 0), ``A = W[::r, ::t]``.

    ``A ⊗ B`` keeps ``W`` where the row is a multiple of ``r`` and the column a multiple of ``t`` and is
    zero elsewhere (for ``B = [1 0]ᵀ``: every second row pruned). Returns ``A (1, p, q)``, ``B (1, r, t)``.
    """
    _check_factor_shapes(weight, a_shape, b_shape)
    r, t = b_shape
    a = weight.detach()[::r, ::t].clone(memory_format=torch.contiguous_format)  # (p, q): the kept entries
    b = torch.zeros(b_shape, dtype=weight.dtype, device=weight.device)  # (r, t)
    b[0, 0] = 1.0
    return a.unsqueeze(0), b.unsqueeze(0)  # (1, p, q), (1, r, t)


def random_init(
    a_shape: Shape, b_shape: Shape, rank: int = 1, std: float = 0.02, *,
    generator: torch.Generator | None = None, device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random factors whose folded weight ``sum_f A_f ⊗ B_f`` has entries of standard deviation ``std``.

    Each entry of the sum is a sum of ``rank`` products ``a * b``, so ``std_a * std_b = std / sqrt(rank)``;
    the two factors get the same std.
    """
    factor_std = math.sqrt(std / math.sqrt(rank))
    options = dict(generator=generator, device=device, dtype=dtype)
    a = torch.randn((rank, *a_shape), **options) * factor_std  # (rank, p, q)
    b = torch.randn((rank, *b_shape), **options) * factor_std  # (rank, r, t)
    return a, b


# ---------------------------------------------------------------------------------------------------
# The layer
# ---------------------------------------------------------------------------------------------------


class KroneckerLinear(nn.Module):
    """Drop-in replacement for Hugging Face's ``Conv1D``: ``y = x @ Wᵀ + b``, ``W = sum_f s_f A_f ⊗ B_f``.

    ``a_shape`` is in the ``(out, in)`` orientation (see the module docstring). Parameters:
    ``a_factors (n_factors, p, q)``, ``b_factors (n_factors, r, t)``, ``scalars (n_factors,)`` when
    ``scalars=True`` (else ``None``) and ``bias (out,)``.
    """

    def __init__(self, in_features: int, out_features: int, a_shape: Shape, n_factors: int = 1, scalars: bool = False,
                 bias: bool = True) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.a_shape = (int(a_shape[0]), int(a_shape[1]))
        self.b_shape = partner_shape((out_features, in_features), self.a_shape)
        self.n_factors = n_factors
        (p, q), (r, t) = self.a_shape, self.b_shape
        # A usable random start (folded std 0.02, GPT-2's); ``from_conv1d`` overwrites it with its init.
        a, b = random_init(self.a_shape, self.b_shape, n_factors, std=0.02)
        self.a_factors = nn.Parameter(a)  # (n_factors, p, q)
        self.b_factors = nn.Parameter(b)  # (n_factors, r, t)
        self.scalars = nn.Parameter(torch.ones(n_factors)) if scalars else None
        # A Llama MLP has no biases (bias=False): the plans and the fused kernel then add a zero buffer, not saved.
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        self.register_buffer("zero_bias", None if bias else torch.zeros(out_features), persistent=False)
        # The cheaper contraction order and the plan are fixed by the shapes (see the module docstring).
        self.a_first = p * t * (q + r) <= q * r * (t + p)
        # Per-token batched matmuls pay off when each token's product is wide enough for the BLAS kernels:
        # its output width is t (A first: A X_n is (p, t)) or r (B first: A W_n is (p, r)).
        self.per_token = (t if self.a_first else r) >= PER_TOKEN_MIN_WIDTH
        # On the CPU in float32 the fused kernel (lmstudy.krony.fused) runs both contractions token by token
        # instead of the BLAS plans, when it could be built, for factors at least FUSED_MIN_SIDE wide on every side:
        # a narrower side (B = (4, 1) of the 96M / 81M classes) leaves its vector lanes mostly idle, where the
        # GEMM plan runs one full-width GEMM (measured for every Table 1 scheme: docs/benchmarks.md).
        self.fused = min(p, q, r, t) >= FUSED_MIN_SIDE
        # The kernel's order when gradients are wanted: B first keeps nothing for backward and recomputes W = X Bᵀ
        # there, so over forward + backward A first can be the cheaper one although its forward costs more (the
        # shared base's c_fc, (24, 12): 11-16% faster; git history). Without gradients: self.a_first.
        self.fused_a_first = 3 * p * t * (q + r) <= 3 * q * r * (t + p) + q * r * t

    @classmethod
    def from_conv1d(
        cls, conv: Conv1D, a_shape: Shape, n_factors: int = 1, scalars: bool = False, init: str = "van_loan",
        std: float = 0.02, generator: torch.Generator | None = None,
    ) -> "KroneckerLinear":
        """A factored copy of GPT-2's ``conv`` (same bias), initialised with ``init`` in ``INITS``.

        ``std`` is only used by ``random`` (and for the extra ``B`` factors of ``prune``).
        """
        weight = conv.weight.detach().T  # HF (in, out) -> paper (out, in)
        return cls.from_weight(weight, conv.bias, a_shape, n_factors, scalars, init, std, generator)

    @classmethod
    def from_linear(
        cls, linear: nn.Linear, a_shape: Shape, n_factors: int = 1, scalars: bool = False, init: str = "van_loan",
        std: float = 0.02, generator: torch.Generator | None = None,
    ) -> "KroneckerLinear":
        """A factored copy of an ``nn.Linear`` (a Llama MLP's ``gate_proj``, ``up_proj``, ``down_proj``; its bias, or
        none), as :meth:`from_conv1d`."""
        return cls.from_weight(linear.weight.detach(), linear.bias, a_shape, n_factors, scalars, init, std, generator)

    @classmethod
    def from_weight(
        cls, weight: torch.Tensor, bias: torch.Tensor | None, a_shape: Shape, n_factors: int = 1,
        scalars: bool = False, init: str = "van_loan", std: float = 0.02, generator: torch.Generator | None = None,
    ) -> "KroneckerLinear":
        """The layer of ``weight`` (paper orientation ``(out, in)``) and ``bias`` (None: a layer without one)."""
        if init not in INITS:
            raise ValueError(f"unknown init {init!r}; choose one of {', '.join(INITS)}")
        out_features, in_features = weight.shape
        with torch.device(weight.device):  # build in place: no CPU round trip, free on the meta device
            layer = cls(in_features, out_features, a_shape, n_factors, scalars, bias=bias is not None).to(
                dtype=weight.dtype)
        options = dict(generator=generator, device=weight.device, dtype=weight.dtype)
        if init == "van_loan":
            a, b = van_loan(weight, layer.a_shape, layer.b_shape, rank=n_factors)
        elif init == "random":
            a, b = random_init(layer.a_shape, layer.b_shape, n_factors, std, **options)
        else:
            a, b = prune_init(weight, layer.a_shape, layer.b_shape)
            if n_factors > 1:
                # Extra factors: A = 0 keeps the pruned function; a random B lets A receive gradients.
                _, extra_b = random_init(layer.a_shape, layer.b_shape, n_factors - 1, std, **options)
                a = torch.cat([a, torch.zeros((n_factors - 1, *layer.a_shape), dtype=a.dtype, device=a.device)])
                b = torch.cat([b, extra_b])
        with torch.no_grad():
            layer.a_factors.copy_(a)
            layer.b_factors.copy_(b)
            if bias is not None:
                layer.bias.copy_(bias)
        return layer

    def scaled_a_factors(self) -> torch.Tensor:
        """``s_f * A_f`` (the scalars folded into the small first factor), shape ``(n_factors, p, q)``."""
        if self.scalars is None:
            return self.a_factors
        return self.a_factors * self.scalars[:, None, None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x (..., in) -> (..., out)``: two contractions in the order and plan fixed at construction."""
        a, b, bias = self.scaled_a_factors(), self.b_factors, self.added_bias()  # (f, p, q), (f, r, t), (out,)
        if self.fused and fused.applies(x, a):
            training = torch.is_grad_enabled() and any(t.requires_grad for t in (x, a, b, bias))
            a_first = self.fused_a_first if training else self.a_first
            return fused.kronecker(x, a, b, bias, a_first, keep=training)  # (..., in) -> (..., out)
        x_matrix = x.reshape(-1, self.a_shape[1], self.b_shape[1])  # (..., in) -> (N, q, t), x[j*t + l] = X[j, l]
        if self.a_first:
            plan = self._a_first_per_token if self.per_token else self._a_first_gemm
        else:
            plan = self._b_first_per_token if self.per_token else self._b_first_gemm
        y = plan(x_matrix, a, b)  # (N, p*r), bias included, y[i*r + k] = Y[i, k]
        return y.view(*x.shape[:-1], self.out_features)

    def _a_first_gemm(self, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """(A X) Bᵀ as two big GEMMs; copies the input (transposed) and the intermediate, never the output."""
        (f, p, q), (_, r, t), n = a.shape, b.shape, x.size(0)
        x_t = x.transpose(1, 2).reshape(n * t, q)  # copy (free when t = 1): rows (token, l), columns j
        z = x_t @ a.reshape(f * p, q).T  # A_f X for every factor: (N*t, f*p), rows (token, l), columns (f, i)
        z = z.view(n, t * f, p).transpose(1, 2).reshape(n, p, t * f)  # copy (free when t*f = 1): (N, p, (l, f))
        y = torch.matmul(z, b.permute(2, 0, 1).reshape(t * f, r))  # one GEMM summed over (l, f): (N, p, r)
        return self._add_bias(y)

    def _a_first_per_token(self, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """A X_n as one batched matmul over tokens, then (A X) Bᵀ as one GEMM: no copies at all."""
        (f, p, q), (_, r, t), n = a.shape, b.shape, x.size(0)
        a_tall = a.transpose(0, 1).reshape(p * f, q)  # A_f stacked with rows (i, f), so that A X_n comes out
        z = torch.bmm(a_tall.expand(n, p * f, q), x)  # as (N, p*f, t) = (N, p, (f, l)) with no copy; expand: a view
        y = torch.matmul(z.view(n, p, f * t), b.transpose(1, 2).reshape(f * t, r))  # one GEMM over (f, l): (N, p, r)
        return self._add_bias(y)

    def _b_first_gemm(self, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """A (X Bᵀ) as two big GEMMs; copies the intermediate and the output (together with the bias add)."""
        (f, p, q), (_, r, t), n = a.shape, b.shape, x.size(0)
        w = x.reshape(n * q, t) @ b.reshape(f * r, t).T  # X B_fᵀ for every factor: (N*q, f*r), rows (token, j)
        w = w.view(n, q * f, r).transpose(1, 2).reshape(n * r, q * f)  # copy (free when r = 1): rows (token, k)
        y = w @ a.permute(2, 0, 1).reshape(q * f, p)  # summed over (j, f): (N*r, p), rows (token, k), columns i
        # The transpose back to (token, i, k) and the bias add in one pass: with the contiguous bias as the first
        # operand the sum comes out contiguous (the .view in forward would fail otherwise, never copy silently).
        y = self.added_bias().view(p, r) + y.view(n, r, p).transpose(1, 2)  # (N, p, r), contiguous
        return y.view(n, p * r)

    def _b_first_per_token(self, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """X Bᵀ as one GEMM (no input copy), then A (X Bᵀ) as one batched matmul over tokens: no copies at all."""
        (f, p, q), (_, r, t), n = a.shape, b.shape, x.size(0)
        w = x.reshape(n * q, t) @ b.reshape(f * r, t).T  # (N*q, f*r), rows (token, j), columns (f, k)
        w = w.view(n, q * f, r)  # per token the (q*f, r) matrix with rows (j, f)
        a_wide = a.permute(1, 2, 0).reshape(p, q * f)  # [A_1 .. A_f] interleaved to match: columns (j, f)
        y = torch.bmm(a_wide.expand(n, p, q * f), w)  # summed over (j, f): (N, p, r); expand is a view
        return self._add_bias(y)

    def _add_bias(self, y: torch.Tensor) -> torch.Tensor:
        """``y (N, p, r) + bias`` in place, as ``(N, p*r)``: no second output-sized tensor.

        ``y`` must be a fresh matmul result, not a view: an in-place add on a view makes autograd copy the
        whole gradient again in backward (``CopySlices``). ``torch.matmul`` of a 3-D by a 2-D tensor folds into
        one GEMM and returns a non-view, as ``torch.bmm`` does.
        """
        y += self.added_bias().view(y.shape[1:])
        return y.view(y.size(0), -1)

    def added_bias(self) -> torch.Tensor:
        """The bias the plans add: the parameter, or zeros for a layer without one (``bias=False``)."""
        return self.bias if self.bias is not None else self.zero_bias

    def to_dense_weight(self) -> torch.Tensor:
        """The folded weight ``sum_f s_f A_f ⊗ B_f`` in Hugging Face ``Conv1D`` layout ``(in, out)`` (``.T``: an
        ``nn.Linear``'s ``(out, in)``)."""
        (p, q), (r, t) = self.a_shape, self.b_shape
        blocks = torch.einsum("fpq,frt->prqt", self.scaled_a_factors(), self.b_factors)  # (p, r, q, t)
        return blocks.reshape(p * r, q * t).T  # (out, in) -> (in, out)

    def multiply_adds_per_token(self) -> int:
        """Multiply-adds of one forward pass for one token, in the order the layer uses."""
        (p, q), (r, t) = self.a_shape, self.b_shape
        return self.n_factors * (p * t * (q + r) if self.a_first else q * r * (t + p))

    def extra_repr(self) -> str:
        order = ("A first" if self.a_first else "B first") + (", per token" if self.per_token else ", GEMM")
        return (
            f"in={self.in_features}, out={self.out_features}, A={self.a_shape}, B={self.b_shape}, "
            f"factors={self.n_factors}, scalars={self.scalars is not None}, order={order}"
        )


# ---------------------------------------------------------------------------------------------------
# Whole models
# ---------------------------------------------------------------------------------------------------


def _mlp_std(model_config: GPT2Config, matrix: str) -> float:
    # GPT-2's own init: c_proj is scaled down by sqrt(2 * n_layer) (two residual branches per block).
    std = model_config.initializer_range
    return std / math.sqrt(2 * model_config.n_layer) if matrix == "c_proj" else std


def compress(
    model: GPT2LMHeadModel, config: KroneckerConfig, init: str = "van_loan", *,
    generator: torch.Generator | None = None,
) -> GPT2LMHeadModel:
    """Replace ``mlp.c_fc`` / ``mlp.c_proj`` (``config.matrices``) of every block by a ``KroneckerLinear``.

    Works in place on any GPT-2 size and returns ``model``. ``init`` is ``van_loan`` (from the current
    weights), ``prune`` (from the current weights) or ``random``.
    """
    blocks = getattr(getattr(model, "transformer", None), "h", None)
    if blocks is None:
        raise ValueError(f"compress expects a GPT2LMHeadModel (with .transformer.h), got {type(model).__name__}: "
                         "Kronecker factors replace GPT-2's MLP matrices (c_fc, c_proj); for a Llama-family "
                         "model's gated MLP use lmstudy.krony.llama.compress_llama")
    # Check every target before touching any, so a bad call never leaves a half-compressed model.
    for index, block in enumerate(blocks):
        for matrix in config.matrices:
            conv = getattr(block.mlp, matrix)
            if not isinstance(conv, Conv1D):
                raise ValueError(
                    f"transformer.h.{index}.mlp.{matrix} is a {type(conv).__name__}, not a dense Conv1D: "
                    "already compressed? (decompress(model) gives the dense model back)"
                )
            partner_shape((conv.nf, conv.nx), config.a_shape_for(matrix))
    for block in tqdm(blocks, desc=f"Kronecker {init} init", leave=False):
        for matrix in config.matrices:
            layer = KroneckerLinear.from_conv1d(
                getattr(block.mlp, matrix), config.a_shape_for(matrix), config.n_factors, config.scalars, init,
                std=_mlp_std(model.config, matrix), generator=generator,
            )
            setattr(block.mlp, matrix, layer)
    return model


def kronecker_layers(model: nn.Module) -> list[tuple[str, KroneckerLinear]]:
    """Every ``KroneckerLinear`` in ``model`` with its qualified name (e.g. ``transformer.h.0.mlp.c_fc``)."""
    return [(name, module) for name, module in model.named_modules() if isinstance(module, KroneckerLinear)]


@torch.no_grad()
def decompress(model: GPT2LMHeadModel) -> GPT2LMHeadModel:
    """A plain dense copy of a compressed model: every ``KroneckerLinear`` folded back into a ``Conv1D`` (a Llama
    MLP's: into an ``nn.Linear``).

    The input model is left untouched (it can keep training); the copy has the same logits and can be
    saved with ``save_pretrained`` and evaluated like any GPT-2, as the official code does for evaluation.
    """
    dense = copy.deepcopy(model)
    for name, layer in kronecker_layers(dense):
        parent_name, _, attribute = name.rpartition(".")
        weight = layer.to_dense_weight()  # (in, out)
        with torch.device(weight.device):
            if attribute in LLAMA_MATRICES:  # nn.Linear stores (out, in)
                folded = nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None)
                folded.to(dtype=weight.dtype).weight.copy_(weight.T)
            else:
                folded = Conv1D(layer.out_features, layer.in_features).to(dtype=weight.dtype)
                folded.weight.copy_(weight)
        if layer.bias is not None:
            folded.bias.copy_(layer.bias)
        setattr(dense.get_submodule(parent_name), attribute, folded)
    return dense


# ---------------------------------------------------------------------------------------------------
# Parameter counting
# ---------------------------------------------------------------------------------------------------


def factor_pair_parameters(a_shape: Shape, b_shape: Shape) -> int:
    """Parameters of one pair ``A ⊗ B``: ``p*q + r*t`` (the "params" column of the paper's Table 1)."""
    return a_shape[0] * a_shape[1] + b_shape[0] * b_shape[1]


def _mlp_weight_shapes(model_config: GPT2Config) -> dict[str, Shape]:
    """Paper-orientation (out, in) shapes of the two MLP weights of one block."""
    inner = model_config.n_inner or 4 * model_config.n_embd
    return {"c_fc": (inner, model_config.n_embd), "c_proj": (model_config.n_embd, inner)}


def gpt2_parameter_count(model_config: GPT2Config, include_position_embeddings: bool = True) -> int:
    """Parameters of a dense ``GPT2LMHeadModel`` computed from its config alone (no weights).

    ``include_position_embeddings=False`` gives nanoGPT's ``get_num_params()`` convention.
    """
    d, n_layer = model_config.n_embd, model_config.n_layer
    inner = model_config.n_inner or 4 * d
    per_block = (
        2 * d  # ln_1
        + d * 3 * d + 3 * d  # attn.c_attn
        + d * d + d  # attn.c_proj
        + 2 * d  # ln_2
        + d * inner + inner  # mlp.c_fc
        + inner * d + d  # mlp.c_proj
    )
    embeddings = model_config.vocab_size * d + (model_config.n_positions * d if include_position_embeddings else 0)
    lm_head = 0 if model_config.tie_word_embeddings else model_config.vocab_size * d
    return embeddings + n_layer * per_block + 2 * d + lm_head  # + ln_f


def compressed_parameter_count(
    model_config: GPT2Config, config: KroneckerConfig, include_position_embeddings: bool = True,
) -> int:
    """Parameters of ``compress(GPT2LMHeadModel(model_config), config)`` from the configs alone."""
    return (gpt2_parameter_count(model_config, include_position_embeddings)
            + factored_parameter_change(_mlp_weight_shapes(model_config), config, model_config.n_layer))


def factored_parameter_change(shapes: dict[str, Shape], config: KroneckerConfig, n_blocks: int) -> int:
    """The parameters that factoring ``config.matrices`` (``shapes``: each MLP matrix's ``(out, in)``) in each of
    ``n_blocks`` blocks adds (negative: removes); biases stay as they are."""
    change = 0
    for matrix, shape in shapes.items():
        if matrix not in config.matrices:
            continue
        a_shape = config.a_shape_for(matrix)
        factored = config.n_factors * factor_pair_parameters(a_shape, partner_shape(shape, a_shape))
        factored += config.n_factors if config.scalars else 0
        change += n_blocks * (factored - shape[0] * shape[1])
    return change
