"""Notebook 04's two arms (issue 22): fine-tuned from a base vs the base's architecture and tokenizer from random
weights (lmstudy.ctrl.model.arm_config, train_arms), and the comparison table and verdict (lmstudy.ctrl.study)."""

from __future__ import annotations

from dataclasses import asdict, replace

import pandas as pd
import pytest
import torch

from lmstudy.base import StudyBase
from lmstudy.ctrl import model as ctrl_model
from lmstudy.ctrl.data import CodedTexts
from lmstudy.ctrl.model import (
    ARMS,
    ControlConfig,
    arm_config,
    arm_configs,
    base_with_codes,
    export_model,
    exported_arm,
    load_control_model,
    run_identity,
    scale_config,
    train_arms,
)
from lmstudy.ctrl.study import arms_table, better_arm, by_arm
from lmstudy.pretrained import load_pretrained
from lmstudy.scales import PRESETS
from tests.test_control import ALPHA, BETA, synthetic_texts, trained  # noqa: F401  (trained: the tiny model)

torch.set_num_threads(1)

TEXTS = CodedTexts(
    train={"Alpha": synthetic_texts(ALPHA, 30, 1), "Beta": synthetic_texts(BETA, 30, 2)},
    valid={"Alpha": synthetic_texts(ALPHA, 2, 3), "Beta": synthetic_texts(BETA, 2, 4)},
)


@pytest.fixture
def base_folder(trained, tmp_path):  # noqa: F811  (the fixture of tests.test_control)
    """The tiny two-domain model saved as a plain Hugging Face folder: a base to start from."""
    loaded = trained[0]
    folder = tmp_path / "base"
    loaded.model.save_pretrained(folder)
    loaded.tokenizer.save_pretrained(folder)
    return folder


def small_config(**overrides) -> ControlConfig:
    values = dict(seq_len=16, batch_size=4, max_steps=2, eval_every=2, lr=1e-3, lr_schedule="constant", seed=0)
    return ControlConfig(**{**values, **overrides})


def weights(model) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().float().cpu() for name, tensor in model.state_dict().items()}


def test_scratch_arm_has_the_bases_architecture_and_tokenizer_and_fresh_weights(base_folder, tmp_path, monkeypatch):
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))
    # seed 1: the tiny base was initialised with seed 0, and a scratch arm of the same seed and shape would start
    # from the very weights the base started from (random, but the same draw)
    config = small_config(init_from=str(base_folder), lr=5e-4, seed=1)
    configs = arm_configs(config, ARMS, scratch_lr=2e-3)
    assert list(configs) == ["from_base", "scratch"]
    assert configs["from_base"].lr == 5e-4 and configs["scratch"].lr == 2e-3  # each arm its own rate ...
    assert replace(configs["scratch"], scratch=False, lr=5e-4) == configs["from_base"]  # ... and nothing else
    trained_arms = train_arms(configs, TEXTS)
    assert [run.config.arm for run in trained_arms.values()] == ["from_base", "scratch"]
    assert trained_arms["from_base"].model_dir != trained_arms["scratch"].model_dir  # two runs in the cache
    assert all(run.metrics["steps"] == 2 and run.log for run in trained_arms.values())
    tuned, fresh = (load_control_model(trained_arms[arm].model_dir) for arm in ARMS)
    assert tuned.model.config.to_diff_dict() == fresh.model.config.to_diff_dict()  # the same architecture
    assert tuned.tokenizer.get_vocab() == fresh.tokenizer.get_vocab()  # the same tokenizer, codes included
    base_model, base_tokenizer, _ = load_pretrained(str(base_folder))
    assert tuned.tokenizer.get_vocab() == base_tokenizer.get_vocab()  # the base's own codes: no new token

    # Fine-tuned for 2 steps at 5e-4 the weights stay near the base's; the scratch arm's are unrelated to them.
    base_w, tuned_w, fresh_w = weights(base_model), weights(tuned.model), weights(fresh.model)
    name = "transformer.h.0.mlp.c_fc.weight"
    assert (tuned_w[name] - base_w[name]).abs().max() < 0.01
    assert not torch.allclose(fresh_w[name], base_w[name], atol=1e-2)
    correlation = torch.corrcoef(torch.stack([fresh_w[name].flatten(), base_w[name].flatten()]))[0, 1]
    assert abs(correlation) < 0.1
    assert trained_arms["scratch"].metrics["val_loss"] > trained_arms["from_base"].metrics["val_loss"]


def test_arms_with_new_codes_and_the_shared_base_copy(trained, monkeypatch):  # noqa: F811
    """base_scale: the shared base is copied (it keeps no code tokens), its identity names the run."""
    loaded = trained[0]
    shared = StudyBase(model=loaded.model, tokenizer=loaded.tokenizer, name="base", fraction=1.0, tokens=1000,
                       identity={"base": "base/0123abcd", "step": 7})
    monkeypatch.setattr(ctrl_model, "_shared_base", lambda scale: shared)
    vocabulary, before = len(loaded.tokenizer), weights(loaded.model)
    config = small_config(base_scale="smoke")
    model, tokenizer = base_with_codes(config, ["Alpha", "Gamma"])
    assert len(tokenizer) == vocabulary + 1 and len(loaded.tokenizer) == vocabulary  # Gamma added to a copy
    assert model.get_input_embeddings().weight.shape[0] == vocabulary + 1
    assert all(torch.equal(before[k], v) for k, v in weights(loaded.model).items())  # the shared base unchanged
    scratch, scratch_tokenizer = base_with_codes(replace(config, scratch=True), ["Alpha", "Gamma"])
    assert scratch.config.n_embd == model.config.n_embd and scratch.config.vocab_size == vocabulary + 1
    assert scratch_tokenizer.get_vocab() == tokenizer.get_vocab()
    assert not torch.equal(scratch.get_input_embeddings().weight, model.get_input_embeddings().weight)

    identity = run_identity(config)
    assert identity["base"] == shared.identity and identity["base_scale"] == "smoke" and "scratch" not in identity
    assert run_identity(replace(config, scratch=True))["scratch"] is True
    with pytest.raises(ValueError, match="longer than the base's context"):
        base_with_codes(replace(config, seq_len=loaded.model.config.n_positions + 1), ["Alpha"])


def test_arm_configs_and_run_keys_of_runs_made_before_the_arms():
    plain = ControlConfig()  # the first published model's kind of run: no base, own BPE
    assert run_identity(plain) == {k: v for k, v in asdict(plain).items() if k not in ("base_scale", "scratch", "lora_r")}
    assert arm_config(plain, "scratch") == plain and plain.arm == "scratch"
    assert arm_config(plain, "scratch", scratch_lr=2e-3) == replace(plain, lr=2e-3)  # the scratch arm's rate
    with pytest.raises(ValueError, match="from_base arm needs a base"):
        arm_config(plain, "from_base")
    with pytest.raises(ValueError, match="no base is set"):
        ControlConfig(scratch=True)
    assert ControlConfig(base_scale=None, init_from=None) == plain  # `-p base_scale ''` parses as None
    with pytest.raises(ValueError, match="unknown base_scale 'huge'"):
        ControlConfig(base_scale="huge")
    with pytest.raises(ValueError, match="distinct names"):
        arm_configs(small_config(init_from="gpt2"), ["from_base", "from_base"])
    with pytest.raises(ValueError, match="distinct names"):
        arm_configs(small_config(init_from="gpt2"), ["pretrained"])
    # init_from wins over base_scale: the latter is not part of the key then
    assert "base_scale" not in run_identity(small_config(init_from="gpt2", base_scale="paper"))


def test_presets_train_both_arms_from_the_shared_base():
    cpu = scale_config("cpu")
    assert cpu.base_scale == "cpu" and cpu.seq_len >= 256 and not cpu.init_from
    for scale in ("smoke", "cpu", "paper"):
        values = PRESETS["04_control_codes"][scale]
        assert values["arms"] == ["from_base", "scratch"] and values["scratch_lr"] > 0
    assert scale_config("smoke").base_scale == "smoke"  # CI never needs models/base
    assert PRESETS["04_control_codes"]["cpu"]["lr"] < PRESETS["04_control_codes"]["cpu"]["scratch_lr"]


def test_an_exported_arm_is_evaluated_as_the_arm_it_was(trained, tmp_path):  # noqa: F811
    loaded, metrics, _, _ = trained
    config = small_config(init_from="models/base", scratch=True)
    folder = export_model(loaded, tmp_path / "demo", "smoke", config, metrics, [])
    (arm, run), = exported_arm(folder).items()
    assert arm == "scratch" and run.config == config and run.model_dir == folder


def tables(right: dict[str, float], top1: dict[str, float]) -> tuple[pd.DataFrame, ...]:
    """Hand-made per-arm tables: two domains, the given mean right-code perplexity and top-1 per arm."""
    perplexity = by_arm({arm: pd.DataFrame({
        "domain": ["A", "B"], "right_code": [ppl - 1, ppl + 1], "wrong_code_mean": [ppl + 10, ppl + 20],
        "no_code": [ppl + 5, ppl + 5]}) for arm, ppl in right.items()})
    attribution = by_arm({arm: pd.DataFrame({
        "true_code": ["A", "B", "all"], "documents": [2, 2, 4], "top1": [1.0, 0.0, share], "top3": [1.0, 1.0, 1.0]})
        for arm, share in top1.items()})
    control = by_arm({arm: pd.DataFrame({"code": ["A", "B"], "generations": [6, 2], "accuracy": [0.5, 1.0]})
                      for arm in right})
    repetition = by_arm({arm: pd.DataFrame({"setting": ["greedy", "greedy + ctrl θ=1.2", "nucleus p=0.9"],
                                            "repeated_4gram": [0.4, 0.01, 0.0]}) for arm in right})
    return perplexity, attribution, control, repetition


def test_arms_table_and_verdict_on_hand_made_tables():
    table = arms_table(*tables({"from_base": 20.0, "scratch": 30.0}, {"from_base": 0.5, "scratch": 0.75}))
    assert list(table["arm"]) == ["from_base", "scratch"]
    row = table.set_index("arm").loc["scratch"]
    assert row["right_code_ppl"] == 30.0 and row["wrong_code_ppl"] == 45.0 and row["no_code_ppl"] == 35.0
    assert row["attribution_top1"] == 0.75 and row["attribution_top3"] == 1.0
    assert row["controllability"] == pytest.approx((6 * 0.5 + 2 * 1.0) / 8)  # over generations, not codes
    assert row["repeated_4gram_greedy"] == 0.4 and row["repeated_4gram_theta"] == 0.01
    arm, reason = better_arm(table)
    assert arm == "from_base" and "lower mean right-code perplexity: 20.00 vs 30.00" in reason

    # Within 1%: the higher attribution top-1 decides, whichever arm has the (slightly) lower perplexity.
    close = arms_table(*tables({"from_base": 20.0, "scratch": 20.1}, {"from_base": 0.5, "scratch": 0.75}))
    arm, reason = better_arm(close)
    assert arm == "scratch" and "higher attribution top-1: 0.750 vs 0.500" in reason
    tied = arms_table(*tables({"from_base": 20.1, "scratch": 20.0}, {"from_base": 0.5, "scratch": 0.5}))
    assert better_arm(tied)[0] == "from_base"  # equal top-1 too: the first arm
    assert better_arm(close, tolerance=0.001)[0] == "from_base"  # 0.5% apart is a win at a 0.1% tolerance
    assert better_arm(table.iloc[[1]]) == ("scratch", "the only arm evaluated")

    perplexity, attribution, control, repetition = tables({"from_base": 20.0}, {"from_base": 0.5})
    with pytest.raises(ValueError, match="attribution table has 0 rows for arm 'from_base'"):
        arms_table(perplexity, attribution[attribution["true_code"] != "all"], control, repetition)
    assert pd.isna(arms_table(perplexity, attribution, control, repetition.iloc[:1])["repeated_4gram_theta"][0])
