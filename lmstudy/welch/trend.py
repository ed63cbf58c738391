"""Welch et al.'s freezing claims as trends over training length (issue 23).

The paper's claims about freezing are about models trained to convergence (hundreds of epochs on PTB); our
2-epoch runs say nothing about where they go. Four configurations decide them (:data:`TREND_CONFIGS`):

- the standard approach, ``tied/random,trainable``;
- the standard approach with pretrained vectors, ``tied/pretrained,trainable``;
- ours (the paper's proposal), ``untied/in=pretrained,frozen/out=pretrained,trainable``;
- ours with the input trainable, ``untied/in=pretrained,trainable/out=pretrained,trainable``.

Each runs once per data setting (Std-news, Rare) and seed, as long as validation keeps improving (NT-ASGD, early
stopping after ``stop_after`` evaluations without improvement once NT-ASGD has switched) up to a stated cap of
epochs. The trend's shorter lengths are read from the same run: **the best validation perplexity among the
evaluations of its first N epochs**. That is exactly what a run capped at N epochs reports: NT-ASGD has no
schedule (its switch to averaging depends only on the validation history so far), the batches of a seed are the
same, so a shorter run is a prefix of the longer one. One run per configuration instead of one per length.

Claims (:func:`trend_claims`, through :func:`lmstudy.claims.trend_rows`, levels = epochs: one row per length with
the trend's direction; :func:`published_claims` rebuilds them from ``figures/01_embedding_init_trend.csv``):

- "it is always better to freeze [the pretrained input embeddings]": ours against ours with the input trainable,
  per seed (paired: one seed is the same batches), on each setting;
- on Rare, "our proposed approach ... has the best results": the best of the other three minus ours, per seed.

Each seed's lengths are prefixes of one run, so the trend's points are not independent draws (the rule treats
them so): its interval is optimistic, and the rows say it.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from functools import partial

import pandas as pd

from lmstudy.claims import ClaimRow, claims_table, trend_rows
from lmstudy.paired_gaps import paired_gaps
from lmstudy.paths import figures_dir
from lmstudy.runs import get_run
from lmstudy.second_worker import StudyRun
from lmstudy.welch.claim_rows import practical_threshold, show
from lmstudy.welch.study import DATA_SETTINGS, RUN_FIELDS, STUDY, EmbeddingInitConfig, run, run_history
from lmstudy.welch.tables import PROPOSED, STANDARD, grid_configs, setting_of

OURS_TRAINABLE = "untied/in=pretrained,trainable/out=pretrained,trainable"
TREND_CONFIGS = {  # label -> configuration name
    "standard": STANDARD,
    "standard + pretraining": "tied/pretrained,trainable",
    "ours": PROPOSED,
    "ours, input trainable": OURS_TRAINABLE,
}
TREND_SETTINGS = ("Std-news", "Rare")


def trend_configs(params: dict, seeds: list[int], epoch_cap: int, stop_after: int,
                  settings=TREND_SETTINGS) -> list[EmbeddingInitConfig]:
    """The runs of the trend: every :data:`TREND_CONFIGS` configuration on every setting (of
    :data:`TREND_SETTINGS`) with every seed, trained up to ``epoch_cap`` epochs, stopped early after ``stop_after``
    evaluations without improvement. ``params``: the notebook's parameters (keys that are not run-config fields are
    ignored, and so are its ``max_epochs``, ``max_steps`` and ``patience``: the trend's runs have their own
    bounds)."""
    if stop_after < 1:
        raise ValueError(f"the trend's runs stop when validation stops improving: stop_after >= 1, got {stop_after}")
    unknown = [setting for setting in settings if setting not in TREND_SETTINGS]
    if unknown or not settings:
        raise ValueError(f"the trend's data settings are some of {list(TREND_SETTINGS)}; got {list(settings)}")
    own = ("max_epochs", "max_steps", "patience")  # the trend's runs are bounded by epochs and early stopping only
    run_params = {k: v for k, v in params.items() if k in RUN_FIELDS and k not in own}
    return [EmbeddingInitConfig(embedding=name, seed=seed, max_epochs=epoch_cap, max_steps=0, patience=stop_after,
                                **DATA_SETTINGS[setting], **run_params)
            for setting in settings for name in TREND_CONFIGS.values() for seed in seeds]


def study_trend_configs(params: dict) -> list[EmbeddingInitConfig]:
    """The trend's runs as notebook 01 makes them from its parameters: :func:`trend_configs` with the
    ``trend_seeds``, ``trend_epoch_cap``, ``trend_stop_after`` and ``trend_settings`` keys, on the first
    ``trend_train_tokens`` training tokens (instead of Table 1's ``train_tokens``). One place, so that a second
    worker (:func:`study_run_list`) trains the same runs."""
    return trend_configs({**params, "train_tokens": params["trend_train_tokens"]}, params["trend_seeds"],
                         params["trend_epoch_cap"], params["trend_stop_after"], params["trend_settings"])


def study_run_list(parameters: dict) -> list[list[StudyRun]]:
    """Notebook 01's runs for a second worker (:mod:`lmstudy.second_worker`): Table 1's grid
    (:func:`lmstudy.welch.tables.grid_configs`), then the freezing trend (:func:`study_trend_configs`), two stages:
    walked each from its end, Table 1 (the short runs) is complete first. ``parameters``: the notebook's."""
    parameters = {key: value for key, value in parameters.items() if key != "scale"}
    stages = (grid_configs(**parameters), study_trend_configs(parameters))
    return [[StudyRun(f"{config.embedding} {config.domain} K={config.unk_cutoff} seed {config.seed}",
                      partial(run, config)) for config in configs] for configs in stages]


def best_within(evaluations: list[dict], epochs: int) -> float:
    """The best validation perplexity among the evaluations made during the first ``epochs`` epochs (a log's
    ``epoch`` field counts from 0); NaN when there is none."""
    losses = [record["val_loss"] for record in evaluations if record["epoch"] < epochs]
    return math.exp(min(losses)) if losses else math.nan


def last_quarter_gain(evaluations: list[dict], epochs_trained: int) -> float:
    """How much a run still gained in its last quarter of epochs, in percent: the best validation perplexity of
    its first three quarters over its best overall, minus one (0: converged before the last quarter)."""
    return 100 * (best_within(evaluations, math.ceil(0.75 * epochs_trained)) / best_within(evaluations, math.inf) - 1)


def trend_table(configs: list[EmbeddingInitConfig], lengths: list[int]) -> pd.DataFrame:
    """Train (or read back) every run; one row per run and length: config, label, dataset, seed, epochs,
    valid_ppl (the best within that many epochs), epochs_trained, stopped_early (whether the run ended before
    ``max_epochs``: its longest point is converged), last_quarter_gain_pct (:func:`last_quarter_gain`: how far from
    converged a run that hit the cap still was)."""
    labels = {name: label for label, name in TREND_CONFIGS.items()}
    rows = []
    for config in configs:
        metrics = run(config)
        evaluations = run_history(get_run(STUDY, asdict(config)))
        for epochs in lengths:
            rows.append({"config": config.embedding, "label": labels.get(config.embedding, config.embedding),
                         "dataset": setting_of(config), "seed": config.seed, "epochs": epochs,
                         "valid_ppl": best_within(evaluations, epochs), "epochs_trained": metrics.get("epochs"),
                         "stopped_early": bool(metrics.get("stopped_early")),
                         "last_quarter_gain_pct": last_quarter_gain(evaluations, metrics.get("epochs", 0))})
    return pd.DataFrame(rows)


TREND_GAPS = {  # trend_gaps' columns: (model, the model or models it is compared with), by label
    "frozen_minus_trainable": ("ours", "ours, input trainable"),
    "ours_minus_best_other": ("ours", tuple(label for label in TREND_CONFIGS if label != "ours")),
}


def trend_gaps(table: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, epochs, seed): ``frozen_minus_trainable`` (ours minus ours with the input trainable; below
    zero: freezing helps, the paper's claim) and ``ours_minus_best_other`` (ours minus the best of the other
    three; below zero: ours is the best), paired by seed (:func:`lmstudy.paired_gaps.paired_gaps`)."""
    return paired_gaps(table, ["dataset", "epochs"], "valid_ppl", TREND_GAPS, model="label")


TREND_CLAIMS = (  # claim as the paper states it, trend_gaps column, the paper's number, the settings it is read on
    ("As for freezing the pretrained input embeddings, keeping all other aspects the same, it is always better to "
     "freeze them", "frozen_minus_trainable", "always better (Table 1, Std); Tables 2-3, NANC: ours 90.8 vs not "
     "frozen 95.7", TREND_SETTINGS),
    ("Our proposed approach, using pretrained untied embeddings and freezing the input, has the best results (of "
     "the four)", "ours_minus_best_other", "ours 97.1 on Rare, the best of Table 1", ("Rare",)))
TREND_NOTE = ("each seed's lengths are read from one run (the best validation perplexity within that many epochs), "
              "so the trend's points are not independent draws and its interval is optimistic")


def trend_claim_rows(table: pd.DataFrame) -> list[ClaimRow]:
    """The two freezing claims at every length (levels = epochs), each with the direction of its trend
    (:func:`lmstudy.claims.trend_rows`): the per-seed effect at a length is minus the gap of
    :func:`trend_gaps` (> 0: the paper's way, ours ahead); ``negligible``: 1% of the smallest mean perplexity of
    the compared configurations (:mod:`lmstudy.welch.claim_rows`)."""
    gaps = trend_gaps(table)
    wide = table.pivot_table(index=["dataset", "epochs", "seed"], columns="label", values="valid_ppl")
    others = wide[[label for label in TREND_CONFIGS if label != "ours" and label in wide]]
    sides = {"frozen_minus_trainable": ("ours, input trainable", wide["ours, input trainable"]),
             "ours_minus_best_other": ("the best other", others.min(axis=1))}
    rows: list[ClaimRow] = []
    for claim, column, paper, settings in TREND_CLAIMS:
        name, other = sides[column]
        for dataset in [d for d in settings if d in set(gaps["dataset"])]:
            part = gaps[gaps["dataset"] == dataset]
            lengths = sorted(int(n) for n in part["epochs"].unique())
            values = [(-part.loc[part["epochs"] == n, column]).tolist() for n in lengths]
            ours = [f"ours {show(wide.loc[(dataset, n), 'ours'])} vs {name} {show(other.loc[(dataset, n)])}"
                    for n in lengths]
            means = [float(side.loc[dataset].groupby("epochs").mean().min()) for side in (wide["ours"], other)]
            rows += trend_rows(claim, lengths, values, paper=paper, ours=ours, dataset=dataset, digits=1,
                               negligible=practical_threshold(*means), note=TREND_NOTE)
    return rows


def trend_claims(table: pd.DataFrame) -> pd.DataFrame:
    """The claims table of :func:`trend_claim_rows` (what notebook 01 prints and saves)."""
    return claims_table(trend_claim_rows(table))


def published_claims() -> pd.DataFrame:
    """The trend's published claims from the committed per-run table ``figures/01_embedding_init_trend.csv``
    (no training): the rows of :func:`trend_claim_rows`, the notebook's code path."""
    return claims_table(trend_claim_rows(pd.read_csv(figures_dir() / "01_embedding_init_trend.csv")))


def plot_trend_gaps(gaps: pd.DataFrame, column: str, title: str = ""):
    """One claim's gap (valid perplexity) against epochs, one series per data setting (:func:`lmstudy.plots.
    gap_trend`)."""
    from lmstudy.plots import gap_trend

    wide = gaps.pivot_table(index=["epochs", "seed"], columns="dataset", values=column).reset_index()
    series = {dataset: dataset for dataset in TREND_SETTINGS if dataset in wide}
    return gap_trend(wide, "epochs", series, xlabel="training epochs", ylabel="valid perplexity gap",
                     title=title)


__all__ = ["OURS_TRAINABLE", "TREND_CLAIMS", "TREND_CONFIGS", "TREND_SETTINGS", "best_within", "plot_trend_gaps",
           "published_claims", "trend_claim_rows", "trend_claims",
           "study_run_list", "study_trend_configs", "trend_configs", "trend_gaps", "trend_table"]
