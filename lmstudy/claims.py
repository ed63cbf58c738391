"""Claims: every study's verdict on a paper's claims, with the numbers it rests on, in one vocabulary.

A study states each claim of its paper as one row (:class:`ClaimRow`): the claim, a verdict, the evidence
(the numbers, as text), and where the study has them the ``dataset`` it was checked on and the compute
``level`` (tokens, steps, epochs) it was measured at. :func:`claims_table` turns the rows into the
DataFrame the notebooks print and save; every study module builds it in a function named ``claims``.

The verdicts, exactly these four strings:

- ``holds``: our numbers go the paper's way (beyond the seed noise, where the study measures it);
- ``does not hold``: they do not;
- ``within noise``: the difference is within the seed noise (below), so the numbers cannot say;
- ``not run``: the study did not run what the claim needs (the evidence says what is missing).

Seeds. A number measured over seeds is a :class:`Spread`: mean, standard deviation (``ddof=1``; NaN with
one seed) and the number of seeds, written "12.3 ± 0.4" (the std is left out with one seed).
:func:`spread_table` gives the spreads of a DataFrame's columns per group, :func:`spreads` those of one
column as :class:`Spread` values.

The noise rule. A claim that one side is better than another is an :func:`effect`: the difference of the
two means, oriented so that positive is the paper's direction, whose ``std`` is the *larger* of the two
seed stds (the noise scale of the comparison, not the standard error of the difference: a simple,
conservative rule every study shares). :func:`verdict_of` reads it: ``within noise`` when both stds are
known and ``|effect| <= std``; else ``holds`` when the effect is positive, ``does not hold`` when not.
With one seed (stds unknown) there is no noise to compare with and the sign decides. A study may also name a
``resolution``, the smallest effect it counts (an effect within it is ``within noise`` however consistent).

Trends. A claim measured at several compute levels also says whether the effect moves toward the paper
as compute grows: :func:`trend` compares the effect at the largest level with the one at the smallest,
by the same noise rule (``toward the paper``, ``away from the paper`` or ``flat (within noise)``), and
:func:`trend_rows` gives one claims row per level, each with its own verdict and the claim's trend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import pandas as pd

HOLDS = "holds"
DOES_NOT_HOLD = "does not hold"
WITHIN_NOISE = "within noise"
NOT_RUN = "not run"
VERDICTS = (HOLDS, DOES_NOT_HOLD, WITHIN_NOISE, NOT_RUN)

TOWARD = "toward the paper"
AWAY = "away from the paper"
FLAT = "flat (within noise)"
TRENDS = (TOWARD, AWAY, FLAT, NOT_RUN)


# ---------------------------------------------------------------------------------------------------
# Mean and spread over seeds
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """Mean and standard deviation (``ddof=1``, NaN when ``n < 2``) of ``n`` values, one per seed."""

    mean: float
    std: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        """The spread of ``values`` (NaN values are left out, as pandas does)."""
        series = pd.Series(values, dtype=float).dropna()
        return cls(float(series.mean()), float(series.std(ddof=1)), len(series))

    def format(self, digits: int = 1, sign: bool = False) -> str:
        """As text: "12.3 ± 0.4" (``digits`` decimals; ``sign``: "+12.3"); the std left out when unknown."""
        mean = f"{self.mean:+.{digits}f}" if sign else f"{self.mean:.{digits}f}"
        return mean if math.isnan(self.std) else f"{mean} ± {self.std:.{digits}f}"

    def __str__(self) -> str:
        return self.format()


def spread_table(table: pd.DataFrame, by: str | list[str], columns: list[str] | None = None) -> pd.DataFrame:
    """Mean, std (``ddof=1``; NaN with one seed) and n (values present) over the rows of each group of ``by``.

    ``columns``: the columns to summarise, by default every numeric column but ``by`` and ``seed``. The result
    has one row per group and the columns ``(column, "mean" | "std" | "n")``, so ``result["valid_ppl"]`` is a
    DataFrame with the columns mean, std and n.
    """
    keys = [by] if isinstance(by, str) else list(by)
    if columns is None:
        columns = [c for c in table.select_dtypes("number").columns if c not in keys and c != "seed"]
    stats = table.groupby(keys)[list(columns)].agg(["mean", "std", "count"])
    return stats.rename(columns={"count": "n"}, level=1)


def spreads(table: pd.DataFrame, by: str | list[str], column: str) -> pd.Series:
    """The :class:`Spread` of ``column`` over the rows of each group of ``by``: a Series indexed by group
    (``unstack`` it for a grid of spreads)."""
    stats = spread_table(table, by, [column])[column]
    values = [Spread(float(mean), float(std), int(n)) for mean, std, n in stats.itertuples(index=False)]
    return pd.Series(values, index=stats.index, name=column, dtype=object)


# ---------------------------------------------------------------------------------------------------
# Effects, verdicts and trends
# ---------------------------------------------------------------------------------------------------


def effect(claimed: Spread, other: Spread, better: str = "lower") -> Spread:
    """How far ``claimed`` (the side the paper says wins) is ahead of ``other``: positive = the paper's way.

    ``better``: "lower" (perplexity, loss, time) or "higher" (accuracy, F1, similarity). The std is the larger
    of the two seed stds when both are known (the module's noise rule), NaN otherwise; n the smaller n.
    """
    if better not in ("lower", "higher"):
        raise ValueError(f"better is 'lower' or 'higher', not {better!r}")
    difference = other.mean - claimed.mean if better == "lower" else claimed.mean - other.mean
    noise = math.nan if math.isnan(claimed.std) or math.isnan(other.std) else max(claimed.std, other.std)
    return Spread(difference, noise, min(claimed.n, other.n))


def verdict_of(advantage: Spread, resolution: float = 0.0) -> str:
    """The verdict on an effect oriented so that positive = the paper's direction (see :func:`effect`):
    ``within noise`` when its std is known and ``|mean| <= std``, or when ``|mean| <= resolution``, else
    ``holds`` if positive, else ``does not hold``; ``not run`` when the mean is NaN.

    ``resolution``: the smallest effect the study counts (0: any). Paired per-seed differences of two nearly
    identical models have a tiny std, so a consistent 0.0003 perplexity points would otherwise "hold"."""
    if math.isnan(advantage.mean):
        return NOT_RUN
    if resolution > 0 and abs(advantage.mean) <= resolution:
        return WITHIN_NOISE
    if not math.isnan(advantage.std) and abs(advantage.mean) <= advantage.std:
        return WITHIN_NOISE
    return HOLDS if advantage.mean > 0 else DOES_NOT_HOLD


def trend(levels: Sequence, effects: Sequence[Spread], resolution: float = 0.0) -> str:
    """Whether the effect moves toward the paper as compute grows.

    ``levels``: the compute levels in increasing order (tokens, steps, epochs); ``effects``: the effect at
    each, oriented so that positive = the paper's direction (:func:`effect`, or :meth:`Spread.of` of per-seed
    differences). Compares the largest level with the smallest: the change of the effect is read by the
    noise rule (both stds known: within the larger one is flat; a change within ``resolution`` is flat, as in
    :func:`verdict_of`), and an exactly equal effect is flat too. ``not run`` with fewer than two levels.
    """
    if len(levels) != len(effects):
        raise ValueError(f"{len(levels)} levels but {len(effects)} effects")
    if len(effects) < 2:
        return NOT_RUN
    change = effect(effects[-1], effects[0], better="higher")  # last minus first, with the noise rule's std
    verdict = verdict_of(change, resolution)
    if verdict == NOT_RUN:
        return NOT_RUN
    if verdict == WITHIN_NOISE or change.mean == 0:
        return FLAT
    return TOWARD if verdict == HOLDS else AWAY


# ---------------------------------------------------------------------------------------------------
# Claims rows and table
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimRow:
    """One claim's verdict and the numbers it rests on; ``dataset``, ``level`` (compute: tokens, steps,
    epochs) and ``trend`` only where the study has them."""

    claim: str
    verdict: str
    evidence: str = ""
    dataset: str | None = None
    level: object = None
    trend: str | None = None

    def __post_init__(self):
        # The vocabulary is the point of this module: a typo ("yes", "hold") fails here, not in a reader's head.
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")
        if self.trend is not None and self.trend not in TRENDS:
            raise ValueError(f"trend {self.trend!r} is not one of {TRENDS}")


def trend_rows(claim: str, levels: Sequence, effects: Sequence[Spread], digits: int = 1,
               evidence: Sequence[str] | None = None, dataset: str | None = None,
               resolution: float = 0.0) -> list[ClaimRow]:
    """One row per compute level: the verdict on that level's effect (:func:`verdict_of`) and the claim's
    :func:`trend` over all levels. ``evidence``: text per level put before the effect (e.g. the two sides'
    numbers); ``effects`` are oriented so that positive = the paper's direction; ``resolution`` as in
    :func:`verdict_of`, for the levels and the trend."""
    direction = trend(levels, effects, resolution)
    notes = evidence if evidence is not None else [""] * len(levels)
    if len(notes) != len(levels):
        raise ValueError(f"{len(levels)} levels but {len(notes)} evidence texts")
    rows = []
    for level, spread, note in zip(levels, effects, notes):
        numbers = f"effect {spread.format(digits, sign=True)}"
        rows.append(ClaimRow(claim, verdict_of(spread, resolution), f"{note}; {numbers}" if note else numbers,
                             dataset=dataset, level=level, trend=direction))
    return rows


_ORDER = ("claim", "dataset", "level", "verdict", "evidence", "trend")  # the table's columns, in order
_OPTIONAL = ("dataset", "level", "trend")


def claims_table(rows: Sequence[ClaimRow]) -> pd.DataFrame:
    """The claims DataFrame: claim, verdict, evidence, plus dataset, level and trend when any row has them
    (column order: claim, dataset, level, verdict, evidence, trend)."""
    table = pd.DataFrame([asdict(row) for row in rows], columns=list(_ORDER))
    return table[[c for c in _ORDER if c not in _OPTIONAL or table[c].notna().any()]]


__all__ = ["AWAY", "DOES_NOT_HOLD", "FLAT", "HOLDS", "NOT_RUN", "TOWARD", "TRENDS", "VERDICTS", "WITHIN_NOISE",
           "ClaimRow", "Spread", "claims_table", "effect", "spread_table", "spreads", "trend", "trend_rows",
           "verdict_of"]
