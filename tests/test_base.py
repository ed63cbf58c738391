"""The shared base models (lmstudy.base): compute accounting, the size choice, and the smoke-scale
pipeline end to end (data, training with kept checkpoints, export, loading with the Auto classes)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel

from conftest import require_corpus, runs_sharing_corpus_caches
from lmstudy import base, base_sweep
from lmstudy.base import BaseConfig, BaseDataConfig, BaseModelConfig
from lmstudy.hf_export import read_run_record


@pytest.mark.parametrize("n_layer,n_head,n_embd", [(1, 2, 32), (4, 4, 256), (6, 5, 320)])
def test_non_embedding_parameters_match_the_model(n_layer, n_head, n_embd):
    model_config = BaseModelConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd, seq_len=64)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=300, n_positions=64, n_embd=n_embd, n_layer=n_layer, n_head=n_head))
    embeddings = model.transformer.wte.weight.numel() + model.transformer.wpe.weight.numel()
    assert base.non_embedding_parameters(model_config) == sum(p.numel() for p in model.parameters()) - embeddings


def test_flops_per_token_counts_the_output_projection_and_attention():
    model = BaseModelConfig(n_layer=2, n_head=2, n_embd=64, seq_len=128)
    n = base.non_embedding_parameters(model)
    assert base.flops_per_token(model, 1000) == 6 * (n + 64 * 1000) + 12 * 2 * 64 * 128
    # A bigger vocabulary costs exactly its extra output-projection matmuls.
    assert base.flops_per_token(model, 2000) - base.flops_per_token(model, 1000) == 6 * 64 * 1000


def test_kept_steps_and_train_config():
    config = BaseConfig(model=BaseModelConfig(seq_len=64), train_tokens=64 * 8 * 100, batch_size=8)
    assert config.max_steps == 100
    assert config.kept_steps() == {0.1: 10, 0.3: 30, 1.0: 100}
    assert config.train_config().keep_checkpoints == (10, 30, 100)


def test_choose_size_is_nearest_to_20_tokens_per_parameter_within_the_git_budget():
    summary = pd.DataFrame([
        {"size": "2x128", "fp16_mb": 3.0, "final_tokens_per_parameter": 51.0},
        {"size": "3x192", "fp16_mb": 6.0, "final_tokens_per_parameter": 12.7},
        {"size": "4x256", "fp16_mb": 10.6, "final_tokens_per_parameter": 3.9},
        {"size": "6x320", "fp16_mb": 20.0, "final_tokens_per_parameter": 1.1},  # 3 copies = 60 MB: too big
    ])
    assert base_sweep.choose_size(summary)["size"] == "3x192"  # 12.7 is nearer 20 than 51 as a ratio
    assert base_sweep.choose_size(summary, tokens_per_parameter=2.0)["size"] == "4x256"  # 6x320 does not fit
    assert base_sweep.choose_size(summary, tokens_per_parameter=2.0, max_shipped_mb=100)["size"] == "6x320"
    with pytest.raises(ValueError, match="no sweep size fits"):
        base_sweep.choose_size(summary, max_shipped_mb=5)


def test_bad_sizes_and_data_settings_are_clear_errors():
    from lmstudy.base_cli import _parse_size

    with pytest.raises(ValueError, match="N_LAYER,N_HEAD,N_EMBD"):
        _parse_size("big")
    with pytest.raises(ValueError, match="multiple of the heads"):
        _parse_size("2,3,64")
    with pytest.raises(ValueError, match="vocab_size"):
        base.prepare_data(BaseDataConfig(vocab_size=70_000))
    with pytest.raises(ValueError, match="data_fraction"):
        base.prepare_data(BaseDataConfig(data_fraction=0))


@pytest.mark.slow
def test_smoke_base_trains_exports_and_loads_with_the_auto_classes(tmp_path, monkeypatch):
    for corpus in ("wikipedia", "litbank", "reddit", "imdb", "reuters21578", "bbc_news", "irc"):
        require_corpus(corpus)
    monkeypatch.setenv("LMSTUDY_RUNS", str(runs_sharing_corpus_caches(tmp_path / "runs")))
    config = base.final_config("smoke")
    metrics = base.train_base(config)
    assert metrics["steps"] == config.max_steps and metrics["tokens"] == config.max_steps * config.tokens_per_step
    data_run = base.prepare_data(config.data)
    data = data_run.metrics
    assert set(data["documents"]) == set(base.DOMAINS)
    assert all(info["documents"] > 0 for info in data["documents"].values())
    assert all(tokens > 0 for tokens in data["valid_tokens"].values())
    # Restored from an archive (no streams): encoded again, identically.
    streams = {name: (data_run.path / name).read_bytes() for name in ("train.bin", "valid.bin")}
    for name in streams:
        (data_run.path / name).unlink()
    base.prepare_data(config.data)
    assert {name: (data_run.path / name).read_bytes() for name in streams} == streams
    # The loss went down from the uniform start.
    curve = base.validation_curve(config)
    assert curve[-1]["val_loss"] < curve[0]["val_loss"]

    paths = base.export_base(config, tmp_path / "models", "smoke")
    assert [p.name for p in paths] == ["base-10pct", "base-30pct", "base"]
    stamps = [(p / "model.safetensors").stat().st_mtime_ns for p in paths]
    assert base.export_base(config, tmp_path / "models", "smoke") == paths  # already exported: left alone
    assert [(p / "model.safetensors").stat().st_mtime_ns for p in paths] == stamps
    final_weights = base.load_checkpoint_model(config, 1.0)[0].state_dict()
    for path, fraction in zip(paths, config.checkpoint_fractions):
        record = read_run_record(path)
        assert record["step"] == config.kept_steps()[fraction]
        assert "lmstudy shared base" in (path / "README.md").read_text()
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        prompt = tokenizer("The", return_tensors="pt")
        out = model.generate(**prompt, max_new_tokens=5, do_sample=False, pad_token_id=tokenizer.eos_token_id)
        assert out.shape[1] == prompt["input_ids"].shape[1] + 5
        if fraction == 1.0:  # the shipped weights are the run's, rounded to float16
            for name, tensor in model.state_dict().items():
                if name in final_weights:
                    assert torch.equal(tensor, final_weights[name].half().float()), name

    # What a study starts from: the same weights from the run cache as from the shipped folder.
    monkeypatch.setenv("LMSTUDY_MODELS", str(tmp_path / "none"))  # models_dir("smoke"): an empty folder
    from_cache = base.study_base("smoke", 0.3)
    monkeypatch.setenv("LMSTUDY_MODELS", str(tmp_path))  # models_dir("smoke") = tmp_path / "smoke": the export
    (tmp_path / "smoke").symlink_to(tmp_path / "models", target_is_directory=True)
    from_folder = base.study_base("smoke", 0.3)
    assert from_cache.identity == from_folder.identity == {"base": record["run"], "step": config.kept_steps()[0.3]}
    assert from_folder.tokens == config.kept_steps()[0.3] * config.tokens_per_step and from_folder.name == "base-30pct"
    cached_weights, folder_weights = from_cache.model.state_dict(), from_folder.model.state_dict()
    assert all(torch.equal(cached_weights[name], folder_weights[name]) for name in folder_weights)
    with pytest.raises(ValueError, match="keeps checkpoints"):
        base.study_base("smoke", 0.5)
    train_ids, valid_ids = base.base_streams("smoke")
    assert train_ids.dtype == torch.int64 and train_ids.numel() == data["train_tokens"]


def shipped_base_folders():
    from lmstudy.paths import REPO_ROOT

    return sorted((REPO_ROOT / "models").glob("base*"))


def test_shipped_base_folders_load_with_the_auto_classes_and_generate():
    """The committed base checkpoints (models/base*): Hugging Face folders that AutoModelForCausalLM and
    AutoTokenizer load offline, that generate, with a model card and the run record; 40 MB at most in all."""
    folders = shipped_base_folders()
    assert folders, "no models/base* folder: python -m lmstudy base export --scale cpu"
    total = 0
    for path in folders:
        total += sum(f.stat().st_size for f in path.iterdir() if f.is_file())
        record = read_run_record(path)
        assert record["name"] == path.name and record["scale"] == "cpu"
        assert "lmstudy shared base" in (path / "README.md").read_text()
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        assert sum(p.numel() for p in model.parameters()) == record["parameters"]
        prompt = tokenizer("The history of the city", return_tensors="pt")
        out = model.generate(**prompt, max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.eos_token_id)
        assert out.shape[1] == prompt["input_ids"].shape[1] + 8
        # Greedy generation is the arg-max of the model's own logits, step by step.
        logits = model(input_ids=out[:, :-1]).logits
        assert torch.equal(logits[0, prompt["input_ids"].shape[1] - 1:].argmax(-1), out[0, prompt["input_ids"].shape[1]:])
    assert total <= 40e6, f"the shipped base folders weigh {total / 1e6:.1f} MB, more than 40 MB"


def test_final_config_overrides_merge_into_the_preset():
    """A study's ``base_overrides`` (a paper-scale dry run's budget): data and model merge key by key."""
    config = base.final_config("paper", model={"seq_len": 128}, data={"data_fraction": 0.01}, batch_size=2)
    assert (config.model.n_layer, config.model.n_embd, config.model.seq_len) == (12, 768, 128)
    assert config.data.data_fraction == 0.01 and config.data.vocab_size == 50257 and config.batch_size == 2
    assert config.train_config().eval_every == round(0.05 * config.max_steps)  # the default: 20 validations
    once = base.final_config("paper", batch_size=2, eval_every_fraction=1.0)  # validation after the last step only
    assert once.train_config().eval_every == once.max_steps > 1
    # validation on the first 512 tokens; at its default (all of them) the run keeps the identity it had before
    short = base.final_config("paper", max_eval_tokens=512)
    assert short.max_eval_tokens == 512 and base.run_config(short)["max_eval_tokens"] == 512
    assert "max_eval_tokens" not in base.run_config(base.final_config("paper"))
    valid = torch.arange(2000)
    assert short.lm_task(valid, valid).max_eval_tokens == 512 and once.lm_task(valid, valid).max_eval_tokens is None
    with pytest.raises(KeyError, match="unknown base preset key"):
        base.final_config("paper", steps=3)


def test_base_cli_overrides_name_the_run_a_study_names():
    """``base train|export --overrides`` reads the text a study's ``-p base_overrides`` takes, to the same config
    (so ``base export`` finds the base a study trained with those overrides)."""
    import argparse

    from lmstudy.base_cli import _final
    from lmstudy.notebook_runner import parse_value

    text = "{compute: 1.0e+16, compile: false, data: {data_fraction: 0.1}}"
    config = _final(argparse.Namespace(scale="paper", size=None, overrides=text))
    assert config == base.final_config("paper", **parse_value(text))
    assert config.data.data_fraction == 0.1 and config.compile is False and config.data.vocab_size == 50257
    assert _final(argparse.Namespace(scale="paper", size=None, overrides=None)) == base.final_config("paper")
    with pytest.raises(ValueError, match="must be a mapping"):
        _final(argparse.Namespace(scale="paper", size=None, overrides="1.0e+16"))
    with pytest.raises(KeyError, match="unknown base preset key"):
        _final(argparse.Namespace(scale="paper", size="2,2,64", overrides="{steps: 3}"))
