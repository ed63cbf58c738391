"""Figure functions: a tidy DataFrame in, a matplotlib Figure out (seaborn styling).

Notebooks call these and save the figures into ``lmstudy.paths.figures_dir(scale)``.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
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


def save_figure(figure: plt.Figure, path: Path) -> Path:
    """Save as PNG (dpi 150) and close, so batch runs do not accumulate open figures."""
    figure.savefig(path, dpi=150)
    plt.close(figure)
    return path
