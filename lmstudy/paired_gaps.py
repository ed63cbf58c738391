"""Per-seed paired gaps between models, at each level of a trend: the one place the studies form them.

A trend's claims (:func:`lmstudy.claims.trend_rows`) and its figure (:func:`lmstudy.plots.gap_trend`) read one gap
per seed at each compute level: model A's score minus model B's, where one seed is the same batches for both (so
the difference is paired, and the seed-to-seed noise they share cancels). Studies 01 (epochs), 02 (fine-tuning
steps) and 03 (the base's training tokens) form them from a long table of runs, one row per (level, seed, model).
"""

from __future__ import annotations

import pandas as pd


def paired_gaps(table: pd.DataFrame, levels: list[str], value: str, gaps: dict[str, tuple[str, str | tuple]],
                model: str = "model", seed: str = "seed") -> pd.DataFrame:
    """One row per (``levels``..., ``seed``) of ``table`` with a column per entry of ``gaps``: ``name -> (a, b)``
    is ``value`` of the model ``a`` minus that of ``b`` at the same level and seed. ``b`` may be a tuple of models:
    the lowest of those in the table (the best, for a loss or a perplexity). ``model``: the column naming the
    models. A gap is NaN where a side has no run at that level and seed."""
    wide = table.pivot_table(index=[*levels, seed], columns=model, values=value)
    columns = {}
    for name, (first, second) in gaps.items():
        if isinstance(second, str):
            other = wide[second]
        else:
            other = wide[[candidate for candidate in second if candidate in wide]].min(axis=1)
        columns[name] = wide[first] - other
    return pd.DataFrame(columns).reset_index()
