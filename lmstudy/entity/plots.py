"""The entity study's figures: the loss curves (the paper's Figures 2-3), the trend of the two gaps, and the trends
of two bases side by side (our 3M base and SmolLM2)."""

from __future__ import annotations

import pandas as pd

from lmstudy.entity.claims import trend_gaps
from lmstudy.plots import gap_trend

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
    return gap_trend(trend_gaps(trend), "tokens", GAP_LABELS, xlabel="fine-tuning tokens",
                     ylabel="test ppl difference (< 0: better)", title=title)


GAP_LABELS = {"entity_gap": "GPT2E: gold minus null entities", "model_gap": "GPT2E (gold) minus GPT2"}


def relative_trend_gaps(trend: pd.DataFrame) -> pd.DataFrame:
    """:func:`lmstudy.entity.claims.trend_gaps` in % of GPT2's test perplexity at the same budget and seed: bases
    with different tokenizers (and so perplexities) on one scale."""
    gaps = trend_gaps(trend)
    gpt2 = trend[trend["model"] == "GPT2"].set_index(["step", "seed"])["test_ppl"]
    reference = gpt2.reindex(pd.MultiIndex.from_frame(gaps[["step", "seed"]])).to_numpy()
    return gaps.assign(**{column: 100 * gaps[column] / reference for column in GAP_LABELS})


def plot_trends_beside(trends: dict[str, pd.DataFrame], title: str = ""):
    """The two gaps against fine-tuning tokens for each base of ``trends`` (name -> :func:`trend_table`), one
    panel each, in % of GPT2's test perplexity (:func:`relative_trend_gaps`)."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(trends), figsize=(6.5 * len(trends), 4), squeeze=False)
    for index, (axis, (name, trend)) in enumerate(zip(axes[0], trends.items())):
        ylabel = "test ppl difference, % of GPT2's (< 0: better)" if index == 0 else ""  # one label: panels abut
        gap_trend(relative_trend_gaps(trend), "tokens", GAP_LABELS, xlabel="fine-tuning tokens", ylabel=ylabel,
                  title=name, axis=axis)
    figure.suptitle(title)
    figure.tight_layout()
    return figure
