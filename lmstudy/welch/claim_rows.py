"""The Welch studies' comparisons, as rows of :mod:`lmstudy.claims` (one rule for notebooks 01 and 01b).

Every claim of Welch et al. compares validation perplexities of two sides (two embedding configurations, one
configuration at two settings), lower is better. :func:`compare` makes the row: the effect is
:func:`lmstudy.claims.paired` (paired over the seeds both sides ran, which share data order and initial draws;
Welch's t when they share fewer than two; one value on a side: ``one seed``, the number still shown), ``ours``
shows both sides as mean ± std over seeds, and the verdict is the rule's.

The practical threshold (``negligible``), stated once for both studies: **an effect smaller than 1% of the
perplexities compared** (:data:`NEGLIGIBLE_PCT`, of the smaller of the two means) is *negligible*. Why 1%: the
paper itself waves away a difference of 0.5 at a perplexity of 62 (0.8%, Section 2: "there the difference is
only 0.5"), and our seed spreads are 1-3% of perplexity. For an effect in nats per token the same threshold is
``log(1.01)`` (:func:`loss_threshold`).
"""

from __future__ import annotations

import math

import pandas as pd

from lmstudy.claims import ClaimRow, Spread, paired

NEGLIGIBLE_PCT = 1.0


def practical_threshold(*means: float) -> float:
    """The practical threshold in perplexity points: :data:`NEGLIGIBLE_PCT` percent of the smallest of ``means``."""
    return NEGLIGIBLE_PCT / 100 * min(means)


def loss_threshold() -> float:
    """The practical threshold for a difference of losses (nats per token): a 1% change of perplexity."""
    return math.log(1 + NEGLIGIBLE_PCT / 100)


def show(values: pd.Series, digits: int = 1) -> str:
    """Mean ± std over seeds ("not run" when there is none)."""
    spread = Spread.of(values)
    return "not run" if spread.n == 0 else spread.format(digits)


def compare(claim: str, claimed: pd.Series, other: pd.Series, *, names: tuple[str, str], paper: str = "",
            dataset: str | None = None, note: str = "", better: str = "lower") -> ClaimRow:
    """The row of a claim that ``claimed`` beats ``other`` (values by seed, perplexity unless ``better`` says
    otherwise): paired effect, both sides in ``ours`` ("names[0] mean ± std vs names[1] mean ± std"), the
    :func:`practical_threshold` threshold of the two means."""
    ours = f"{names[0]} {show(claimed)} vs {names[1]} {show(other)}"
    means = [float(side.mean()) for side in (claimed, other) if len(side.dropna())]
    threshold = practical_threshold(*means) if len(means) == 2 and better == "lower" else 0.0
    return ClaimRow(claim, paired(claimed, other, better), paper=paper, ours=ours, negligible=threshold,
                    dataset=dataset, note=note, digits=1)


__all__ = ["NEGLIGIBLE_PCT", "compare", "loss_threshold", "practical_threshold", "show"]
