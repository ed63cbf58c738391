"""Krony-PT on a Llama MLP (lmstudy/krony/llama.py) on a tiny random Llama in SmolLM2's layout, and SmolLM2's
parameter table from its dimensions: a full-rank factorisation gives the dense logits exactly, folding back gives a
plain Llama with the same logits, the counts from the configs equal the models', and bad calls are refused."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from lmstudy.krony.llama import (
    SMOLLM2_SHAPES, compress_llama, llama_classes, llama_compressed_parameter_count, llama_config,
    llama_parameter_count, parameter_table,
)
from lmstudy.krony.model import KroneckerLinear, compress, decompress, kronecker_layers
from test_smollm2 import tiny_llama


def _count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # a tied embedding once


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


@pytest.fixture
def model():
    torch.set_num_threads(1)
    return tiny_llama(vocab_size=97).to(torch.float64)


def test_a_full_rank_factorisation_gives_the_dense_logits_and_folds_back(model):
    ids = torch.randint(97, (2, 12), generator=torch.Generator().manual_seed(0))
    dense = _logits(model, ids)
    full_rank = 32  # gate/up (64, 32) with A (8, 8), B (8, 4): rank min(64, 32)
    compress_llama(model, llama_config((8, 8), n_factors=full_rank), "van_loan")
    layers = kronecker_layers(model)
    assert len(layers) == 2 * 3 and all(layer.bias is None for _, layer in layers)
    assert {name.rsplit(".", 1)[1] for name, _ in layers} == {"gate_proj", "up_proj", "down_proj"}
    assert torch.allclose(_logits(model, ids), dense, atol=1e-9)
    folded = decompress(model)
    assert all(isinstance(getattr(layer.mlp, m), nn.Linear) for layer in folded.model.layers
               for m in ("gate_proj", "up_proj", "down_proj"))
    assert torch.allclose(_logits(folded, ids), dense, atol=1e-9)
    with pytest.raises(ValueError, match="already compressed"):
        compress_llama(model, llama_config((8, 8)))


@pytest.mark.parametrize("init", ["van_loan", "prune", "random"])
@pytest.mark.parametrize("factors,scalars", [(1, False), (2, True)])
def test_counts_from_the_configs_equal_the_models(model, init, factors, scalars):
    assert _count(model) == llama_parameter_count(model.config)
    config = llama_config((16, 32), n_factors=factors, scalars=scalars)  # B = (4, 1), the paper's 81M shape
    compress_llama(model, config, init, generator=torch.Generator().manual_seed(0))
    assert _count(model) == llama_compressed_parameter_count(model.config, config) < llama_parameter_count(
        model.config)
    ids = torch.randint(97, (1, 8))
    loss = model(ids, labels=ids).loss
    loss.backward()  # the factored layers train (no bias: a zero buffer is added, never a parameter)
    assert all(layer.a_factors.grad is not None for _, layer in kronecker_layers(model))


def test_a_truncated_factorisation_is_the_nearest_kronecker_sum():
    linear = nn.Linear(32, 64, bias=False).double()
    layer = KroneckerLinear.from_linear(linear, (16, 32), n_factors=1)
    x = torch.randn(5, 32, dtype=torch.float64)
    folded = layer.to_dense_weight().T  # (out, in)
    assert torch.allclose(layer(x), x @ folded.T, atol=1e-10)
    error = (folded - linear.weight).norm()
    pruned = KroneckerLinear.from_linear(linear, (16, 32), init="prune").to_dense_weight().T
    assert error <= (pruned - linear.weight).norm()  # Van Loan is the Frobenius-nearest single product


def test_wrong_models_and_shapes_are_refused(model):
    with pytest.raises(ValueError, match="compress_llama"):
        compress(model, llama_config((16, 32)))
    with pytest.raises(ValueError, match="does not divide"):
        compress_llama(model, llama_config((7, 32)))
    with pytest.raises(ValueError, match="matrices"):
        compress_llama(model, llama_config((16, 32)).__class__(a_shape=(16, 32)))  # GPT-2's c_fc / c_proj
    with pytest.raises(ValueError, match="unknown init"):
        compress_llama(model, llama_config((16, 32)), "svd")


def test_smollm2_table_keeps_the_papers_ratios_and_matches_a_compressed_model():
    assert llama_parameter_count(SMOLLM2_SHAPES) == 134_515_008  # SmolLM2-135M, as fetched (lmstudy_fetch.json)
    table = parameter_table(SMOLLM2_SHAPES).set_index("class")
    assert list(table.index) == ["96M", "81M", "67M"]
    assert (abs(table["ratio"] - table["paper_ratio"]) < 0.04).all()  # the nearest B = (r, 1) with 1-4 factors
    assert table["ratio"].is_monotonic_decreasing
    for name, row in table.iterrows():  # the dense baseline of a class's size: the nearest narrowed MLP
        narrowed = LlamaConfig(**{**SMOLLM2_SHAPES.to_dict(), "intermediate_size": int(row["dense_inner"])})
        step = 3 * SMOLLM2_SHAPES.hidden_size * SMOLLM2_SHAPES.num_hidden_layers
        assert abs(llama_parameter_count(narrowed) - row["parameters"]) <= step / 2
    config = llama_classes(SMOLLM2_SHAPES)["81M"]
    with torch.device("meta"):  # SmolLM2's shapes without its weights
        meta = LlamaForCausalLM(SMOLLM2_SHAPES)
    compress_llama(meta, config, "random")
    assert _count(meta) == table.loc["81M", "parameters"]


def test_a_compressed_llama_exports_dense_and_factored(model, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lmstudy.krony.export import export_dense, export_factored, load_factored
    from test_smollm2 import BASE_TOKENIZER

    tokenizer = AutoTokenizer.from_pretrained(BASE_TOKENIZER)
    compress_llama(model, llama_config((16, 32), n_factors=2, scalars=True), "van_loan")
    ids = torch.randint(97, (1, 10))
    expected = _logits(model.eval(), ids)
    factored = load_factored(export_factored(model, tokenizer, tmp_path / "factored"))
    assert all(layer.bias is None for _, layer in kronecker_layers(factored))
    assert torch.equal(_logits(factored, ids), expected)
    dense = AutoModelForCausalLM.from_pretrained(export_dense(model, tokenizer, tmp_path / "dense"),
                                                 dtype=torch.float64)
    assert not kronecker_layers(dense) and torch.allclose(_logits(dense, ids), expected, atol=1e-9)


def test_narrowing_keeps_the_strongest_neurons(model):
    from lmstudy.krony.llama import narrow_mlp

    ids = torch.randint(97, (1, 10))
    assert torch.equal(_logits(narrow_mlp(model, 64), ids), _logits(model, ids))  # all kept: the same model
    narrowed = narrow_mlp(model, 16)
    assert narrowed.config.intermediate_size == 16 and model.config.intermediate_size == 64  # a copy
    assert _count(narrowed) == llama_parameter_count(narrowed.config)
    mlp, small = model.model.layers[0].mlp, narrowed.model.layers[0].mlp
    x = torch.randn(3, 32, dtype=torch.float64)
    hidden = torch.nn.functional.silu(mlp.gate_proj(x)) * mlp.up_proj(x)  # (3, 64): each neuron's activation
    score = mlp.gate_proj.weight.norm(dim=1) * mlp.up_proj.weight.norm(dim=1) * mlp.down_proj.weight.norm(dim=0)
    keep = score.topk(16).indices.sort().values
    assert torch.allclose(small(x), hidden[:, keep] @ mlp.down_proj.weight[:, keep].T)
    with pytest.raises(ValueError, match="between 1"):
        narrow_mlp(model, 65)


def test_the_smollm2_shapes_are_the_fetched_models():
    from conftest import require_smollm2
    from transformers import AutoConfig

    fetched = AutoConfig.from_pretrained(require_smollm2())
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "tie_word_embeddings")
    assert {key: getattr(fetched, key) for key in keys} == {key: getattr(SMOLLM2_SHAPES, key) for key in keys}
