"""lmstudy.claims: spreads over seeds, the noise rule, verdicts, trends and the claims table."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from lmstudy.claims import (
    AWAY, DOES_NOT_HOLD, FLAT, HOLDS, NOT_RUN, TOWARD, WITHIN_NOISE, ClaimRow, Spread, claims_table, effect,
    spread_table, spreads, trend, trend_rows, verdict_of,
)


def test_spread_of_known_values_and_its_format():
    spread = Spread.of([10.0, 12.0, 14.0])
    assert (spread.mean, spread.n) == (12.0, 3)
    assert spread.std == pytest.approx(2.0)  # ddof=1: sqrt((4 + 0 + 4) / 2)
    assert spread.format() == "12.0 ± 2.0" and str(spread) == "12.0 ± 2.0"
    assert Spread.of([0.5, 0.25]).format(3) == "0.375 ± 0.177"
    one = Spread.of([12.34])
    assert one.n == 1 and math.isnan(one.std) and one.format() == "12.3"  # no std with one seed
    assert Spread.of([1.0, float("nan"), 3.0]) == Spread(2.0, pytest.approx(2 ** 0.5), 2)  # NaN left out
    assert Spread(-1.25, 0.5, 2).format(2, sign=True) == "-1.25 ± 0.50"
    assert Spread(3.0, math.nan, 1).format(sign=True) == "+3.0"


def test_spread_table_and_spreads_group_over_seeds():
    runs = pd.DataFrame({"model": ["a", "a", "a", "b"], "seed": [0, 1, 2, 0],
                         "ppl": [10.0, 12.0, 14.0, 20.0], "acc": [0.1, 0.2, 0.3, 0.4]})
    table = spread_table(runs, "model")
    assert list(table.columns) == [("ppl", "mean"), ("ppl", "std"), ("ppl", "n"),
                                   ("acc", "mean"), ("acc", "std"), ("acc", "n")]  # seed is not summarised
    assert table.loc["a", ("ppl", "mean")] == 12.0 and table.loc["a", ("ppl", "std")] == pytest.approx(2.0)
    assert table.loc["a", ("ppl", "n")] == 3 and table.loc["b", ("ppl", "n")] == 1
    assert math.isnan(table.loc["b", ("ppl", "std")])
    by_model = spreads(runs, "model", "ppl")
    assert by_model["a"] == Spread(12.0, pytest.approx(2.0), 3) and by_model["b"].format() == "20.0"
    two_keys = spreads(runs.assign(dataset="x"), ["model", "dataset"], "acc")
    assert two_keys[("a", "x")].mean == pytest.approx(0.2) and ("b", "x") in two_keys.index


def test_effect_is_oriented_to_the_paper_and_its_noise_is_the_larger_std():
    ours, baseline = Spread(90.0, 1.0, 3), Spread(100.0, 4.0, 3)
    assert effect(ours, baseline, "lower") == Spread(10.0, 4.0, 3)  # lower perplexity: ours is 10 ahead
    assert effect(ours, baseline, "higher") == Spread(-10.0, 4.0, 3)
    assert math.isnan(effect(ours, Spread(100.0, math.nan, 1), "lower").std)  # one std unknown: no noise
    with pytest.raises(ValueError):
        effect(ours, baseline, "smaller")


def test_within_noise_boundary():
    # A difference equal to the larger std is within noise; just beyond it, the sign decides.
    gpt2 = Spread(20.0, 0.5, 3)
    assert verdict_of(effect(Spread(21.0, 1.0, 3), gpt2, "higher")) == WITHIN_NOISE
    assert verdict_of(effect(Spread(21.01, 1.0, 3), gpt2, "higher")) == HOLDS
    assert verdict_of(effect(Spread(18.99, 1.0, 3), gpt2, "higher")) == DOES_NOT_HOLD
    assert verdict_of(effect(Spread(19.0, 1.0, 3), gpt2, "higher")) == WITHIN_NOISE
    # One seed: no noise to compare with, so a tiny difference decides.
    assert verdict_of(effect(Spread(20.01, math.nan, 1), Spread(20.0, math.nan, 1), "higher")) == HOLDS
    assert verdict_of(Spread(0.0, math.nan, 1)) == DOES_NOT_HOLD  # equal is not better
    assert verdict_of(Spread(math.nan, math.nan, 0)) == NOT_RUN


def test_an_effect_within_the_resolution_is_within_noise_however_consistent():
    # Paired differences of two nearly identical models: a tiny std makes a negligible effect "hold".
    consistent = Spread(0.0004, 0.0001, 3)
    assert verdict_of(consistent) == HOLDS
    assert verdict_of(consistent, resolution=0.1) == WITHIN_NOISE
    assert verdict_of(Spread(0.3, 0.0001, 3), resolution=0.1) == HOLDS
    assert verdict_of(Spread(-0.3, math.nan, 1), resolution=0.1) == DOES_NOT_HOLD
    levels = [1, 2]
    assert trend(levels, [Spread(0.02, 0.01, 3), Spread(-0.07, 0.01, 3)]) == AWAY
    assert trend(levels, [Spread(0.02, 0.01, 3), Spread(-0.07, 0.01, 3)], resolution=0.1) == FLAT
    rows = trend_rows("x", levels, [Spread(0.02, 0.01, 3), Spread(-0.07, 0.01, 3)], resolution=0.1)
    assert [r.verdict for r in rows] == [WITHIN_NOISE, WITHIN_NOISE] and {r.trend for r in rows} == {FLAT}


def test_trend_toward_away_and_flat():
    levels = [1_000, 10_000, 100_000]  # tokens
    growing = [Spread(-2.0, 0.5, 3), Spread(0.0, 0.5, 3), Spread(3.0, 0.5, 3)]
    assert trend(levels, growing) == TOWARD
    assert trend(levels, [Spread(-s.mean, s.std, s.n) for s in growing]) == AWAY
    # A change within the larger std of the two ends is flat, whatever happens in between.
    assert trend(levels, [Spread(1.0, 0.5, 3), Spread(9.0, 0.5, 3), Spread(1.6, 0.8, 3)]) == FLAT
    assert trend(levels, [Spread(1.0, 0.5, 3), Spread(9.0, 0.5, 3), Spread(1.9, 0.8, 3)]) == TOWARD
    # A negative effect shrinking toward zero moves toward the paper, too.
    assert trend([1, 2], [Spread(-5.0, math.nan, 1), Spread(-1.0, math.nan, 1)]) == TOWARD
    assert trend([1, 2], [Spread(2.0, math.nan, 1), Spread(2.0, math.nan, 1)]) == FLAT
    assert trend([1], [Spread(2.0, 0.1, 3)]) == NOT_RUN
    with pytest.raises(ValueError):
        trend([1, 2], [Spread(2.0, 0.1, 3)])


def test_trend_rows_give_a_verdict_per_level_and_the_claims_trend():
    rows = trend_rows("ours beats standard", ["1M", "4M"], [Spread(-0.2, 0.5, 3), Spread(2.0, 0.5, 3)],
                      evidence=["ours 100.2 vs 100.0", "ours 90.0 vs 92.0"])
    table = claims_table(rows)
    assert list(table.columns) == ["claim", "level", "verdict", "evidence", "trend"]
    assert table["verdict"].tolist() == [WITHIN_NOISE, HOLDS] and set(table["trend"]) == {TOWARD}
    assert table["evidence"].tolist() == ["ours 100.2 vs 100.0; effect -0.2 ± 0.5",
                                          "ours 90.0 vs 92.0; effect +2.0 ± 0.5"]


def test_claims_table_columns_and_vocabulary():
    table = claims_table([ClaimRow("a", HOLDS, "1 < 2"), ClaimRow("b", NOT_RUN, "needs c")])
    assert list(table.columns) == ["claim", "verdict", "evidence"]  # no dataset, level or trend: left out
    with_dataset = claims_table([ClaimRow("a", DOES_NOT_HOLD, "", dataset="Std"), ClaimRow("b", HOLDS)])
    assert list(with_dataset.columns) == ["claim", "dataset", "verdict", "evidence"]
    assert list(claims_table([]).columns) == ["claim", "verdict", "evidence"]
    for bad in ("yes", "no", "hold"):
        with pytest.raises(ValueError, match="not one of"):
            ClaimRow("a", bad)
    with pytest.raises(ValueError, match="not one of"):
        ClaimRow("a", HOLDS, trend="up")
