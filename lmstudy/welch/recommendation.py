"""Which embedding configuration to use on this data: the recommendation that ends notebook 01b.

Someone with their own corpus (``python -m lmstudy data add NAME PATH``) runs notebook 01b with
``-p domain NAME`` and wants one answer: which of the six Section 3 configurations to train. It is read
off the *base cell* of the notebook's tables (:mod:`lmstudy.welch.extended`: the domain's own LM data,
UNK cutoff K = 0, its own vectors, 1x data), the setting every table shares and the one the preset's
``base_seeds`` give extra seeds:

- each configuration's validation perplexity over seeds is a :class:`lmstudy.claims.Spread`; the
  configurations are ranked by their mean (validation chooses; test is reported beside it, as a check);
- the **margin** is the runner-up minus the best, per seed, through the rule of :mod:`lmstudy.claims`
  (:func:`~lmstudy.claims.paired`: paired over the seeds both ran, with its 95% t interval);
- the verdict is :func:`~lmstudy.claims.verdict` of the margin: ``holds`` = **a clear choice: the interval of
  runner-up minus best is clear of zero**; ``within noise`` = the interval covers zero, the best two cannot be
  told apart at these seeds (the text names every configuration whose interval against the best covers zero,
  ``ties``, and how to add seeds); ``one seed`` = one seed per configuration, no interval: the text says that
  the choice rests on single runs. No practical threshold: any margin clear of the seed noise is a choice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from lmstudy.claims import HOLDS, NOT_RUN, ONE_SEED, WITHIN_NOISE, Effect, Spread, by_seed, paired, spreads, verdict

_COLUMNS = ("config", "label", "domain", "unk_cutoff", "vectors_from", "train_multiple", "seed", "valid_ppl",
            "test_ppl")


def base_cell_runs(tables: pd.DataFrame | list[pd.DataFrame], domain: str) -> pd.DataFrame:
    """The runs of ``domain``'s base cell in notebook 01b's tidy tables (one row per configuration and seed).

    ``tables``: one table or several (Tables 2, 3, 5, 6 of :mod:`lmstudy.welch.extended` all hold the base
    cell when they ran it; a run found in several is counted once). A ValueError when none is there.
    """
    tables = [tables] if isinstance(tables, pd.DataFrame) else list(tables)
    usable = [table for table in tables if set(_COLUMNS) <= set(table.columns)]
    if not usable:
        raise ValueError(f"no table with the columns {', '.join(_COLUMNS)}: pass notebook 01b's t2, t3, t5 or t6")
    runs = pd.concat(usable, ignore_index=True)
    in_cell = ((runs["domain"] == domain) & (runs["vectors_from"] == domain) & (runs["unk_cutoff"] == 0)
               & (runs["train_multiple"] == 1))
    runs = runs[in_cell]
    if runs.empty:
        raise ValueError(f"the tables hold no run of domain {domain!r} with K = 0, its own vectors and 1x data: "
                         f"run notebook 01b with -p domain {domain}")
    return runs.drop_duplicates(["config", "seed"]).reset_index(drop=True)


@dataclass(frozen=True)
class Recommendation:
    """The configuration to use on ``domain``, its margin over the runner-up and the ranking behind it."""

    domain: str
    best: str                    # label (lmstudy.welch.extended.LABELS), e.g. "ours"
    config: str                  # its EmbeddingConfig name
    best_valid: Spread
    best_test: Spread
    runner_up: str | None        # None when only one configuration ran
    runner_up_valid: Spread | None
    margin: Effect | None        # runner-up minus best (validation perplexity), paired over seeds, 95% interval
    verdict: str                 # holds (a clear choice) | within noise | one seed | not run (one configuration)
    ranking: pd.DataFrame        # one row per configuration, best first
    ties: tuple[str, ...] = ()   # the others whose interval against the best covers zero, in rank order

    @property
    def seeds(self) -> int:
        """The fewest seeds any configuration ran with."""
        return int(self.ranking["seeds"].min())

    def __str__(self) -> str:
        lines = [f"Recommendation for {self.domain!r} (AWD-LSTM validation perplexity, mean ± std over "
                 f"{_seeds_text(self.ranking)}; lower is better):",
                 f"use {self.best!r} ({self.config}): {self.best_valid.format(1)} (test {self.best_test.format(1)})."]
        if self.runner_up is None:
            lines.append("Only one configuration ran: there is nothing to compare it with.")
            return "\n".join(lines)
        margin, percent = self.margin.mean, 100 * self.margin.mean / self.best_valid.mean
        lead = (f"Margin over the runner-up {self.runner_up!r} ({self.runner_up_valid.format(1)}): "
                f"{margin:.1f} perplexity points ({percent:.1f}% of the best)")
        if self.verdict == ONE_SEED:
            lines.append(f"{lead}; one seed per configuration, so no interval to test it against: the choice rests "
                         "on single runs (add seeds with -p base_seeds '[1, 2]').")
        elif self.verdict == HOLDS:
            lines.append(f"{lead}, 95% interval {self._interval()}, clear of zero: a clear choice.")
        else:
            tied = ", ".join(repr(label) for label in self.ties)
            lines.append(f"{lead}, 95% interval {self._interval()}, which covers zero: at these seeds {self.best!r} cannot be told apart from {tied}; any of them will do "
                         "(more seeds, e.g. -p base_seeds '[1, 2, 3, 4]', would separate them).")
        standard = self.ranking[self.ranking["label"] == "standard"]
        if self.best != "standard" and len(standard):
            row = standard.iloc[0]
            lines.append(f"The standard approach (tied, random init) reaches {row['valid']}: "
                         f"{row['behind_best_pct']:.1f}% behind the best.")
        return "\n".join(lines)

    def _interval(self) -> str:
        """The margin's 95% interval and how it was formed ("paired t" over the shared seeds, or "Welch t")."""
        return f"[{self.margin.low:+.1f}, {self.margin.high:+.1f}] ({self.margin.method}, {self.margin.n} seeds)"


def _seeds_text(ranking: pd.DataFrame) -> str:
    low, high = int(ranking["seeds"].min()), int(ranking["seeds"].max())
    count = str(low) if low == high else f"{low}-{high}"
    return f"{count} seed{'s' if high > 1 else ''}"


def recommend(tables: pd.DataFrame | list[pd.DataFrame], domain: str) -> Recommendation:
    """The configuration to use on ``domain``, from notebook 01b's tables (see the module docstring)."""
    runs = base_cell_runs(tables, domain)
    valid = spreads(runs, "label", "valid_ppl")
    test = spreads(runs, "label", "test_ppl")
    configs = runs.groupby("label")["config"].first()
    order = sorted(valid.index, key=lambda label: (valid[label].mean, label))
    best = order[0]
    ranking = pd.DataFrame([{
        "rank": rank, "label": label, "config": configs[label], "valid": valid[label].format(1),
        "test": test[label].format(1), "valid_mean": valid[label].mean, "valid_std": valid[label].std,
        "behind_best_pct": 100 * (valid[label].mean - valid[best].mean) / valid[best].mean,
        "seeds": valid[label].n} for rank, label in enumerate(order, start=1)])
    if len(order) == 1:
        return Recommendation(domain, best, configs[best], valid[best], test[best], None, None, None, NOT_RUN,
                              ranking)

    def behind_best(label: str) -> Effect:
        """How far ``label`` is behind the best, per seed (> 0: the best is better)."""
        return paired(by_seed(runs, "valid_ppl", label=best), by_seed(runs, "valid_ppl", label=label), "lower")

    runner_up = order[1]
    margin = behind_best(runner_up)
    ties = tuple(label for label in order[1:] if verdict(behind_best(label)) == WITHIN_NOISE)
    return Recommendation(domain, best, configs[best], valid[best], test[best], runner_up, valid[runner_up], margin,
                          verdict(margin), ranking, ties)


__all__ = ["Recommendation", "base_cell_runs", "recommend"]
