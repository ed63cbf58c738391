"""Figure functions: a tidy DataFrame in, a matplotlib Figure out (seaborn styling).

Notebooks call these and save the figures into ``lmstudy.paths.figures_dir(scale)``.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns


def loss_frame(log: pd.DataFrame) -> pd.DataFrame:
    """A run's log as rows of (step, loss, split): the training loss of each logged step (``train``) and the
    validation loss of each evaluation (``validation``)."""
    train = log[log["kind"] == "train"][["step", "loss"]].assign(split="train")
    valid = log[log["kind"] == "eval"][["step", "val_loss"]].rename(columns={"val_loss": "loss"})
    return pd.concat([train, valid.assign(split="validation")], ignore_index=True)


def loss_curves(log: pd.DataFrame, title: str = "") -> plt.Figure:
    """Training loss (per logged step) and validation loss (per evaluation) against steps.

    ``log`` is a run's log (``lmstudy.runs.read_log``): rows of kind ``train`` carry ``loss``,
    rows of kind ``eval`` carry ``val_loss``.
    """
    curves = loss_frame(log)
    sns.set_theme(style="whitegrid")
    figure, axis = plt.subplots(figsize=(6, 3.5))
    sns.lineplot(data=curves, x="step", y="loss", hue="split", marker="o", markersize=3, ax=axis)
    axis.set(xlabel="training step", ylabel="loss (nats / token)", title=title)
    figure.tight_layout()
    return figure


def log_axis_at(axis: plt.Axes, values, labels: list[str] | None = None) -> None:
    """A log-scale x axis labelled only at ``values`` (a trend's compute levels), with ``labels`` or the values
    in k / M; matplotlib's own log ticks overlap when the levels span less than a few decades."""
    from matplotlib.ticker import NullFormatter, NullLocator

    values = sorted(set(values))
    axis.set_xscale("log")
    axis.xaxis.set_minor_locator(NullLocator())
    axis.xaxis.set_minor_formatter(NullFormatter())
    axis.set_xticks(values, labels or [short_number(value) for value in values])


def short_number(value: float) -> str:
    """1234567 -> '1.23M' (three significant digits, k / M / B)."""
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:g}"


def gap_trend(gaps: pd.DataFrame, level: str, series: dict[str, str], xlabel: str, ylabel: str,
              title: str = "", axis: plt.Axes | None = None) -> plt.Figure:
    """A claim's gap against compute: for each column of ``gaps`` named in ``series`` (column -> legend label),
    every seed's value (dots) and the mean with its seed std (error bars) at each ``level`` (the column of the
    compute levels: tokens, steps, epochs), on a log axis labelled at the levels; a line at zero. Series are
    drawn side by side (a small shift) so their bars do not hide one another. ``axis``: draw there (a panel of a
    larger figure) instead of in a figure of its own."""
    figure, axis = plt.subplots(figsize=(6.5, 4)) if axis is None else (axis.figure, axis)
    shifts = [1 + 0.06 * (i - (len(series) - 1) / 2) for i in range(len(series))]
    for (column, label), shift, colour in zip(series.items(), shifts, (f"C{i}" for i in range(10))):
        summary = gaps.groupby(level)[column].agg(["mean", "std"]).reset_index()
        axis.errorbar(summary[level] * shift, summary["mean"], yerr=summary["std"].fillna(0), color=colour,
                      marker="o", capsize=4, label=label)
        axis.scatter(gaps[level] * shift, gaps[column], color=colour, alpha=0.4, s=14)
    axis.axhline(0, color="black", lw=0.8)
    log_axis_at(axis, gaps[level])
    axis.set(xlabel=xlabel, ylabel=ylabel, title=title)
    axis.legend()
    figure.tight_layout()
    return figure


def strip_points(seed: int = 0, **options) -> plt.Axes:
    """``sns.stripplot(**options)`` with its jitter drawn from ``seed``: seaborn jitters with numpy's global RNG, so
    a figure redrawn from the same numbers came out different (and a new file for git) every time."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        return sns.stripplot(**options)
    finally:
        np.random.set_state(state)


def save_figure(figure: plt.Figure, path: Path) -> Path:
    """Save as PNG (dpi 150) and close, so batch runs do not accumulate open figures."""
    figure.savefig(path, dpi=150)
    plt.close(figure)
    return path
