"""The Krony study's figures: the trend's gaps, the grid, and Van Loan's reconstruction errors."""

from __future__ import annotations

import pandas as pd

from lmstudy.krony.config import LABELS


def plot_trend(gaps: pd.DataFrame, title: str = ""):
    """Krony minus each baseline in WikiText-2 bits per byte against the base's training tokens: every seed
    (dots) and the mean with its seed std (error bars); below zero, Krony is better."""
    from lmstudy.plots import gap_trend

    return gap_trend(gaps, "base_tokens", {"krony_minus_distilled": "Krony − distilled",
                                           "krony_minus_scratch": "Krony − scratch, equal data"},
                     xlabel="base training tokens", ylabel="gap in WikiText-2 bits per byte",
                     title=title or "Krony minus same-size dense models (below 0: Krony better)")


def plot_grid(grid: pd.DataFrame, title: str = ""):
    """WikiText-2 bits per byte before and after continued training for every model of the grid; the base and
    the dense baselines' scores after training as lines."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid")
    krony = grid[grid["model"] == LABELS["krony"]]
    long = pd.concat([krony.assign(stage="after compression", bpb=krony["before_wikitext_bpb"]),
                      krony.assign(stage="after continued training", bpb=krony["wikitext_bpb"])])
    long = long.assign(label=long["class"] + " " + long["init"])
    figure, axis = plt.subplots(figsize=(8, 3.8))
    sns.barplot(data=long, x="label", y="bpb", hue="stage", ax=axis)
    others = grid[~grid["model"].isin([LABELS["krony"]])]
    for (_, row), colour in zip(others.iterrows(), sns.color_palette("dark", len(others))):
        name = row["model"] if row["model"] == "base" else f"{row['model']} ({row['class']})"
        axis.axhline(row["wikitext_bpb"], color=colour, linestyle="--" if row["model"] == "base" else ":", label=name)
    # A random init's score before training would flatten every other bar: clip the axis above the rest.
    top = min(long["bpb"].max(), 1.25 * long["bpb"].median()) * 1.02
    axis.set_ylim(min(long["bpb"].min(), others["wikitext_bpb"].min()) * 0.95, top)
    axis.set(xlabel="", ylabel="WikiText-2 bits per byte", title=title)
    axis.tick_params(axis="x", rotation=30)
    axis.legend(fontsize=8)
    figure.tight_layout()
    return figure


def plot_reconstruction(errors: pd.DataFrame, title: str = ""):
    """Van Loan error per layer (markers) against the SVD bound (line), one panel per MLP matrix."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid")
    figure, axes = plt.subplots(1, 2, figsize=(9, 3.5), sharey=True)
    for axis, matrix in zip(axes, ("c_fc", "c_proj")):
        part = errors[errors["matrix"] == matrix]
        sns.lineplot(data=part, x="layer", y="svd_bound", hue="class", ax=axis, legend=False)
        sns.scatterplot(data=part, x="layer", y="van_loan_error", hue="class", marker="o", s=50, ax=axis)
        sns.scatterplot(data=part, x="layer", y="lowrank_same_params_error", hue="class", marker="x", s=50,
                        ax=axis, legend=False)
        axis.set(xlabel="block", ylabel="relative Frobenius error", title=f"mlp.{matrix}")
        axis.set_xticks(sorted(part["layer"].unique()))
    figure.suptitle(title or "Van Loan (o) vs SVD bound (line) vs low-rank, same parameters (x)")
    figure.tight_layout()
    return figure
