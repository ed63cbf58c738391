"""Welch's freezing claims as trends over training length (lmstudy.welch.trend)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from lmstudy.claims import DOES_NOT_HOLD, HOLDS, RULE, TOWARD
from lmstudy.welch.trend import (
    TREND_CLAIMS, TREND_CONFIGS, best_within, plot_trend_gaps, study_trend_configs, trend_claims, trend_configs, trend_gaps,
)


def test_best_within_reads_the_first_epochs_of_a_longer_run():
    evaluations = [{"epoch": 0, "val_loss": 5.0}, {"epoch": 1, "val_loss": 4.0}, {"epoch": 2, "val_loss": 4.5},
                   {"epoch": 5, "val_loss": 3.0}]
    assert best_within(evaluations, 1) == pytest.approx(math.exp(5.0))
    assert best_within(evaluations, 3) == pytest.approx(math.exp(4.0))  # the best so far, not the last
    assert best_within(evaluations, 10) == pytest.approx(math.exp(3.0))
    assert math.isnan(best_within([], 2))


def test_trend_configs_cover_four_configs_two_settings_and_the_seeds():
    configs = trend_configs({"emb_size": 16, "configs": "section3", "max_epochs": 2, "max_steps": 24, "seeds": [9]}, [0, 1], epoch_cap=40,
                            stop_after=3)
    assert len(configs) == 4 * 2 * 2
    assert {c.embedding for c in configs} == set(TREND_CONFIGS.values())
    assert {(c.domain, c.unk_cutoff) for c in configs} == {("news", 1), ("news", 0)}  # Std-news and Rare
    assert all(c.max_epochs == 40 and c.max_steps == 0 and c.patience == 3 and c.emb_size == 16 for c in configs)
    assert {c.seed for c in configs} == {0, 1}  # notebook keys that are no run fields are ignored
    with pytest.raises(ValueError, match="stop_after >= 1"):
        trend_configs({}, [0], epoch_cap=40, stop_after=0)


def synthetic_table() -> pd.DataFrame:
    """Freezing costs 10 ppl at 2 epochs, 3 at 8 and gains 5 at 40 (both settings; seed noise +-0.5); the
    standard approaches are always behind ours with the input trainable."""
    gap = {2: 10.0, 8: 3.0, 40: -5.0}
    rows = []
    for dataset in ("Std-news", "Rare"):
        for epochs, g in gap.items():
            for seed, noise in ((0, -0.5), (1, 0.0), (2, 0.5)):
                trainable = 200.0 - epochs
                values = {"ours, input trainable": trainable, "ours": trainable + g + noise,
                          "standard": trainable + 2.0, "standard + pretraining": trainable + 1.0}
                for label, ppl in values.items():
                    rows.append({"config": TREND_CONFIGS[label], "label": label, "dataset": dataset, "seed": seed,
                                 "epochs": epochs, "valid_ppl": ppl})
    return pd.DataFrame(rows)


def test_claims_follow_the_gap_across_lengths():
    gaps = trend_gaps(synthetic_table())
    first = gaps[(gaps["dataset"] == "Rare") & (gaps["epochs"] == 2) & (gaps["seed"] == 2)].iloc[0]
    assert first["frozen_minus_trainable"] == pytest.approx(10.5)
    assert first["ours_minus_best_other"] == pytest.approx(10.5)  # the best other: ours with the input trainable
    table = trend_claims(synthetic_table())
    assert table.attrs["rule"] == RULE
    freezing_claim, best_claim = (claim for claim, *_ in TREND_CLAIMS)
    freezing = table[(table["claim"] == freezing_claim) & (table["dataset"] == "Std-news")]
    assert freezing["level"].tolist() == [2, 8, 40]  # levels = epochs
    # Paired over 3 seeds: -10 +- 0.5 and -3 +- 0.5 are clear of zero against the paper, +5 +- 0.5 for it.
    assert freezing["verdict"].tolist() == [DOES_NOT_HOLD, DOES_NOT_HOLD, HOLDS]
    assert freezing["effect"].iloc[0] == "-10.0 [-11.2, -8.8]" and set(freezing["seeds"]) == {3}
    assert freezing["trend"].str.startswith(TOWARD).all()
    assert freezing["ours"].iloc[-1] == "ours 155.0 ± 0.5 vs ours, input trainable 160.0 ± 0.0"
    best = table[table["claim"] == best_claim]
    assert best["dataset"].tolist() == ["Rare"] * 3
    assert best["verdict"].tolist() == [DOES_NOT_HOLD, DOES_NOT_HOLD, HOLDS]
    assert table["note"].str.contains("not independent draws").all()


def test_published_trend_claims_read_the_committed_table():
    from lmstudy.welch.trend import published_claims

    published = published_claims()
    assert published["level"].tolist() == [2, 6, 40] * 3 and set(published["seeds"]) == {3}
    forty = published[published["level"] == 40]
    assert set(forty["verdict"]) == {DOES_NOT_HOLD}  # at 40 epochs freezing still costs 7-8 points on every seed


def test_last_quarter_gain_is_what_the_last_quarter_of_epochs_added():
    from lmstudy.welch.trend import last_quarter_gain

    # epochs 0-7: the best of the first 6 (three quarters of 8) is exp(5.0), the best overall exp(4.9)
    evaluations = [{"epoch": epoch, "val_loss": loss} for epoch, loss in enumerate([6, 5.5, 5.2, 5.1, 5.05, 5.0, 4.95,
                                                                                   4.9])]
    assert last_quarter_gain(evaluations, 8) == pytest.approx(100 * (math.exp(5.0) / math.exp(4.9) - 1))
    flat = [dict(record, val_loss=max(record["val_loss"], 5.0)) for record in evaluations]
    assert last_quarter_gain(flat, 8) == 0.0


def test_the_gap_figure_has_one_series_per_setting():
    figure = plot_trend_gaps(trend_gaps(synthetic_table()), "frozen_minus_trainable", title="freezing")
    assert [text.get_text() for text in figure.axes[0].get_legend().get_texts()] == ["Std-news", "Rare"]


@pytest.mark.slow
def test_the_trend_runs_end_to_end_on_real_text(tmp_path, monkeypatch):
    """The smoke preset's trend as notebook 01 runs it: eight tiny AWD-LSTM runs (4 configurations x Std-news,
    Rare) up to 3 epochs with early stopping, read at 1 and 3 epochs: the 1-epoch point is the best of the run's
    first epoch, never better than the 3-epoch one. The corpus caches are the suite's (news' token cache)."""
    from conftest import require_corpus, runs_sharing_corpus_caches

    from lmstudy.scales import preset
    from lmstudy.welch.trend import trend_table

    for corpus in ("reuters21578", "bbc_news"):
        require_corpus(corpus)
    monkeypatch.setenv("LMSTUDY_RUNS", str(runs_sharing_corpus_caches(tmp_path / "runs")))
    p = preset("01_embedding_init", "smoke")  # its max_steps (24) bounds Table 1's runs, not the trend's
    configs = study_trend_configs(p)
    table = trend_table(configs, p["trend_lengths"])
    assert len(table) == 8 * 2 and table["valid_ppl"].notna().all()
    wide = table.pivot_table(index=["config", "dataset"], columns="epochs", values="valid_ppl")
    assert (wide[3] <= wide[1]).all()
    assert set(trend_claims(table)["claim"]) == {claim for claim, *_ in TREND_CLAIMS}


def test_study_trend_configs_train_on_the_trend_tokens_not_table_1s():
    from lmstudy.scales import preset

    p = preset("01_embedding_init", "cpu")
    configs = study_trend_configs(p)
    assert len(configs) == len(TREND_CONFIGS) * 2 * len(p["trend_seeds"])
    assert {c.train_tokens for c in configs} == {p["trend_train_tokens"]} != {p["train_tokens"]}
    assert {c.max_epochs for c in configs} == {p["trend_epoch_cap"]}
    rare_only = study_trend_configs({**p, "trend_settings": ["Rare"]})  # (the paper dry run's trend)
    assert rare_only == configs[len(configs) // 2:]  # the second setting's half
    with pytest.raises(ValueError, match="data settings are some of"):
        study_trend_configs({**p, "trend_settings": ["Std"]})
