"""lmstudy.claims: spreads over seeds, the paired t rule, verdicts, trends and the claims table (hand-made numbers)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from lmstudy.claims import (
    AWAY, DOES_NOT_HOLD, FLAT, HOLDS, NEGLIGIBLE, NOT_RUN, ONE_SEED, RULE, TOWARD, WITHIN_NOISE, ClaimRow, Effect,
    Spread, against, by_seed, claims_table, differences, paired, spread_table, spreads, trend, trend_rows, unpaired,
    verdict, verdict_changes,
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


def test_paired_t_interval_by_hand():
    # Differences 2, 3, 4: mean 3, sd 1, se 1/sqrt(3); t(0.975, 2) = 4.3027.
    ours = pd.Series({0: 8.0, 1: 7.0, 2: 6.0})
    baseline = pd.Series({0: 10.0, 1: 10.0, 2: 10.0})
    lower = paired(ours, baseline, "lower")
    assert lower.mean == pytest.approx(3.0) and lower.n == 3 and lower.method == "paired t"
    assert lower.low == pytest.approx(3 - 4.3027 / 3 ** 0.5, abs=1e-4)
    assert lower.high == pytest.approx(3 + 4.3027 / 3 ** 0.5, abs=1e-4)
    assert verdict(lower) == HOLDS
    higher = paired(ours, baseline, "higher")  # the same numbers read the other way
    assert higher.mean == pytest.approx(-3.0) and verdict(higher) == DOES_NOT_HOLD
    # Pairs follow the seed, not the order; a seed one side lacks is left out.
    shuffled = paired(ours[[2, 0, 1]], pd.Series({1: 10.0, 0: 10.0, 2: 10.0, 7: 0.0}), "lower")
    assert (shuffled.mean, shuffled.n) == (pytest.approx(3.0), 3)
    assert paired({0: 1.0, 1: 2.0}, {0: 1.5, 1: 2.5}).format(1) == "+0.5 [+0.5, +0.5]"
    with pytest.raises(ValueError):
        paired(ours, baseline, "smaller")


def test_the_seven_standard_deviation_effect_is_not_noise():
    # Entity gold-minus-null at 960 steps: 0.07 +/- 0.01 perplexity over 3 seeds, the same sign in each. The old
    # rule (a resolution of 0.1% of a ~100 perplexity) called it within noise; the interval is clear of zero.
    gaps = [0.06, 0.07, 0.08]
    consistent = differences(gaps)
    assert consistent.low > 0.04 and consistent.high < 0.10
    assert verdict(consistent) == HOLDS
    # With a stated practical threshold above it, it is real but negligible, never "within noise".
    assert verdict(consistent, negligible=0.1) == NEGLIGIBLE
    assert verdict(differences([-g for g in gaps]), negligible=0.1) == NEGLIGIBLE
    assert verdict(consistent, negligible=0.05) == HOLDS


def test_each_verdict_from_hand_made_numbers():
    assert verdict(differences([1.0, 1.2, 0.9])) == HOLDS
    assert verdict(differences([-1.0, -1.2, -0.9])) == DOES_NOT_HOLD
    assert verdict(differences([0.5, -0.4, 0.2])) == WITHIN_NOISE  # the interval covers zero
    # The old rule's blind spot: a mean beyond the larger std (t ~ 1.2 with 3 seeds) is not a result.
    assert verdict(differences([2.0, 0.2, 0.4])) == WITHIN_NOISE
    one = differences([3.0])
    assert verdict(one) == ONE_SEED and one.format() == "+3.00" and not one.has_interval
    assert verdict(differences([])) == NOT_RUN and verdict(differences([math.nan])) == NOT_RUN
    assert differences([]).format() == "n/a"


def test_unpaired_welch_and_one_sided_seeds():
    # Two seeds each, no seed in common: Welch's t.
    welch = paired({0: 10.0, 1: 12.0}, {5: 20.0, 6: 22.0}, "lower")
    assert welch.method == "Welch t" and welch.mean == pytest.approx(10.0)
    # se = sqrt(2/2 + 2/2) = sqrt 2, dof = 2; t(0.975, 2) = 4.3027
    assert welch.high - welch.mean == pytest.approx(4.3027 * 2 ** 0.5, abs=1e-3)
    assert verdict(welch) == HOLDS
    # One side with one seed: the difference, no interval, no verdict (the old rule let the sign decide).
    lonely = unpaired([100.0], [90.0, 91.0, 92.0], "lower")
    assert lonely.mean == pytest.approx(-9.0) and verdict(lonely) == ONE_SEED
    spreads_ = unpaired(Spread(463.0, 10.7, 3), Spread(454.3, 12.5, 3), "lower")  # Welch Table 2, News
    assert verdict(spreads_) == WITHIN_NOISE


def test_against_a_threshold_and_similarity_claims():
    overhead = against([2.5, 3.1, 2.8], 10.0, "lower")  # per cent, paper: "small" = under 10%
    assert overhead.mean == pytest.approx(10 - 2.8) and verdict(overhead) == HOLDS
    assert verdict(differences([0.1, -0.1, 0.05]), similar_within=2.0) == HOLDS
    assert verdict(differences([5.0, 5.5, 6.0]), similar_within=2.0) == DOES_NOT_HOLD
    assert verdict(differences([1.0, 3.0, 2.5]), similar_within=2.0) == WITHIN_NOISE


def test_trend_reads_every_level_and_its_order():
    levels = [1_000, 10_000, 100_000]  # tokens: one decade apart
    growing = [[-2.1, -1.9, -2.0], [0.1, -0.1, 0.0], [2.0, 2.1, 1.9]]
    rising = trend(levels, growing)
    assert rising.direction == TOWARD and rising.slope == pytest.approx(2.0, abs=1e-6) and rising.points == 9
    assert rising.low > 0
    assert trend(levels, [[-v for v in vs] for vs in growing]).direction == AWAY
    # The middle level counts: ends equal, middle high is no slope (first-vs-last would have said flat too,
    # but a rise through the middle with the last level low is not "toward").
    assert trend(levels, [[1.0, 1.1, 0.9], [5.0, 5.2, 4.8], [1.0, 0.9, 1.1]]).direction == FLAT
    # Only first and last compared would call this toward; the middle says the slope is noise.
    assert trend(levels, [[0.0, 0.1, -0.1], [3.0, 2.0, 4.0], [0.5, 0.4, 0.6]]).direction == FLAT
    with pytest.raises(ValueError, match="increase"):
        trend([10_000, 1_000, 100_000], growing)
    with pytest.raises(ValueError, match="positive"):
        trend([0, 1, 2], growing)
    with pytest.raises(ValueError):
        trend([1, 2], growing)
    assert trend([1], [[2.0, 2.1]]).direction == NOT_RUN
    assert trend([1, 10], [[2.0], [3.0]]).direction == ONE_SEED  # two points: a slope, no interval
    assert "slope +2.00" in rising.format() and "per decade" in rising.format()


def test_trend_rows_give_a_verdict_per_level_and_the_claims_trend():
    rows = trend_rows("ours beats standard", [1e6, 4e6], [[-0.2, 0.5, -0.4], [2.0, 2.2, 1.9]],
                      ours=["ours 100.2 vs 100.0", "ours 90.0 vs 92.0"], paper="-3.1")
    table = claims_table(rows)
    assert list(table.columns) == ["claim", "level", "paper", "ours", "effect", "seeds", "verdict", "trend"]
    assert table["verdict"].tolist() == [WITHIN_NOISE, HOLDS] and table["seeds"].tolist() == [3, 3]
    assert all(text.startswith(TOWARD) for text in table["trend"])
    assert table.attrs["rule"] == RULE


def test_claim_rows_compute_their_verdict_and_need_a_reason_when_not_run():
    row = ClaimRow("a", differences([1.0, 1.1, 0.9]), paper="+1", ours="10 vs 11")
    assert row.verdict == HOLDS
    with pytest.raises(TypeError):
        ClaimRow("a", differences([1.0]), verdict=HOLDS)  # a verdict is never given by hand
    with pytest.raises(ValueError, match="says why"):
        ClaimRow("b", None)
    table = claims_table([row, ClaimRow.not_run("b", "needs c")])
    assert list(table.columns) == ["claim", "paper", "ours", "effect", "seeds", "verdict", "note"]
    assert table["verdict"].tolist() == [HOLDS, NOT_RUN] and table["note"].tolist()[1] == "needs c"
    assert list(claims_table([]).columns) == ["claim", "paper", "ours", "effect", "seeds", "verdict"]


def test_by_seed_and_verdict_changes():
    runs = pd.DataFrame({"model": ["a", "a", "b", "b"], "seed": [0, 1, 0, 1], "ppl": [9.0, 8.0, 10.0, 10.0]})
    assert by_seed(runs, "ppl", model="a").to_dict() == {0: 9.0, 1: 8.0}
    old = pd.DataFrame({"claim": ["x", "y"], "verdict": [HOLDS, DOES_NOT_HOLD]})
    new = pd.DataFrame({"claim": ["x", "y", "z"], "verdict": [HOLDS, WITHIN_NOISE, NOT_RUN]})
    changes = verdict_changes(old, new)
    assert changes["claim"].tolist() == ["y", "z"] and changes["new"].tolist() == [WITHIN_NOISE, NOT_RUN]
    assert Effect(1.0).format() == "+1.00"
