"""``init_from``: a local Hugging Face folder or a cached hub id, offline, with a one-line error naming the fetch."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from lmstudy.pretrained import MissingWeights, load_pretrained, resolve_pretrained


def empty_hub_cache(monkeypatch, tmp_path) -> None:
    """An empty Hugging Face cache (whatever this machine's holds), read at call time by huggingface_hub."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))


@pytest.fixture
def tiny_gpt2(tmp_path):
    """A small GPT-2 folder as ``save_pretrained`` writes it, with GPT-2's vocabulary and no tokenizer files."""
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, n_positions=64))
    model.save_pretrained(tmp_path / "gpt2-tiny")
    return tmp_path / "gpt2-tiny", model


def test_a_local_folder_loads_with_its_weights_and_gpt2_bpe(tiny_gpt2):
    from conftest import require_corpus

    require_corpus("gpt2_bpe")
    folder, saved = tiny_gpt2
    model, tokenizer, found = load_pretrained(str(folder))
    assert found == folder and not model.training
    assert torch.equal(model.transformer.wte.weight, saved.transformer.wte.weight)
    assert tokenizer("Hello world").input_ids == [15496, 995]  # no tokenizer files: GPT-2's BPE from the data dir


def test_a_folder_with_its_tokenizer_uses_it(tiny_gpt2):
    from conftest import require_corpus
    from lmstudy.tokenization import gpt2_tokenizer

    require_corpus("gpt2_bpe")
    folder, _ = tiny_gpt2
    gpt2_tokenizer().save_pretrained(folder)
    _, tokenizer, _ = load_pretrained(str(folder))
    assert (folder / "tokenizer.json").is_file() and tokenizer.eos_token_id == 50256


def test_missing_weights_name_what_is_missing_and_the_fetch_command(tmp_path, monkeypatch):
    empty_hub_cache(monkeypatch, tmp_path)
    with pytest.raises(MissingWeights, match=r"no copy of the hub model 'gpt2'.*hf download gpt2 --local-dir "
                                             r"models/gpt2.*-p init_from models/gpt2"):
        resolve_pretrained("gpt2")
    with pytest.raises(MissingWeights, match="no such folder"):
        resolve_pretrained(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(MissingWeights, match="no config.json"):
        resolve_pretrained(str(tmp_path / "empty"))
    GPT2Config(n_layer=1, n_head=2, n_embd=16).save_pretrained(tmp_path / "config-only")
    with pytest.raises(MissingWeights, match="no weights"):
        resolve_pretrained(str(tmp_path / "config-only"))


def test_the_studies_load_init_from_through_it(tiny_gpt2, monkeypatch, tmp_path):
    """The control-code and entity studies both take ``init_from`` as a folder, and fail in one line without it."""
    from conftest import require_corpus
    from lmstudy.ctrl.model import pretrained_with_codes
    from lmstudy.entity import config as entity_config

    require_corpus("gpt2_bpe")
    folder, _ = tiny_gpt2
    model, tokenizer = pretrained_with_codes(str(folder), ["Wikipedia", "Books"])
    assert model.get_input_embeddings().weight.shape[0] == len(tokenizer) == 50257 + 2 and model.training
    base = entity_config._load_base("paper", str(folder))
    assert base.identity == {"init_from": str(folder)} and base.model.config.n_embd == 16
    empty_hub_cache(monkeypatch, tmp_path)
    with pytest.raises(MissingWeights, match="hf download"):
        pretrained_with_codes("gpt2", ["Wikipedia"])


@pytest.mark.parametrize("name", ["base", "base-30pct", "base-10pct"])
def test_the_shared_base_models_load_by_relative_folder(name, monkeypatch, tmp_path):
    """The shipped base folders as ``init_from`` (relative to the repository root, from any directory): the same
    weights and tokenizer as ``study_base`` reads, and the entity study builds on them."""
    from lmstudy.entity import config as entity_config
    from lmstudy.paths import REPO_ROOT
    from lmstudy.tokenization import load_tokenizer

    folder = REPO_ROOT / "models" / name
    if not (folder / "model.safetensors").is_file():
        pytest.skip(f"{folder} is not in this checkout")
    monkeypatch.chdir(tmp_path)  # as a notebook runs in notebooks/: found from the repository root
    model, tokenizer, found = load_pretrained(f"models/{name}")
    assert found == folder and model.config.n_layer == 3 and model.config.n_embd == 192
    text = "The shared base, read as init_from."
    assert tokenizer(text).input_ids == load_tokenizer(folder)(text).input_ids
    assert next(model.parameters()).dtype == torch.float32  # the shipped float16 weights, widened
    base = entity_config._load_base("paper", f"models/{name}")
    assert base.model.config.vocab_size == len(base.tokenizer) == model.config.vocab_size
