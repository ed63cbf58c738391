"""Kronecker-factored GPT-2 MLPs (lmstudy.krony.model) and the Krony-PT parameter tables."""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.pytorch_utils import Conv1D

from lmstudy.krony import fused
from lmstudy.krony import table as krony_table
from lmstudy.krony.model import (
    KroneckerConfig, KroneckerLinear, compress, compressed_parameter_count, decompress,
    gpt2_parameter_count, kronecker_layers, partner_shape, prune_init, random_init, van_loan,
)
from lmstudy.training import count_parameters


def tiny_config(**overrides) -> GPT2Config:
    settings = dict(
        n_layer=2, n_head=2, n_embd=32, vocab_size=97, n_positions=32, bos_token_id=0, eos_token_id=0,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )
    return GPT2Config(**{**settings, **overrides})


def tiny_model(seed: int = 0, **overrides) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    return GPT2LMHeadModel(tiny_config(**overrides)).eval()


def token_batch(vocab_size: int = 97, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab_size, (2, 16), generator=torch.Generator().manual_seed(seed))


def kron_sum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Reference sum_f A_f ⊗ B_f built with torch.kron (independent of the module's einsum)."""
    return sum(torch.kron(a_f, b_f) for a_f, b_f in zip(a, b))


def previous_forward(layer: KroneckerLinear, x: torch.Tensor) -> torch.Tensor:
    """The layer's forward before issue 20 (two plain matmuls with permute copies), kept as the reference.

    The faster layer must compute the same numbers; ``benchmarks/bench_kronecker.py --previous`` times this
    copy for the before / after table. Do not "improve" it.
    """
    (p, q), (r, t) = layer.a_shape, layer.b_shape
    f = layer.n_factors
    a, b = layer.scaled_a_factors(), layer.b_factors  # (f, p, q), (f, r, t)
    x_matrix = x.reshape(-1, q, t)  # (N, q, t)
    n = x_matrix.size(0)
    if p * t * (q + r) <= q * r * (t + p):  # A first
        z = x_matrix.transpose(1, 2).reshape(n * t, q) @ a.reshape(f * p, q).T  # (N*t, f*p)
        z = z.reshape(n, t * f, p).transpose(1, 2)  # (N, p, t*f)
        y = z @ b.permute(2, 0, 1).reshape(t * f, r)  # (N, p, r)
    else:  # B first
        w = x_matrix.reshape(n * q, t) @ b.reshape(f * r, t).T  # (N*q, f*r)
        w = w.reshape(n, q * f, r).transpose(1, 2)  # (N, r, q*f)
        y = (w @ a.permute(2, 0, 1).reshape(q * f, p)).transpose(1, 2)  # (N, p, r)
    return y.reshape(*x.shape[:-1], layer.out_features) + layer.bias


# ------------------------------------------------------------------------------------------ Van Loan


def test_full_rank_van_loan_reproduces_the_weight():
    weight = torch.randn(24, 20, generator=torch.Generator().manual_seed(0))
    a_shape, b_shape = (4, 5), (6, 4)
    a, b = van_loan(weight, a_shape, b_shape, rank=min(4 * 5, 6 * 4))
    assert a.shape == (20, 4, 5) and b.shape == (20, 6, 4)
    assert torch.allclose(kron_sum(a, b), weight, atol=1e-5)


def test_van_loan_recovers_an_exact_kronecker_product_and_is_deterministic():
    generator = torch.Generator().manual_seed(1)
    a_true, b_true = torch.randn(3, 4, generator=generator), torch.randn(5, 2, generator=generator)
    weight = torch.kron(a_true, b_true)
    a, b = van_loan(weight, (3, 4), (5, 2), rank=1)
    assert torch.allclose(torch.kron(a[0], b[0]), weight, atol=1e-5)
    again_a, again_b = van_loan(weight.clone(), (3, 4), (5, 2), rank=1)
    assert torch.equal(a, again_a) and torch.equal(b, again_b)
    # Sign convention: the largest entry of vec(A) is positive.
    assert a[0].flatten()[a[0].abs().argmax()] > 0


def test_van_loan_error_is_the_eckart_young_bound():
    """Rank-k error² = sum of the squared trailing singular values of R(W), built here with plain loops."""
    weight = torch.randn(12, 10, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    (p, q), (r, t) = (3, 5), (4, 2)
    rearranged = torch.empty(p * q, r * t, dtype=torch.float64)
    for i in range(p):
        for j in range(q):
            for k in range(r):
                for l in range(t):
                    rearranged[i * q + j, k * t + l] = weight[i * r + k, j * t + l]
    sigma = torch.linalg.svdvals(rearranged)
    errors = []
    for rank in (1, 3, 6):
        a, b = van_loan(weight, (p, q), (r, t), rank)
        error = torch.linalg.matrix_norm(weight - kron_sum(a, b))
        assert error.item() == pytest.approx(sigma[rank:].square().sum().sqrt().item(), rel=1e-9, abs=1e-12)
        errors.append(error.item())
    assert errors == sorted(errors, reverse=True)


def test_van_loan_rejects_bad_shapes_and_ranks():
    weight = torch.randn(12, 10)
    with pytest.raises(ValueError, match="rank must be between 1 and 8"):
        van_loan(weight, (3, 5), (4, 2), rank=9)
    with pytest.raises(ValueError, match="partner_shape"):
        van_loan(weight, (3, 5), (4, 3))
    with pytest.raises(ValueError, match=r"a_shape \(5, 5\) does not divide"):
        partner_shape((12, 10), (5, 5))


# ------------------------------------------------------------------------------------------ pruning


def test_prune_init_is_the_papers_construction():
    """The paper's Sec. 3.4.2 example: a 6x5 matrix, every second row pruned, B = [1 0]ᵀ."""
    weight = torch.arange(1.0, 31.0).reshape(6, 5)  # a_ij = 5 * (i - 1) + j
    a, b = prune_init(weight, (3, 5), (2, 1))
    expected_a = torch.tensor([
        [1.0, 2.0, 3.0, 4.0, 5.0],  # a_1j
        [11.0, 12.0, 13.0, 14.0, 15.0],  # a_3j
        [21.0, 22.0, 23.0, 24.0, 25.0],  # a_5j
    ])
    assert torch.equal(a[0], expected_a)
    assert torch.equal(b[0], torch.tensor([[1.0], [0.0]]))
    pruned = torch.kron(a[0], b[0])
    assert torch.equal(pruned[0::2], weight[0::2]) and torch.count_nonzero(pruned[1::2]) == 0
    # The transposed case (B = [1 0], as for the 95M model's c_fc in Sec. 3.2) prunes every second column.
    a, b = prune_init(weight.T, (5, 3), (1, 2))
    assert torch.equal(b[0], torch.tensor([[1.0, 0.0]]))
    pruned = torch.kron(a[0], b[0])
    assert torch.equal(pruned[:, 0::2], weight.T[:, 0::2]) and torch.count_nonzero(pruned[:, 1::2]) == 0


def test_prune_compression_equals_gpt2_with_every_second_hidden_unit_removed():
    model = tiny_model()
    reference = tiny_model()
    with torch.no_grad():  # HF Conv1D layout: c_fc (in, hidden), c_proj (hidden, in)
        for block in reference.transformer.h:
            block.mlp.c_fc.weight[:, 1::2] = 0.0
            block.mlp.c_proj.weight[1::2, :] = 0.0
    compress(model, KroneckerConfig(a_shape=(64, 32)), init="prune")  # Table 1's 96M pattern: B = (2, 1)
    tokens = token_batch()
    assert torch.allclose(model(tokens).logits, reference(tokens).logits, atol=1e-5)


def test_prune_with_extra_factors_keeps_the_pruned_function():
    conv = Conv1D(12, 10)
    one = KroneckerLinear.from_conv1d(conv, (6, 10), n_factors=1, init="prune")
    three = KroneckerLinear.from_conv1d(conv, (6, 10), n_factors=3, init="prune")
    assert torch.allclose(one.to_dense_weight(), three.to_dense_weight())
    assert torch.count_nonzero(three.b_factors[1:]) > 0


# ------------------------------------------------------------------------------------------ the layer


@pytest.mark.parametrize("n_factors", [1, 2, 5])
@pytest.mark.parametrize("scalars", [False, True])
@pytest.mark.parametrize("a_first", [True, False])
@pytest.mark.parametrize("per_token, use_fused", [(True, False), (False, False), (False, True)])
def test_factored_forward_equals_the_dense_weight(n_factors, scalars, a_first, per_token, use_fused):
    conv = Conv1D(24, 20)
    with torch.no_grad():
        conv.bias.normal_()
    generator = torch.Generator().manual_seed(n_factors)
    layer = KroneckerLinear.from_conv1d(conv, (4, 5), n_factors, scalars, init="random", generator=generator)
    if scalars:
        with torch.no_grad():
            layer.scalars.normal_(generator=generator)
    layer.a_first, layer.per_token, layer.fused = a_first, per_token, use_fused  # all four plans and the kernel
    layer.fused_a_first = a_first
    x = torch.randn(3, 7, 20, generator=generator)
    dense = layer.to_dense_weight()  # (in, out)
    assert dense.shape == (20, 24)
    scale = layer.scalars if scalars else torch.ones(n_factors)
    assert torch.allclose(dense.T, kron_sum(layer.a_factors * scale[:, None, None], layer.b_factors), atol=1e-6)
    assert torch.allclose(layer(x), x @ dense + layer.bias, atol=1e-5)


class _RecordOps(TorchDispatchMode):
    """Records the name and output sizes of every aten op run inside the context."""

    def __init__(self):
        super().__init__()
        self.ops: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outputs = out if isinstance(out, (tuple, list)) else [out]
        size = max((o.numel() for o in outputs if isinstance(o, torch.Tensor)), default=0)
        self.ops.append((str(func), size))
        return out


@pytest.mark.parametrize("a_shape, a_first", [((8, 16), True), ((8, 2), False)])  # both contraction orders
@pytest.mark.parametrize("per_token", [True, False])
def test_forward_never_builds_the_kronecker_product(a_shape, a_first, per_token):
    layer = KroneckerLinear.from_conv1d(Conv1D(128, 64), a_shape, n_factors=2, init="random")
    assert layer.a_first == a_first
    layer.per_token, layer.fused = per_token, False
    x = torch.randn(3, 64)
    with _RecordOps() as recorder:
        layer(x)
    assert recorder.ops, "no ops recorded"
    assert not any("kron" in name for name, _ in recorder.ops)
    # Nothing bigger than a factor or an activation: far below in * out = 8192. (An expand is a view: its size
    # is not memory, and the per-token plans expand A over the tokens.)
    sizes = [size for name, size in recorder.ops if "expand" not in name]
    (p, q), (r, t) = layer.a_shape, layer.b_shape
    intermediate = layer.n_factors * (p * t if a_first else q * r)  # per token: A X or X Bᵀ
    allowed = max(layer.a_factors.numel(), layer.b_factors.numel(), 3 * max(intermediate, 128))
    assert allowed <= 64 * 128 // 4
    assert max(sizes) <= allowed


# (out, in), A: GPT-2 small schemes (rows of Table 1, small batches), the shared base's classes (192 -> 768 and
# back), B = (2, 1) / (4, 1) / (1, 2) / (1, 4), and odd shapes where one side of a factor is 1.
_REFERENCE_SCHEMES = [
    ((3072, 768), (64, 32)), ((3072, 768), (96, 96)), ((3072, 768), (256, 64)), ((3072, 768), (1536, 768)),
    ((768, 192), (24, 12)), ((192, 768), (12, 24)), ((768, 192), (384, 192)), ((192, 768), (192, 384)),
    ((768, 192), (192, 192)), ((192, 768), (192, 192)), ((24, 20), (4, 5)), ((24, 20), (1, 20)), ((24, 20), (24, 1)),
]


@pytest.mark.parametrize("shape, a_shape", _REFERENCE_SCHEMES)
@pytest.mark.parametrize("n_factors, scalars", [(1, False), (2, True), (4, False), (4, True)])
@pytest.mark.parametrize("plan", ["chosen", "A first, GEMM", "A first, per token", "B first, GEMM", "B first, per token",
                                  "A first, fused", "B first, fused"])
def test_forward_and_gradients_equal_the_previous_implementation(shape, a_shape, n_factors, scalars, plan):
    """Same output and same gradients (input, factors, scalars, bias) as the pre-issue-20 forward, in every plan
    (the BLAS plans and the fused kernel in both orders; "chosen" is what the layer picks by itself)."""
    out_features, in_features = shape
    generator = torch.Generator().manual_seed(sum(a_shape) + n_factors)
    layer = KroneckerLinear(in_features, out_features, a_shape, n_factors, scalars)
    if plan != "chosen":
        layer.a_first, layer.per_token = plan.startswith("A"), plan.endswith("per token")
        layer.fused, layer.fused_a_first = plan.endswith("fused"), layer.a_first
    with torch.no_grad():
        layer.bias.normal_(generator=generator)
        if scalars:
            layer.scalars.normal_(generator=generator)
    x = torch.randn(2, 5, in_features, generator=generator)  # (batch, seq, in): a 3-D input as in GPT-2
    grad = torch.randn(2, 5, out_features, generator=generator)
    results = []
    for forward in (lambda x: layer(x), lambda x: previous_forward(layer, x)):
        layer.zero_grad(set_to_none=True)
        x_leaf = x.clone().requires_grad_()
        y = forward(x_leaf)
        y.backward(grad)
        named = {"y": y, "x": x_leaf.grad, **{name: p.grad for name, p in layer.named_parameters()}}
        results.append({name: value.detach().clone() for name, value in named.items()})
    new, old = results
    assert new.keys() == old.keys()
    for name in new:
        scale = old[name].abs().max().item() + 1e-12
        assert new[name].shape == old[name].shape, name
        assert torch.allclose(new[name], old[name], rtol=1e-4, atol=1e-5 * scale), name


def test_the_fused_kernel_is_built_and_chosen_on_the_cpu_in_float32():
    # CI has g++ and ninja: a kernel that fails to build must fail here, not fall back silently.
    assert fused.kernel() is not None, "the fused Kronecker kernel did not build (see the warning above)"
    layer = KroneckerLinear(64, 128, (8, 8))  # B = (16, 8)
    x = torch.randn(5, 64)
    assert fused.applies(x, layer.a_factors)
    # Chosen for factors at least 6 wide on every side; B = (4, 1) (GPT-2 small's 81M class) keeps its GEMM plan.
    assert layer.fused and KroneckerLinear(768, 3072, (64, 32)).fused
    assert not KroneckerLinear(768, 3072, (768, 768)).fused
    assert not fused.applies(x.double(), layer.a_factors.double())  # float64: the BLAS plans
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not fused.applies(x, layer.a_factors)  # mixed precision: the BLAS plans, whose matmuls autocast


def test_the_fused_layers_autograd_function_gives_gradients_only_where_wanted():
    # The fused layer's autograd function is the kernel's C++ one (no Python frame in backward). Each gradient an
    # input or a parameter wants equals the BLAS plans' one, also with the input or the factors frozen; without
    # gradients nothing is kept and no graph is built.
    generator = torch.Generator().manual_seed(3)
    layer = KroneckerLinear(768, 192, (12, 24), n_factors=2, scalars=True)
    with torch.no_grad():
        layer.bias.normal_(generator=generator)
    x = torch.randn(3, 5, 768, generator=generator)

    def gradients(fused_on: bool, x_grad: bool, params_grad: bool) -> tuple[torch.Tensor, list]:
        layer.fused = fused_on
        layer.zero_grad(set_to_none=True)
        for parameter in layer.parameters():
            parameter.requires_grad_(params_grad)
        x_leaf = x.clone().requires_grad_(x_grad)
        y = layer(x_leaf)
        if fused_on:
            assert y.grad_fn.name() == "torch::autograd::CppNode<KronFunction>"
        y.pow(2).sum().backward()
        return y.detach(), [x_leaf.grad] + [parameter.grad for parameter in layer.parameters()]

    for x_grad, params_grad in [(False, True), (True, False), (True, True)]:
        (y_fused, fused_grads), (y_blas, blas_grads) = (gradients(on, x_grad, params_grad) for on in (True, False))
        assert torch.allclose(y_fused, y_blas, atol=1e-5)
        for got, expected in zip(fused_grads, blas_grads):
            assert (got is None) == (expected is None)
            if got is not None:
                assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4)
    layer.fused = True
    with torch.no_grad():
        y = layer(x)
    assert y.grad_fn is None and y.shape == (3, 5, 192)


def test_the_fused_kernel_can_be_switched_off(monkeypatch):
    monkeypatch.setenv(fused.ENV_SWITCH, "0")
    fused.kernel.cache_clear()
    try:
        assert fused.kernel() is None
        assert not fused.applies(torch.randn(2, 64), torch.randn(1, 8, 8))
    finally:
        monkeypatch.delenv(fused.ENV_SWITCH)
        fused.kernel.cache_clear()


@pytest.mark.parametrize("shape, a_shape", [((768, 192), (24, 12)), ((3072, 768), (96, 96))])
def test_the_fused_kernel_splits_tokens_over_threads_with_the_same_result(shape, a_shape):
    # B first, and A first with t = 8: backward's dA runs per tile of 8 tokens, so chunks of 67 / 3 tokens end in a
    # partial tile.
    out_features, in_features = shape
    layer = KroneckerLinear(in_features, out_features, a_shape, n_factors=2)
    x = torch.randn(67, in_features)  # not a multiple of the thread count
    grad = torch.randn(67, out_features)
    results = []
    threads = torch.get_num_threads()
    try:
        for count in (1, 3):
            torch.set_num_threads(count)
            layer.zero_grad(set_to_none=True)
            x_leaf = x.clone().requires_grad_()
            layer(x_leaf).backward(grad)
            results.append([x_leaf.grad] + [p.grad.clone() for p in layer.parameters()])
    finally:
        torch.set_num_threads(threads)
    for one, several in zip(*results):  # the same sums, grouped in other chunks: float rounding only
        assert torch.allclose(one, several, rtol=1e-4, atol=1e-5 * one.abs().max().item())


def test_the_cheaper_contraction_order_is_chosen():
    # A (768, 768), B (4, 1) of the 81M model: A first costs 768*1*(768+4), B first 768*4*(1+768).
    layer = KroneckerLinear(768, 3072, (768, 768))
    assert layer.a_first and layer.multiply_adds_per_token() == 768 * 772
    layer = KroneckerLinear(768, 3072, (4, 1))  # the mirror image: B first is cheaper
    assert not layer.a_first and layer.multiply_adds_per_token() == 768 * 772


def test_random_init_has_the_requested_std():
    a, b = random_init((16, 32), (64, 8), rank=4, std=0.02, generator=torch.Generator().manual_seed(3))
    folded = kron_sum(a, b)
    assert folded.std().item() == pytest.approx(0.02, rel=0.15)


# ------------------------------------------------------------------------------------------ whole models


def test_full_rank_compression_keeps_the_model_and_decompress_matches_the_factored_logits(tmp_path):
    model = tiny_model()
    tokens = token_batch()
    original = model(tokens).logits
    # c_fc (128, 32) with A (8, 4): B (16, 8); full rank = min(32, 128) = 32 factors.
    compress(model, KroneckerConfig(a_shape=(8, 4), n_factors=32))
    assert len(kronecker_layers(model)) == 4
    factored = model(tokens).logits
    assert torch.allclose(factored, original, atol=1e-5)

    dense = decompress(model)
    assert type(dense) is GPT2LMHeadModel and not kronecker_layers(dense)
    assert all(isinstance(block.mlp.c_fc, Conv1D) and isinstance(block.mlp.c_proj, Conv1D) for block in dense.transformer.h)
    assert len(kronecker_layers(model)) == 4  # the factored model is left as it was
    assert torch.allclose(dense(tokens).logits, factored, atol=1e-5)
    assert count_parameters(dense) == gpt2_parameter_count(model.config)

    dense.save_pretrained(tmp_path)
    reloaded = GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    assert torch.allclose(reloaded(tokens).logits, factored, atol=1e-5)


def test_a_compressed_state_dict_reloads_into_a_freshly_compressed_model():
    """How to save a factored model: its state_dict + KroneckerConfig; rebuild with compress(init="random")."""
    config = KroneckerConfig(a_shape=(16, 8), n_factors=2, scalars=True)
    trained = compress(tiny_model(seed=0), config)
    rebuilt = compress(tiny_model(seed=5), config, init="random")
    rebuilt.load_state_dict(trained.state_dict())
    tokens = token_batch()
    assert torch.equal(rebuilt(tokens).logits, trained(tokens).logits)


@pytest.mark.parametrize("init", ["van_loan", "prune", "random"])
def test_decompress_matches_a_low_rank_factored_model(init):
    model = tiny_model()
    compress(model, KroneckerConfig(a_shape=(16, 8), n_factors=2, scalars=True), init=init)
    tokens = token_batch()
    factored = model(tokens).logits
    assert torch.allclose(decompress(model)(tokens).logits, factored, atol=1e-5)
    if init == "van_loan":  # rank 2 of a random MLP is a real approximation, not the original
        assert not torch.allclose(factored, tiny_model()(tokens).logits, atol=1e-3)


def test_compress_one_step_of_training_reaches_every_factor():
    model = tiny_model().train()
    compress(model, KroneckerConfig(a_shape=(16, 8), n_factors=2, scalars=True))
    tokens = token_batch()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss = model(tokens, labels=tokens).loss
    loss.backward()
    for name, layer in kronecker_layers(model):
        for parameter in (layer.a_factors, layer.b_factors, layer.scalars, layer.bias):
            assert parameter.grad is not None and torch.isfinite(parameter.grad).all(), name
            assert parameter.grad.abs().sum() > 0, name
    before = {name: layer.scalars.detach().clone() for name, layer in kronecker_layers(model)}
    optimizer.step()
    assert all(not torch.equal(before[name], layer.scalars) for name, layer in kronecker_layers(model))
    with torch.no_grad():
        assert model(tokens, labels=tokens).loss < loss


def test_compress_only_the_chosen_matrices_and_refuses_twice():
    model = tiny_model()
    config = KroneckerConfig(a_shape=[32, 16], matrices=["c_fc"])  # lists, as YAML gives them
    assert config.a_shape == (32, 16) and config.matrices == ("c_fc",)
    compress(model, config)
    assert [name.rsplit(".", 1)[-1] for name, _ in kronecker_layers(model)] == ["c_fc", "c_fc"]
    assert count_parameters(model) == compressed_parameter_count(model.config, config)
    with pytest.raises(ValueError, match="already compressed"):
        compress(model, config)
    with pytest.raises(ValueError, match="unknown init"):
        compress(tiny_model(), KroneckerConfig(a_shape=(32, 16)), init="svd")
    untouched = tiny_model()
    with pytest.raises(ValueError, match="does not divide"):
        compress(untouched, KroneckerConfig(a_shape=(48, 16)))
    assert not kronecker_layers(untouched)
    with pytest.raises(ValueError, match="matrices"):
        KroneckerConfig(a_shape=(32, 16), matrices=("attn",))


@pytest.mark.parametrize("overrides", [{}, {"n_inner": 64}, {"tie_word_embeddings": False}])
@pytest.mark.parametrize("scalars", [False, True])
def test_parameter_counts_from_the_config_equal_the_real_model(overrides, scalars):
    model = tiny_model(**overrides)
    assert count_parameters(model) == gpt2_parameter_count(model.config)
    config = KroneckerConfig(a_shape=(16, 8), n_factors=3, scalars=scalars)
    compress(model, config, init="random")
    assert count_parameters(model) == compressed_parameter_count(model.config, config)


# ------------------------------------------------------------------------------------------ paper tables


@functools.cache
def _meta_gpt2_small_once() -> GPT2LMHeadModel:
    with torch.device("meta"):  # real GPT-2 small shapes, no memory
        return GPT2LMHeadModel(krony_table.GPT2_SMALL)


def _meta_gpt2_small() -> GPT2LMHeadModel:
    return copy.deepcopy(_meta_gpt2_small_once())  # compress works in place: give each caller its own


def test_gpt2_small_has_124_439_808_parameters():
    assert count_parameters(_meta_gpt2_small()) == gpt2_parameter_count(krony_table.GPT2_SMALL) == 124_439_808


def test_every_table_row_matches_the_paper():
    rows = krony_table.table_rows()
    assert [row["table"] for row in rows].count("1") == len(krony_table.PAPER_TABLE_1) == 23
    assert [row["table"] for row in rows].count("2") == 6
    mismatches = [row for row in rows if not row["matches"]]
    assert not mismatches, mismatches
    by_dimension = {row["dimension"]: row for row in rows if row["table"] == "1"}
    assert (by_dimension[(768, 768)]["params"], by_dimension[(768, 768)]["model_size"]) == (589_828, 81_972_576)
    assert (by_dimension[(64, 32)]["params"], by_dimension[(64, 32)]["model_size"]) == (3_200, 67_893_504)
    assert by_dimension[(3072, 768)]["model_size"] == 124_439_832
    assert all(row["max_rank"] == 768 for row in rows if row["table"] == "1")  # the paper's selection rule
    table_2 = {(row["name"], row["factors"]): row["model_size"] for row in rows if row["table"] == "2"}
    assert table_2[("MF2", 3)] == 86_691_720  # printed "86M": the paper truncates


def test_table_1_counts_equal_real_compressed_gpt2_small_models():
    for row in krony_table.table_rows():
        if row["table"] != "1":
            continue
        model = compress(_meta_gpt2_small(), KroneckerConfig(a_shape=row["dimension"]), init="random")
        assert count_parameters(model) == row["model_size"], row["dimension"]


def test_section_4_4_scalars_add_96_parameters():
    without = KroneckerConfig(a_shape=(1024, 256), n_factors=4)
    with_scalars = KroneckerConfig(a_shape=(1024, 256), n_factors=4, scalars=True)
    small = krony_table.GPT2_SMALL
    assert compressed_parameter_count(small, with_scalars) - compressed_parameter_count(small, without) == 96


def test_cli_prints_the_table(capsys):
    from lmstudy.__main__ import main

    assert main(["krony", "table"]) == 0
    printed = capsys.readouterr().out
    assert "81,972,576" in printed and "124,439,832" in printed and " NO" not in printed
