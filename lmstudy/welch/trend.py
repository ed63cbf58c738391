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

Claims (:func:`trend_claims`, through :mod:`lmstudy.claims`, one row per length with the trend's direction):

- "freezing the pretrained input beats training it": ours against ours with the input trainable, per seed
  (paired: one seed is the same batches), on each setting;
- "on Rare, ours is the best of the four": the best of the other three minus ours, per seed.
"""

from __future__ import annotations

import math
from dataclasses import asdict

import pandas as pd

from lmstudy.claims import ClaimRow, Spread, claims_table, trend_rows
from lmstudy.runs import get_run
from lmstudy.welch.study import DATA_SETTINGS, RUN_FIELDS, STUDY, EmbeddingInitConfig, run, run_history
from lmstudy.welch.tables import PROPOSED, STANDARD, setting_of

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
    worker trains the same runs."""
    return trend_configs({**params, "train_tokens": params["trend_train_tokens"]}, params["trend_seeds"],
                         params["trend_epoch_cap"], params["trend_stop_after"], params["trend_settings"])


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


def trend_gaps(table: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, epochs, seed): ``frozen_minus_trainable`` (ours minus ours with the input trainable; below
    zero: freezing helps, the paper's claim) and ``ours_minus_best_other`` (ours minus the best of the other
    three; below zero: ours is the best)."""
    wide = table.pivot_table(index=["dataset", "epochs", "seed"], columns="label", values="valid_ppl")
    others = wide[[label for label in TREND_CONFIGS if label != "ours" and label in wide]]
    return pd.DataFrame({"frozen_minus_trainable": wide["ours"] - wide["ours, input trainable"],
                         "ours_minus_best_other": wide["ours"] - others.min(axis=1)}).reset_index()


def trend_claims(table: pd.DataFrame) -> pd.DataFrame:
    """The two freezing claims at every length, with the direction of their trend (module docstring)."""
    gaps = trend_gaps(table)
    rows: list[ClaimRow] = []
    claims = (("freezing the pretrained input beats training it", "frozen_minus_trainable",
               [d for d in TREND_SETTINGS if d in set(gaps["dataset"])]),
              ("ours (untied, pretrained, frozen input) is the best of the four", "ours_minus_best_other", ["Rare"]))
    for claim, column, datasets in claims:
        for dataset in datasets:
            part = gaps[gaps["dataset"] == dataset]
            lengths = sorted(part["epochs"].unique())
            effects = [Spread.of(-part[part["epochs"] == n][column]) for n in lengths]  # > 0: the paper's way
            rows += trend_rows(claim, [int(n) for n in lengths], effects, digits=1, dataset=dataset,
                               evidence=[f"{int(n)} epochs: valid ppl gap {-e.mean:+.1f}" for n, e in
                                         zip(lengths, effects)])
    return claims_table(rows)


def plot_trend_gaps(gaps: pd.DataFrame, column: str, title: str = ""):
    """One claim's gap (valid perplexity) against epochs, one series per data setting (:func:`lmstudy.plots.
    gap_trend`)."""
    from lmstudy.plots import gap_trend

    wide = gaps.pivot_table(index=["epochs", "seed"], columns="dataset", values=column).reset_index()
    series = {dataset: dataset for dataset in TREND_SETTINGS if dataset in wide}
    return gap_trend(wide, "epochs", series, xlabel="training epochs", ylabel="valid perplexity gap",
                     title=title)


__all__ = ["OURS_TRAINABLE", "TREND_CONFIGS", "TREND_SETTINGS", "best_within", "plot_trend_gaps", "trend_claims",
           "study_trend_configs", "trend_configs", "trend_gaps", "trend_table"]
