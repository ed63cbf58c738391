"""Export of Kronecker-compressed GPT-2s (lmstudy.krony.export): dense Hugging Face folder and factored form."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel

from lmstudy.krony.export import KRONECKER_FILE, WEIGHTS_FILE, export_dense, export_factored, load_factored
from lmstudy.krony.model import KroneckerConfig, KroneckerLinear, compress, kronecker_layers
from lmstudy.tokenization import train_bpe


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe(["the cat sat on the mat and the dog sat on the log"] * 20, vocab_size=300)


def compressed_model(config: KroneckerConfig, vocab_size: int, tie: bool = True) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    model_config = GPT2Config(
        n_layer=2, n_head=2, n_embd=32, vocab_size=vocab_size, n_positions=32, bos_token_id=0, eos_token_id=0,
        tie_word_embeddings=tie,
    )
    model = compress(GPT2LMHeadModel(model_config), config, init="random", generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # non-trivial scalars and biases, so a dropped tensor would show in the logits
        for _, layer in kronecker_layers(model):
            layer.bias.normal_(std=0.1)
            if layer.scalars is not None:
                layer.scalars.uniform_(0.5, 1.5)
    return model.eval()


def tokens(tokenizer) -> torch.Tensor:
    return tokenizer("the dog sat on the cat", return_tensors="pt").input_ids


def test_export_dense_is_a_plain_hugging_face_gpt2(tmp_path, tokenizer):
    model = compressed_model(KroneckerConfig(a_shape=(16, 8), n_factors=2, scalars=True), len(tokenizer))
    ids = tokens(tokenizer)
    with torch.no_grad():
        factored = model(ids).logits
    export_dense(model, tokenizer, tmp_path / "dense")
    assert (tmp_path / "dense" / "model.safetensors").exists() and not list((tmp_path / "dense").glob("*.bin"))
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "dense").eval()
    assert type(reloaded) is GPT2LMHeadModel and not kronecker_layers(reloaded)
    with torch.no_grad():
        assert torch.allclose(reloaded(ids).logits, factored, atol=1e-5)
    assert AutoTokenizer.from_pretrained(tmp_path / "dense")("the dog").input_ids == tokenizer("the dog").input_ids
    assert len(kronecker_layers(model)) == 4  # the exported model is left factored


@pytest.mark.parametrize("config, tie", [
    (KroneckerConfig(a_shape=(16, 8), n_factors=2, scalars=True), True),
    (KroneckerConfig(a_shape=(64, 32)), False),  # B = (2, 1) (the 96M pattern), untied lm_head
    (KroneckerConfig(a_shape=(8, 4), matrices=("c_fc",)), True),  # only c_fc factored
])
def test_factored_round_trip_gives_the_same_logits(tmp_path, tokenizer, config, tie):
    model = compressed_model(config, len(tokenizer), tie=tie)
    ids = tokens(tokenizer)
    with torch.no_grad():
        expected = model(ids).logits
    folder = export_factored(model, tokenizer, tmp_path / "factored")
    assert not (folder / "model.safetensors").exists()  # so AutoModelForCausalLM cannot half-load it
    assert not list(folder.glob("*.bin")) and not list(folder.glob("*.pt"))

    layout = json.loads((folder / KRONECKER_FILE).read_text())
    assert [entry["name"] for entry in layout["layers"]] == [name for name, _ in kronecker_layers(model)]
    first = layout["layers"][0]
    assert tuple(first["a_shape"]) == config.a_shape and first["n_factors"] == config.n_factors
    assert first["scalars"] == config.scalars

    reloaded = load_factored(folder)
    assert not reloaded.training
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, expected)
    assert {name: tensor.shape for name, tensor in reloaded.state_dict().items()} == {
        name: tensor.shape for name, tensor in model.state_dict().items()}
    assert (reloaded.lm_head.weight is reloaded.transformer.wte.weight) == tie
    assert AutoTokenizer.from_pretrained(folder)("the dog").input_ids == tokenizer("the dog").input_ids
    with torch.no_grad():  # greedy generation with the KV cache works on the reloaded factored model
        out = reloaded.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert out.shape == (1, ids.size(1) + 4)


def test_factored_weights_are_smaller_than_dense(tmp_path, tokenizer):
    model = compressed_model(KroneckerConfig(a_shape=(16, 8)), len(tokenizer))
    dense_size = (export_dense(model, tokenizer, tmp_path / "d") / "model.safetensors").stat().st_size
    factored_size = (export_factored(model, tokenizer, tmp_path / "f") / WEIGHTS_FILE).stat().st_size
    assert factored_size < dense_size


def test_export_factored_refuses_a_dense_model_and_load_checks_the_format(tmp_path, tokenizer):
    torch.manual_seed(0)
    dense = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=len(tokenizer), n_positions=32))
    with pytest.raises(ValueError, match="no KroneckerLinear"):
        export_factored(dense, tokenizer, tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()

    folder = export_factored(compressed_model(KroneckerConfig(a_shape=(16, 8)), len(tokenizer)), tokenizer, tmp_path / "f")
    layout = json.loads((folder / KRONECKER_FILE).read_text())
    (folder / KRONECKER_FILE).write_text(json.dumps({**layout, "version": 99}))
    with pytest.raises(ValueError, match="format"):
        load_factored(folder)
    layout["layers"][0]["a_shape"] = [8, 8]  # a shape whose factors do not match the stored tensors
    (folder / KRONECKER_FILE).write_text(json.dumps(layout))
    with pytest.raises(ValueError, match="b_shape"):
        load_factored(folder)


def test_a_loaded_factored_model_is_a_kronecker_model(tmp_path, tokenizer):
    model = compressed_model(KroneckerConfig(a_shape=(16, 8), n_factors=2), len(tokenizer))
    reloaded = load_factored(export_factored(model, tokenizer, tmp_path / "f"))
    layers = kronecker_layers(reloaded)
    assert len(layers) == 4 and all(isinstance(layer, KroneckerLinear) for _, layer in layers)
    assert layers[0][1].a_shape == (16, 8) and layers[0][1].n_factors == 2
