"""Krony against distillation as the compressed base gets better (issue 49: the trend, completed).

Krony-PT's central claim is about compressing a *well-trained* model. Each of our settings compresses a base at a
known quality and compares, after the same continued training, the Krony model of the 81M class with the distilled
dense model of its size, seed by seed:

- our 3M-parameter base at its 10%, 30% and final checkpoints (the cpu run: ``figures/03_krony_trend.csv``);
- a base of GPT-2 small's dimensions trained on one GPU lease, at the same three checkpoints
  (``results/gpu/2026-11-27-third/tables/03_krony_trend.csv``);
- SmolLM2-135M, 2 trillion tokens (``results/krony_smollm2/central.csv``, :mod:`lmstudy.krony.smol`).

The quality of a base is its WikiText-2 test bits per byte (each setting's own slice of the test set: the first
50,000 / 65,536 / 20,000 tokens of its tokenizer; the gap at a point is always measured on one slice). The claim
at each point: Krony's bits per byte below the distilled model's, in % of the distilled model's (positive = the
paper's direction, ``lmstudy.krony.claims.percent_ahead``), one value a seed, through :mod:`lmstudy.claims`. The
trend is read over the base's quality as ``1 / bits per byte`` (bytes a bit: rising as the base improves, so
"toward the paper" means Krony's lead grows with a better base).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from lmstudy.claims import Spread, claims_table, differences, trend_rows
from lmstudy.krony.claims import NEGLIGIBLE_PERCENT, SMOL_RESULTS, percent_ahead
from lmstudy.paths import REPO_ROOT

GPU_TABLES = REPO_ROOT / "results" / "gpu" / "2026-11-27-third" / "tables"
CLAIM = ("Our 81M model variant outperforms distilgpt2 (Abstract), from a base of this quality: Krony's WikiText-2 "
         "bits per byte below the distilled model's of the same size")


def _grid_setting(setting: str, trend_csv: Path, bases_csv: Path) -> pd.DataFrame:
    """A study-03 trend table (Krony and distilled by checkpoint and seed) beside its bases' bits per byte."""
    trend, bases = pd.read_csv(trend_csv), pd.read_csv(bases_csv).set_index("fraction")
    rows = []
    for (fraction, seed), group in trend.groupby(["fraction", "seed"]):
        models = group.set_index("model")["wikitext_bpb"]
        rows.append({"setting": setting, "checkpoint": bases.loc[fraction, "checkpoint"],
                     "base_bpb": bases.loc[fraction, "wikitext_bpb"], "seed": int(seed),
                     "krony_bpb": models["Krony"], "distilled_bpb": models["distilled"]})
    return pd.DataFrame(rows)


def _smol_setting(results: Path = SMOL_RESULTS) -> pd.DataFrame:
    """SmolLM2's central comparison: the Krony init chosen on validation against the distilled model, per seed."""
    from lmstudy.krony.smol import best_init

    central, base = pd.read_csv(results / "central.csv"), pd.read_csv(results / "base.csv")
    chosen = best_init(central, "81M")
    krony = central[(central["kind"] == "krony") & (central["init"] == chosen)].set_index("seed")["wikitext_bpb"]
    distilled = central[central["kind"] == "distilled"].set_index("seed")["wikitext_bpb"]
    return pd.DataFrame([{"setting": "SmolLM2-135M", "checkpoint": "smollm2",
                          "base_bpb": float(base["wikitext_bpb"].iloc[0]), "seed": int(seed),
                          "krony_bpb": krony[seed], "distilled_bpb": distilled[seed]}
                         for seed in krony.index.intersection(distilled.index)])


def trend_points(smol_results: Path = SMOL_RESULTS) -> pd.DataFrame:
    """One row per setting, checkpoint and seed: the base's bits per byte, Krony's and the distilled model's after
    continued training, ``gap`` (Krony minus distilled, bits per byte) and ``percent_ahead`` (Krony's lead in %
    of the distilled model's bits per byte). SmolLM2's rows are there once its central comparison has run."""
    figures = REPO_ROOT / "figures"  # the committed cpu tables, whichever folder a notebook run writes to
    parts = [_grid_setting("our base (cpu)", figures / "03_krony_trend.csv", figures / "03_krony_bases.csv"),
             _grid_setting("GPT-2 small dims (GPU)", GPU_TABLES / "03_krony_trend.csv",
                           GPU_TABLES / "03_krony_bases.csv")]
    if (smol_results / "central.csv").is_file():
        parts.append(_smol_setting(smol_results))
    points = pd.concat(parts, ignore_index=True)
    points["gap"] = points["krony_bpb"] - points["distilled_bpb"]
    points["percent_ahead"] = percent_ahead(points["krony_bpb"], points["distilled_bpb"])
    return points


def summary(points: pd.DataFrame) -> pd.DataFrame:
    """One row per point (setting, checkpoint): the base's bits per byte, the mean gap with its 95% interval
    (paired t over seeds) and the seeds, worst base first."""
    rows = []
    for (setting, checkpoint), group in points.groupby(["setting", "checkpoint"], sort=False):
        effect = differences(group["gap"].tolist())
        rows.append({"setting": setting, "checkpoint": checkpoint, "base_bpb": group["base_bpb"].iloc[0],
                     "gap": effect.mean, "gap_low": effect.low, "gap_high": effect.high, "seeds": effect.n})
    return pd.DataFrame(rows).sort_values("base_bpb", ascending=False, ignore_index=True)


def quality_claims(points: pd.DataFrame) -> pd.DataFrame:
    """The claims table of :func:`quality_rows`."""
    return claims_table(quality_rows(points))


def quality_rows(points: pd.DataFrame) -> list:
    """The claim at every point, worst base first, and its trend over the base's quality (module docstring)."""
    ordered = summary(points)
    levels, values, texts = [], [], []
    for row in ordered.itertuples():
        group = points[(points["setting"] == row.setting) & (points["checkpoint"] == row.checkpoint)]
        levels.append(1 / row.base_bpb)
        values.append(percent_ahead(group.set_index("seed")["krony_bpb"], group.set_index("seed")["distilled_bpb"]
                                    ).tolist())
        texts.append(f"{row.setting}, {row.checkpoint} (base {row.base_bpb:.3f} bits/byte): Krony "
                     f"{Spread.of(group['krony_bpb']).format(4)} vs distilled "
                     f"{Spread.of(group['distilled_bpb']).format(4)} bits/byte")
    return trend_rows(CLAIM, levels, values, ours=texts, negligible=NEGLIGIBLE_PERCENT, dataset="WikiText-2 test",
                      paper="KronyPT-81M 34.99 vs DistilGPT2 36.48 perplexity (Table 4): +1.16%",
                      note="level: the base's quality, 1 / its WikiText-2 bits per byte; effect in % of the distilled "
                           "model's bits per byte")


def plot_quality_trend(points: pd.DataFrame, title: str = ""):
    """Krony minus distilled (bits per byte) against the base's bits per byte, the axis reversed so that better bases
    are to the right: every seed (dots), each point's mean with its 95% interval, one marker per setting."""
    import matplotlib.pyplot as plt

    table = summary(points)
    figure, axis = plt.subplots(figsize=(7, 4.2))
    for (setting, marker), colour in zip(zip(table["setting"].unique(), "os^D"), (f"C{i}" for i in range(10))):
        rows = table[table["setting"] == setting]
        spread = [rows["gap"] - rows["gap_low"].fillna(rows["gap"]),
                  rows["gap_high"].fillna(rows["gap"]) - rows["gap"]]
        axis.errorbar(rows["base_bpb"], rows["gap"], yerr=spread, fmt=marker, color=colour, capsize=4, label=setting)
        seeds = points[points["setting"] == setting]
        axis.scatter(seeds["base_bpb"], seeds["gap"], color=colour, alpha=0.35, s=12)
    axis.axhline(0, color="black", lw=0.8)
    axis.invert_xaxis()
    axis.set(xlabel="the base's WikiText-2 bits per byte (better base to the right)",
             ylabel="Krony − distilled, bits per byte",
             title=title or "Krony minus distilled, 81M class (below 0: Krony better)")
    axis.legend(fontsize=8)
    figure.tight_layout()
    return figure


def published_claims() -> pd.DataFrame:
    """``figures/03_krony_quality_claims.csv`` (``python -m lmstudy claims 03-quality``) from the committed tables."""
    return claims_table(quality_rows(trend_points()))


__all__ = ["CLAIM", "plot_quality_trend", "published_claims", "quality_claims", "quality_rows", "summary", "trend_points"]
