"""lmstudy.paired_gaps: the one helper that forms per-seed paired gaps for studies 01, 02 and 03's trends."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from lmstudy.paired_gaps import paired_gaps


def long_table() -> pd.DataFrame:
    """Two levels x two seeds x three models; model "c" has no run at level 2, seed 1."""
    rows = []
    for level in (1, 2):
        for seed in (0, 1):
            for model, value in (("a", 10.0 * level + seed), ("b", 11.0 * level), ("c", 9.0 * level + 2 * seed)):
                if not (model == "c" and level == 2 and seed == 1):
                    rows.append({"level": level, "seed": seed, "model": model, "ppl": value})
    return pd.DataFrame(rows)


def test_gaps_are_paired_by_level_and_seed_and_a_tuple_takes_the_lowest():
    gaps = paired_gaps(long_table(), ["level"], "ppl", {"a_minus_b": ("a", "b"), "a_minus_best": ("a", ("b", "c"))})
    assert list(gaps.columns) == ["level", "seed", "a_minus_b", "a_minus_best"]
    row = gaps.set_index(["level", "seed"])
    assert row.loc[(1, 1), "a_minus_b"] == pytest.approx(11.0 - 11.0)
    assert row.loc[(1, 1), "a_minus_best"] == pytest.approx(11.0 - 11.0)  # b and c both 11
    assert row.loc[(2, 0), "a_minus_best"] == pytest.approx(20.0 - 18.0)  # c is the lowest
    assert row.loc[(2, 1), "a_minus_best"] == pytest.approx(21.0 - 22.0)  # c has no run there: b alone


def test_a_side_without_a_run_gives_nan():
    gaps = paired_gaps(long_table(), ["level"], "ppl", {"a_minus_c": ("a", "c")})
    assert math.isnan(gaps.set_index(["level", "seed"]).loc[(2, 1), "a_minus_c"])
