"""The entity study's figures: the loss curves (the paper's Figures 2-3) and the trend of the two gaps."""

from __future__ import annotations

import pandas as pd

from lmstudy.entity.claims import trend_gaps

COLOURS = {"GPT2": "tab:orange", "GPT2E": "tab:blue"}  # the paper's Figures 2-3


def plot_loss_curves(curves: pd.DataFrame, budgets=(), title: str = ""):
    """The paper's Figures 2-3 side by side: mean over seeds with the min-max band, GPT2 orange, GPT2E blue;
    dotted lines at the trend's budgets."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid")
    figure, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for axis, split in zip(axes, ("training", "validation")):
        sns.lineplot(data=curves[curves["split"] == split], x="step", y="loss", hue="model", palette=COLOURS,
                     errorbar=("pi", 100), marker="o" if split == "validation" else None, ax=axis)
        for step in budgets:
            axis.axvline(step, color="grey", ls=":", lw=0.8)
        axis.set(xlabel="fine-tuning step", ylabel="loss (nats / token)", title=f"{split} loss")
    figure.suptitle(title)
    figure.tight_layout()
    return figure


def plot_trend(trend: pd.DataFrame, title: str = ""):
    """The two gaps of :func:`lmstudy.entity.claims.trend_gaps` against fine-tuning tokens
    (:func:`lmstudy.plots.gap_trend`: every seed, and the mean with its seed std): GPT2E's gold minus null
    entities, and GPT2E minus GPT2; below zero, the entities (GPT2E) help."""
    from lmstudy.plots import gap_trend

    return gap_trend(trend_gaps(trend), "tokens", {"entity_gap": "GPT2E: gold minus null entities",
                                                   "model_gap": "GPT2E (gold) minus GPT2"},
                     xlabel="fine-tuning tokens", ylabel="test ppl difference (< 0: better)", title=title)
