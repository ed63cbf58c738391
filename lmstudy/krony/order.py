"""What the Krony study runs, and in what order (notebook 03).

What runs:

1. ``base_table``: the base at each checkpoint, scored.
2. ``grid_table``: the full grid at the final checkpoint, seed 0: every class x init, plus the distilled and
   scratch models of ``compare_class``.
3. ``trend_table``: the central comparison, ``compare_class`` (81M), the Krony init of the grid with the lowest
   validation loss (``best_init``; never chosen on the test sets the verdicts read) vs distilled vs scratch,
   ``seeds`` of the continued training, from every checkpoint in ``fractions``; ``trend_gaps`` the per-seed
   Krony-minus-baseline gaps in WikiText-2 bits per byte (paired: one seed = the same continued-training
   batches), ``plot_trend`` the figure.
4. ``table6``: the paper's empty Table 6 at the final checkpoint, seed 0: ``table6_class`` shapes (the only
   class whose factors allow several Van Loan terms: B = (2, 1) and (4, 1) allow at most 2 and 4, and 4 terms of
   (4, 1) would rebuild W exactly), Van Loan init, ``table6_factors`` factors, each with and without scalars.
5. ``claims``: the paper's claims as it words them, verdicts through :mod:`lmstudy.claims`' one rule;
   ``published_claims``: the same from the committed cpu tables (``python -m lmstudy claims 03``).
6. ``reconstruction_errors``: Van Loan's error per layer against the SVD bound and a same-size low-rank fit.

Every run goes through the run cache (``lmstudy.runs.cached``), so a rerun reads finished runs back and an
interrupted one resumes from its last checkpoint.
"""

from __future__ import annotations

from functools import partial

import pandas as pd
from tqdm.auto import tqdm

from lmstudy.krony.config import KronyConfig, ModelSpec, preset_config
from lmstudy.krony.runs import continued_run, grid_specs, table6_specs
from lmstudy.krony.study_tables import best_init, models_at
from lmstudy.second_worker import StudyRun


def train_runs(config: KronyConfig) -> None:
    """Train (or find in the run cache) every run the tables below read: the Krony models first (the grid's pick
    the trend's init), then the dense baselines (:func:`baseline_runs`).

    The dense baselines can train in a second process meanwhile (``lmstudy study 03_kronecker --second-worker``:
    :func:`study_run_list`), which takes the same list from its other end: the two meet (a run one process is
    training, the other waits for through the run's lock, then reads back). The scratch arm's pretraining, a second
    base pretraining and the study's longest run, comes with the first scratch run."""
    final, first_seed = config.fractions[-1], config.seeds[0]
    grid = models_at(config, final, [s for s in grid_specs(config) if s.kind == "krony"], first_seed, "grid")
    krony = ModelSpec("krony", config.compare_class, best_init(pd.DataFrame(grid), config.compare_class))
    _train(config, [(spec, final, first_seed) for spec in table6_specs(config)]
           + [(krony, fraction, seed) for fraction in config.fractions for seed in config.seeds], "table 6, trend")
    baseline_runs(config)


def baseline_list(config: KronyConfig) -> list[tuple[ModelSpec, float, int]]:
    """The dense baselines' runs of the grid and the trend (the grid's are the trend's at the final checkpoint and
    first seed), as ``(spec, fraction, seed)``: distilled, then scratch, each lowest checkpoint first."""
    return [(ModelSpec(kind, config.compare_class), fraction, seed) for kind in ("distilled", "scratch")
            for fraction in config.fractions for seed in config.seeds]


def baseline_runs(config: KronyConfig) -> None:
    """Train (or find cached) the dense baselines of :func:`baseline_list`, in its order."""
    _train(config, baseline_list(config), "dense baselines")


def study_run_list(parameters: dict) -> list[list[StudyRun]]:
    """The runs notebook 03 trains whose list is known before any has run, for a second worker
    (:mod:`lmstudy.second_worker`): the dense baselines (:func:`baseline_list`), one stage. The Krony runs are not
    in it: the trend's init is the grid's pick. Walked from its end, the list starts with the scratch arm (its
    first run trains the scratch pretraining, the study's longest run), while the notebook trains its Krony
    models."""
    config = preset_config(parameters["scale"], parameters)
    return [[StudyRun(f"{spec.kind} {spec.size_class}, base checkpoint {fraction:g}, seed {seed}",
                      partial(continued_run, config, fraction, spec, seed))
             for spec, fraction, seed in baseline_list(config)]]


def _train(config: KronyConfig, runs: list[tuple[ModelSpec, float, int]], desc: str) -> None:
    """Train (or find cached) each ``(spec, fraction, seed)`` of ``runs`` in order, under one progress bar (a bar
    per run would flood a notebook's output channel: nbval then loses the cell's end)."""
    for spec, fraction, seed in tqdm(runs, desc=desc, unit="model"):
        continued_run(config, fraction, spec, seed)
