"""Claims: one statistical rule for every verdict of every study, and the claims table they publish.

A study states each claim of its paper as one :class:`ClaimRow`: the claim as the paper words it, the paper's
number, our :class:`Effect` (a difference with its 95% interval over seeds), the verdict the rule reads from
it, and where the study has them the ``dataset`` and the compute ``level`` (tokens, steps, epochs).
:func:`claims_table` turns the rows into the DataFrame the notebooks print and save. A study never writes a
verdict itself: the row computes it from the effect (only *not run* is given by hand, with the reason), so
every table is built by this module's rule (``tests/test_claims_everywhere.py`` checks the study modules).

The effect. Every comparison is oriented so that positive = the paper's direction (``better``: "lower" for
perplexity, bits, time; "higher" for accuracy, F1, similarity) and measured per seed where the two sides share
seeds (the same seed = the same data order and initial draws, so the pair cancels most of the seed noise):

- :func:`paired`: the per-seed differences on the seeds both sides have, and their mean with the **paired t**
  interval ``mean ± t(0.975, n-1) · sd / sqrt(n)``;
- :func:`differences`: the same from per-seed differences a study has already formed;
- :func:`unpaired`: **Welch's t** interval, for two sides measured on different seeds (or given as spreads);
- :func:`against`: one side against a fixed number (a threshold the paper states, e.g. a +10% time overhead).

Why t and not a bootstrap: our studies run 2-5 seeds. A bootstrap of 3 values has 10 distinct resamples and its
percentile interval is far too narrow (it never reaches beyond the extreme values); the t interval is exact
when the per-seed differences are roughly normal and stays honest (wide) with few seeds: with 3 seeds it is
``mean ± 2.48 sd``. It is used for any number of seeds, so one rule reads every table.

The verdicts (:func:`verdict`), exactly these strings:

- ``holds``: the interval is clear of zero, on the paper's side;
- ``does not hold``: the interval is clear of zero, against the paper;
- ``within noise``: the interval covers zero: the numbers cannot tell;
- ``negligible``: clear of zero but the mean is smaller than the study's stated practical threshold
  (``negligible``: e.g. 0.1% of perplexity): real, too small to matter;
- ``one seed``: a single seed (or a single pair): no interval, so no verdict; the number is still shown;
- ``not run``: the study did not run what the claim needs (the row says why).

A claim that two things are *similar* (an equivalence claim) uses ``similar_within`` = its margin: ``holds``
when the whole interval lies inside ``± margin``, ``does not hold`` when it lies wholly outside, else
``within noise``.

Trends (:func:`trend`). A claim measured at several compute levels also says where the effect goes as compute
grows: the per-seed effects at every level are regressed on log10(level) (ordinary least squares over all
points, every level read), and the slope's 95% t interval (``n - 2`` degrees of freedom) says ``toward the
paper`` (clear of zero, positive), ``away from the paper`` (clear, negative) or ``flat`` (covers zero). The
levels must be given in increasing order (a shuffled list is an error, not a silently wrong slope); fewer than
three points (or one level) give ``one seed`` / ``not run``. Seeds at different levels are treated as
independent draws (the same seed number at two levels is a different continued training).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

HOLDS = "holds"
DOES_NOT_HOLD = "does not hold"
WITHIN_NOISE = "within noise"
NEGLIGIBLE = "negligible"
ONE_SEED = "one seed"
NOT_RUN = "not run"
VERDICTS = (HOLDS, DOES_NOT_HOLD, WITHIN_NOISE, NEGLIGIBLE, ONE_SEED, NOT_RUN)

TOWARD = "toward the paper"
AWAY = "away from the paper"
FLAT = "flat"
TRENDS = (TOWARD, AWAY, FLAT, ONE_SEED, NOT_RUN)

CONFIDENCE = 0.95
RULE = "paired t 95% (Welch t when unpaired); trend: OLS slope over log10(level)"  # the tables' attrs["rule"]


# ---------------------------------------------------------------------------------------------------
# Mean and spread over seeds (descriptive: the tables' "12.3 ± 0.4")
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
    stats_ = table.groupby(keys)[list(columns)].agg(["mean", "std", "count"])
    return stats_.rename(columns={"count": "n"}, level=1)


def spreads(table: pd.DataFrame, by: str | list[str], column: str) -> pd.Series:
    """The :class:`Spread` of ``column`` over the rows of each group of ``by``: a Series indexed by group
    (``unstack`` it for a grid of spreads)."""
    stats_ = spread_table(table, by, [column])[column]
    values = [Spread(float(mean), float(std), int(n)) for mean, std, n in stats_.itertuples(index=False)]
    return pd.Series(values, index=stats_.index, name=column, dtype=object)


def by_seed(table: pd.DataFrame, column: str, seed: str = "seed", **where) -> pd.Series:
    """``column`` of the rows of ``table`` matching ``where`` (column = value), indexed by ``seed``: one side
    of a :func:`paired` comparison."""
    mask = pd.Series(True, index=table.index)
    for key, value in where.items():
        mask &= table[key] == value
    return table[mask].set_index(seed)[column].astype(float)


# ---------------------------------------------------------------------------------------------------
# Effects: a difference and its 95% interval
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Effect:
    """A difference oriented so that positive = the paper's direction, with its 95% interval ``[low, high]``
    (NaN with one seed), the number of seeds (pairs) ``n`` and the ``method`` that gave the interval."""

    mean: float
    low: float = math.nan
    high: float = math.nan
    n: int = 0
    method: str = ""

    @property
    def has_interval(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high))

    def format(self, digits: int = 2) -> str:
        """As text: "+0.07 [+0.05, +0.10]" (one seed: "+0.07"; no value: "n/a")."""
        if math.isnan(self.mean):
            return "n/a"
        mean = f"{self.mean:+.{digits}f}"
        return f"{mean} [{self.low:+.{digits}f}, {self.high:+.{digits}f}]" if self.has_interval else mean

    def __str__(self) -> str:
        return self.format()


def _t_interval(mean: float, standard_error: float, dof: float) -> tuple[float, float]:
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, dof)) * standard_error
    return mean - half, mean + half


def _oriented(claimed: float | np.ndarray, other: float | np.ndarray, better: str):
    """``claimed`` ahead of ``other``: other - claimed when lower is better, claimed - other when higher is."""
    if better == "lower":
        return other - claimed
    if better == "higher":
        return claimed - other
    raise ValueError(f"better is 'lower' or 'higher', not {better!r}")


def differences(values: Sequence[float]) -> Effect:
    """The effect of per-seed differences already oriented (positive = the paper's direction): their mean and
    paired t interval; one value: no interval; none (or all NaN): NaN."""
    array = np.asarray(pd.Series(values, dtype=float).dropna(), dtype=float)
    n = len(array)
    if n == 0:
        return Effect(math.nan, n=0, method="none")
    mean = float(array.mean())
    if n == 1:
        return Effect(mean, n=1, method="one seed")
    low, high = _t_interval(mean, float(array.std(ddof=1)) / math.sqrt(n), n - 1)
    return Effect(mean, low, high, n, "paired t")


def _series(values) -> pd.Series:
    return (values if isinstance(values, pd.Series) else pd.Series(dict(values) if isinstance(values, Mapping)
                                                                   else list(values), dtype=float)).astype(float)


def paired(claimed, other, better: str = "lower") -> Effect:
    """How far ``claimed`` (the side the paper says wins) is ahead of ``other``, per seed.

    ``claimed``, ``other``: values by seed (a Series indexed by seed, or a mapping seed -> value). Paired on the
    seeds both have (paired t); with fewer than two shared seeds but two or more on each side, Welch's t on the
    two sides (:func:`unpaired`); with one value on a side, the difference of the means without interval."""
    left, right = _series(claimed).dropna(), _series(other).dropna()
    shared = left.index.intersection(right.index)
    if len(shared) >= 2:
        return differences(_oriented(left[shared].to_numpy(), right[shared].to_numpy(), better))
    return unpaired(left.to_numpy(), right.to_numpy(), better)


def unpaired(claimed: Sequence[float] | Spread, other: Sequence[float] | Spread, better: str = "lower") -> Effect:
    """``claimed`` ahead of ``other`` when the two sides share no seeds: the difference of the means and
    Welch's t interval (values, or :class:`Spread` summaries); a side with one value: no interval."""
    sides = [side if isinstance(side, Spread) else Spread.of(side) for side in (claimed, other)]
    if any(side.n == 0 for side in sides):
        return Effect(math.nan, n=0, method="none")
    mean = float(_oriented(sides[0].mean, sides[1].mean, better))
    n = min(side.n for side in sides)
    if n < 2:
        return Effect(mean, n=1, method="one seed")
    variances = [side.std ** 2 / side.n for side in sides]
    standard_error = math.sqrt(sum(variances))
    if standard_error == 0:
        return Effect(mean, mean, mean, n, "Welch t")
    dof = standard_error ** 4 / sum(v ** 2 / (side.n - 1) for v, side in zip(variances, sides))
    low, high = _t_interval(mean, standard_error, dof)
    return Effect(mean, low, high, n, "Welch t")


def against(values: Sequence[float], reference: float, better: str = "lower") -> Effect:
    """``values`` (one per seed or repeat) ahead of a fixed ``reference`` (a threshold the paper states):
    a one-sample t interval."""
    array = np.asarray(pd.Series(values, dtype=float).dropna(), dtype=float)
    return differences(_oriented(array, float(reference), better))


# ---------------------------------------------------------------------------------------------------
# Verdicts and trends
# ---------------------------------------------------------------------------------------------------


def verdict(advantage: Effect, negligible: float = 0.0, similar_within: float | None = None) -> str:
    """The verdict on ``advantage`` (oriented: positive = the paper's direction), see the module docstring.

    ``negligible``: the practical threshold (same unit as the effect; 0: none): an effect clear of zero whose
    mean is smaller is ``negligible``. ``similar_within``: read the claim as "similar" with this margin."""
    if math.isnan(advantage.mean):
        return NOT_RUN
    if not advantage.has_interval:
        return ONE_SEED
    low, high = advantage.low, advantage.high
    if similar_within is not None:
        if -similar_within < low and high < similar_within:
            return HOLDS
        if low >= similar_within or high <= -similar_within:
            return DOES_NOT_HOLD
        return WITHIN_NOISE
    if low <= 0 <= high:
        return WITHIN_NOISE
    if abs(advantage.mean) < negligible:
        return NEGLIGIBLE
    return HOLDS if advantage.mean > 0 else DOES_NOT_HOLD


@dataclass(frozen=True)
class Trend:
    """The slope of the effect per decade of compute (log10 level), its 95% interval, the points it rests on,
    and the direction it reads as (``toward the paper`` / ``away from the paper`` / ``flat`` / ...)."""

    slope: float
    low: float
    high: float
    points: int
    direction: str

    def format(self, digits: int = 2) -> str:
        if math.isnan(self.slope):
            return self.direction
        interval = f" [{self.low:+.{digits}f}, {self.high:+.{digits}f}]" if not math.isnan(self.low) else ""
        return f"{self.direction}: slope {self.slope:+.{digits}f}{interval} per decade"

    def __str__(self) -> str:
        return self.format()


def trend(levels: Sequence[float], values: Sequence[Sequence[float]]) -> Trend:
    """Where the effect goes as compute grows (module docstring): ``levels`` in increasing order (positive
    numbers: tokens, steps, epochs); ``values[i]``: the per-seed effects at ``levels[i]``, oriented so that
    positive = the paper's direction. Raises ValueError on unsorted or non-positive levels."""
    if len(levels) != len(values):
        raise ValueError(f"{len(levels)} levels but {len(values)} lists of values")
    numbers = [float(level) for level in levels]
    if any(not b > a for a, b in zip(numbers, numbers[1:])):
        raise ValueError(f"the levels must increase strictly, got {list(levels)}")
    if any(level <= 0 for level in numbers):
        raise ValueError(f"the levels must be positive (log scale), got {list(levels)}")
    x = np.array([math.log10(level) for level, vs in zip(numbers, values) for v in vs if not math.isnan(v)])
    y = np.array([float(v) for vs in values for v in vs if not math.isnan(v)])
    if len(set(x.tolist())) < 2:
        return Trend(math.nan, math.nan, math.nan, len(y), NOT_RUN)
    slope, intercept = np.polyfit(x, y, 1)
    if len(y) < 3:
        return Trend(float(slope), math.nan, math.nan, len(y), ONE_SEED)
    residuals = y - (slope * x + intercept)
    spread_x = float(((x - x.mean()) ** 2).sum())
    standard_error = math.sqrt(float((residuals ** 2).sum()) / (len(y) - 2) / spread_x)
    low, high = _t_interval(float(slope), standard_error, len(y) - 2)
    direction = FLAT if low <= 0 <= high else TOWARD if slope > 0 else AWAY
    return Trend(float(slope), low, high, len(y), direction)


# ---------------------------------------------------------------------------------------------------
# Claims rows and table
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimRow:
    """One claim in the published form; its ``verdict`` is computed from ``effect`` by :func:`verdict`.

    ``claim``: as the paper states it; ``paper``: the paper's number(s), as text; ``effect``: ours (None: the
    claim was not run, and ``note`` says why); ``ours``: the numbers behind the effect, as text (e.g. both
    sides' means); ``negligible`` / ``similar_within``: as in :func:`verdict`; ``level``, ``dataset``,
    ``trend`` only where the study has them; ``note``: anything a reader needs (an older split, a caveat)."""

    claim: str
    effect: Effect | None
    paper: str = ""
    ours: str = ""
    negligible: float = 0.0
    similar_within: float | None = None
    dataset: str | None = None
    level: object = None
    trend: Trend | None = None
    note: str = ""
    digits: int = 2
    verdict: str = field(init=False)

    def __post_init__(self):
        if self.effect is None and not self.note:
            raise ValueError(f"{self.claim!r}: a claim not run says why (note)")
        computed = NOT_RUN if self.effect is None else verdict(self.effect, self.negligible, self.similar_within)
        object.__setattr__(self, "verdict", computed)

    @classmethod
    def not_run(cls, claim: str, why: str, paper: str = "", **fields) -> ClaimRow:
        """A claim the study could not test, and why."""
        return cls(claim, None, paper=paper, note=why, **fields)


def trend_rows(claim: str, levels: Sequence[float], values: Sequence[Sequence[float]], *, paper: str = "",
               ours: Sequence[str] | None = None, dataset: str | None = None, negligible: float = 0.0,
               digits: int = 2, note: str = "") -> list[ClaimRow]:
    """One row per compute level: the effect of that level's per-seed values (:func:`differences`: oriented,
    positive = the paper's direction) with its verdict, and the claim's :func:`trend` over all levels.
    ``ours``: text per level (e.g. the two sides' numbers)."""
    direction = trend(levels, values)
    texts = list(ours) if ours is not None else [""] * len(levels)
    if len(texts) != len(levels):
        raise ValueError(f"{len(levels)} levels but {len(texts)} texts")
    return [ClaimRow(claim, differences(level_values), paper=paper, ours=text, negligible=negligible,
                     dataset=dataset, level=level, trend=direction, note=note, digits=digits)
            for level, level_values, text in zip(levels, values, texts)]


COLUMNS = ("claim", "dataset", "level", "paper", "ours", "effect", "seeds", "verdict", "trend", "note")
_OPTIONAL = ("dataset", "level", "trend", "note")


def claims_table(rows: Sequence[ClaimRow]) -> pd.DataFrame:
    """The published claims table: claim, paper, ours, effect (mean and 95% interval), seeds, verdict, plus
    dataset, level, trend and note when any row has them. ``table.attrs["rule"]`` names the rule."""
    records = []
    for row in rows:
        records.append({
            "claim": row.claim, "dataset": row.dataset, "level": row.level, "paper": row.paper, "ours": row.ours,
            "effect": row.effect.format(row.digits) if row.effect is not None else "",
            "seeds": row.effect.n if row.effect is not None and row.effect.n else pd.NA,
            "verdict": row.verdict, "trend": row.trend.format(row.digits) if row.trend is not None else None,
            "note": row.note or None})
    table = pd.DataFrame(records, columns=list(COLUMNS))
    table["seeds"] = table["seeds"].astype("Int64")
    table = table[[c for c in COLUMNS if c not in _OPTIONAL or table[c].notna().any()]]
    table.attrs["rule"] = RULE
    return table


def verdict_changes(old: pd.DataFrame, new: pd.DataFrame, on: Sequence[str] = ("claim",)) -> pd.DataFrame:
    """The rows whose verdict changed between two claims tables (joined on ``on``): the keys, ``old`` and
    ``new`` verdicts; a claim only one side has shows the other's as NaN."""
    keys = [key for key in on if key in old and key in new]
    merged = old[[*keys, "verdict"]].merge(new[[*keys, "verdict"]], on=keys, how="outer",
                                            suffixes=("_old", "_new"))
    changed = merged[merged["verdict_old"].astype(str) != merged["verdict_new"].astype(str)]
    return changed.rename(columns={"verdict_old": "old", "verdict_new": "new"}).reset_index(drop=True)


__all__ = ["AWAY", "COLUMNS", "CONFIDENCE", "DOES_NOT_HOLD", "FLAT", "HOLDS", "NEGLIGIBLE", "NOT_RUN", "ONE_SEED",
           "RULE", "TOWARD", "TRENDS", "VERDICTS", "WITHIN_NOISE", "ClaimRow", "Effect", "Spread", "Trend",
           "against", "by_seed", "claims_table", "differences", "paired", "spread_table", "spreads", "trend",
           "trend_rows", "unpaired", "verdict", "verdict_changes"]
