"""Krony-PT on SmolLM2 (lmstudy.krony.smol), on a tiny random Llama standing in for SmolLM2: the models' sizes, the
central comparison's runs and the choice of init on validation."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from test_smollm2 import tiny_llama_folder  # noqa: E402,F401  (a fixture)

from lmstudy.krony import smol  # noqa: E402
from lmstudy.krony.config import ModelSpec  # noqa: E402
from lmstudy.krony.llama import llama_compressed_parameter_count, llama_parameter_count  # noqa: E402
from lmstudy.runs import get_run, read_log_records  # noqa: E402

CORPORA = ("wikipedia", "litbank", "reddit", "imdb", "reuters21578", "bbc_news", "irc", "wikitext-2-raw", "lambada")


@pytest.fixture
def config(tiny_llama_folder, monkeypatch, tmp_path):
    from conftest import require_corpus, runs_sharing_corpus_caches

    for corpus in CORPORA:
        require_corpus(corpus)
    monkeypatch.setenv("LMSTUDY_RUNS", str(runs_sharing_corpus_caches(tmp_path / "runs")))
    smol._teacher.cache_clear()
    yield smol.smol_config("smoke", init_from=str(tiny_llama_folder))
    smol._teacher.cache_clear()


def test_models_have_their_class_sizes_and_random_factors_depend_on_the_seed(config):
    teacher = smol._teacher(config.init_from)[0]
    dense = llama_parameter_count(teacher.config)
    for size_class, kron in smol.class_configs(config).items():
        krony = smol.initial_model(config, smol.krony_spec(config, size_class, "van_loan"))
        assert sum(p.numel() for p in krony.parameters()) == llama_compressed_parameter_count(teacher.config, kron)
        narrowed = smol.initial_model(config, ModelSpec("narrowed", size_class))
        width = narrowed.config.intermediate_size
        assert width == smol.dense_inner(config, size_class) < teacher.config.intermediate_size
        assert sum(p.numel() for p in narrowed.parameters()) < dense
    spec = smol.krony_spec(config, "81M", "random")
    first, again, other = (smol.initial_model(config, spec, seed) for seed in (0, 0, 1))
    ids = torch.arange(10).unsqueeze(0)
    with torch.no_grad():
        assert torch.equal(first(ids).logits, again(ids).logits)
        assert not torch.equal(first(ids).logits, other(ids).logits)
    # the teacher is never changed by building students from it
    assert llama_parameter_count(teacher.config) == dense == sum(p.numel() for p in teacher.parameters())


@pytest.mark.slow  # builds the streams and trains a student
def test_a_student_built_after_a_distillation_trains_every_weight(config):
    smol.smol_continued_run(config, ModelSpec("distilled", "81M"))  # freezes the shared teacher
    assert not any(p.requires_grad for p in smol._teacher(config.init_from)[0].parameters())
    model = smol.initial_model(config, smol.krony_spec(config, "81M", "van_loan"))
    assert all(p.requires_grad for p in model.parameters())


@pytest.mark.slow  # ~20 s: eight tiny runs and the command line
def test_the_central_comparison_trains_every_model_and_chooses_the_init_on_validation(config, tmp_path):
    from lmstudy.__main__ import main

    out = tmp_path / "out"
    assert main(["krony", "smol", "--scale", "smoke", "--parts", "central", "trend", "-p", "init_from",
                 config.init_from, "--out", str(out), "--threads", "1"]) == 0
    assert (out / "base.csv").is_file() and (out / "03_krony_quality_trend.png").is_file()
    table = pd.read_csv(out / "central.csv")
    first, second = table[table["seed"] == 0], table[table["seed"] == 1]
    assert sorted(first["kind"]) == ["distilled", "krony", "krony", "krony", "narrowed"]
    krony = first[first["kind"] == "krony"]
    chosen = krony.loc[krony["best_val_loss"].idxmin(), "init"]
    assert smol.best_init(table, "81M") == chosen
    assert sorted(second["kind"]) == ["distilled", "krony", "narrowed"]
    assert set(second.loc[second["kind"] == "krony", "init"]) == {chosen}
    assert (table["finetune_tokens"] == config.finetune_steps * config.tokens_per_step).all()
    assert (table["train_seconds"] > 0).all() and table["wikitext_bpb"].notna().all()
    # the distilled and narrowed models start from the same weights, and training changed them apart
    dense = first.set_index("kind").loc[["distilled", "narrowed"]]
    assert dense["before_wikitext_bpb"].nunique() == 1 and dense["wikitext_bpb"].nunique() == 2
    # the distilled model's loss had the teacher's term
    run = get_run(smol.STUDY, smol.continued_identity(config, ModelSpec("distilled", "81M"), 0))
    assert any("kd" in record for record in read_log_records(run.log_path))
    # a second call reads every run back
    again = smol.central_table(config)
    assert again["wikitext_bpb"].tolist() == pytest.approx(table["wikitext_bpb"].tolist(), rel=1e-12)
    assert again["train_seconds"].tolist() == pytest.approx(table["train_seconds"].tolist(), rel=1e-12)
    # the grid's compare class is the central comparison's first seed, read back, not trained again
    grid = smol.grid_table(replace(config, classes=["81M"]))
    assert grid["wikitext_bpb"].tolist() == pytest.approx(first["wikitext_bpb"].tolist(), rel=1e-12)


@pytest.mark.parametrize("overrides, message", [
    ({"finetune_tokens": 10}, "less than one step"),
    ({"classes": ["50M"]}, "unknown size class"),
    ({"inits": []}, "inits must be"),
    ({"learning_rate": 1.0}, "not a setting"),
])
def test_bad_settings_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        smol.smol_config("smoke", **overrides)


def test_the_quality_trend_adds_smollm2_from_its_central_table(tmp_path):
    """The completed trend: our committed cpu and GPU points, plus SmolLM2's seeds from a central table (made up
    here), the Krony init being the one with the lowest validation loss."""
    from lmstudy.krony import quality_trend

    without = quality_trend.trend_points(tmp_path)  # no SmolLM2 results yet: the six committed points alone
    assert set(without["setting"]) == {"our base (cpu)", "GPT-2 small dims (GPU)"}
    rows = [{"model": "Krony", "kind": "krony", "class": "81M", "init": init, "seed": 0, "best_val_loss": loss,
             "wikitext_bpb": bpb}
            for init, loss, bpb in (("van_loan", 2.0, 1.10), ("prune", 2.1, 0.90), ("random", 3.0, 1.50))]
    rows += [{"model": "Krony", "kind": "krony", "class": "81M", "init": "van_loan", "seed": seed,
              "best_val_loss": 2.0, "wikitext_bpb": 1.10 + seed / 100} for seed in (1, 2)]
    rows += [{"model": kind, "kind": kind, "class": "81M", "init": None, "seed": seed, "best_val_loss": 2.0,
              "wikitext_bpb": 1.00 + seed / 100 + (kind == "narrowed")} for kind in ("distilled", "narrowed")
             for seed in (0, 1, 2)]
    pd.DataFrame(rows).to_csv(tmp_path / "central.csv", index=False)
    pd.DataFrame([{"kind": "base", "wikitext_bpb": 0.95}]).to_csv(tmp_path / "base.csv", index=False)
    points = quality_trend.trend_points(tmp_path)
    smol_points = points[points["setting"] == "SmolLM2-135M"]
    assert list(smol_points["seed"]) == [0, 1, 2] and (smol_points["base_bpb"] == 0.95).all()
    assert smol_points["gap"].round(6).tolist() == [0.1, 0.1, 0.1]  # van_loan (lowest validation loss) - distilled
    table = quality_trend.quality_claims(points)
    assert len(table) == len(without.groupby(["setting", "checkpoint"])) + 1
    assert table["level"].is_monotonic_increasing  # worst base first
    assert table.iloc[-1]["verdict"] == "does not hold"  # Krony 0.1 bits per byte behind at every seed


def test_the_smollm2_claims_pair_the_central_seeds_and_read_one_seed_elsewhere():
    """smol_claims on made-up tables: Krony 2% ahead of distilled in every seed (holds), vanilla level with
    distilled (an equivalence: holds), the grid's other class and Table 6 one seed each; the init of the central
    rows is the one of lowest validation loss at seed 0, not the test's best."""
    import pandas as pd

    from lmstudy.claims import VERDICTS
    from lmstudy.krony.claims import smol_claims

    def row(model, size_class, seed, bpb, init=None, factors=None, scalars=None, val=7.0):
        return {"model": model, "class": size_class, "seed": seed, "init": init, "factors": factors,
                "scalars": scalars, "wikitext_bpb": bpb, "lambada_ppl": 100 * bpb, "best_val_loss": val}

    central = pd.DataFrame(
        [row("Krony", "81M", 0, 3.0, "van_loan", 3, False, val=7.0),
         row("Krony", "81M", 0, 2.0, "random", 3, False, val=7.5)]  # best on test, not on validation
        + [row("Krony", "81M", s, 0.98 * (3.0 + 0.01 * s), "van_loan", 3, False) for s in (1, 2)]
        + [row("distilled", "81M", s, 3.0 + 0.01 * s) for s in (0, 1, 2)]
        + [row("narrowed, no teacher", "81M", s, 3.0 + 0.01 * s + 0.0001 * s) for s in (0, 1, 2)])
    central.loc[0, "wikitext_bpb"] = 0.98 * 3.0
    central.loc[0, "lambada_ppl"] = 100 * 0.98 * 3.0
    grid = pd.DataFrame([row("Krony", "96M", 0, 2.5, "van_loan", 2, False), row("Krony", "96M", 0, 2.6, "random", 2,
                                                                                 False),
                         row("distilled", "96M", 0, 2.4), row("narrowed, no teacher", "96M", 0, 2.45)])
    table6 = pd.DataFrame([row("Krony", "81M", 0, 3.0, "van_loan", n, scalars) for n in (1, 2) for scalars in
                           (False, True)])
    table = smol_claims(central, grid, table6).set_index(["claim", "dataset"])
    assert set(table["verdict"]) <= set(VERDICTS)
    central_row = table.loc[("Our 81M model variant outperforms distilgpt2 on all standard language modeling "
                             "datasets", "WikiText-2 test")]
    assert central_row["verdict"] == "holds" and central_row["seeds"] == 3 and "van_loan" in central_row["note"]
    vanilla = table.loc[("Distillation: empirical evidence shows no benefits compared to only vanilla supervised "
                         "learning: 81M class", "WikiText-2 test")]
    assert vanilla["verdict"] == "holds"
    other = table.loc[("Our 96M model variant outperforms distilgpt2 on all standard language modeling datasets",
                       "WikiText-2 test")]
    assert other["verdict"] == "one seed"
    van_loan = table.loc[("Van Loan init passes on the pre-training ('VL is not a random initialization', Sec. "
                          "5.2): beats random init, 96M class", "WikiText-2 test")]
    assert van_loan["verdict"] == "one seed" and van_loan["effect"].startswith("+3.8")  # (2.6 - 2.5) / 2.6
    assert table.filter(like="Adding multiple factors", axis=0)["verdict"].tolist() == ["one seed"]
    assert table.filter(like="scalars can", axis=0)["verdict"].tolist() == ["one seed", "one seed"]
