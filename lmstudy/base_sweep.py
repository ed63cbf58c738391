"""The shared base's one-off size sweep: ``python -m lmstudy base sweep --scale S`` (figures ``base_sweep.*``).

A few widths/depths (the preset's ``sweep_sizes``), each trained by :func:`lmstudy.base.train_base` with the same
compute (``sweep_fraction`` of the final run's, on ``sweep_data_fraction`` of the data) under the final recipe;
the validation loss against compute of each (:func:`plot_sweep`), and the size :func:`choose_size` picks for the
final run: the one nearest to ~20 tokens per parameter at the final compute among those whose three shipped fp16
checkpoints fit the git budget. It ran once per scale; its result is the presets' ``model`` (``lmstudy.scales``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from lmstudy.base import (STUDY, BaseConfig, BaseDataConfig, flops_per_token, model_config, size_label, train_base,
                          validation_curve)


def sweep_configs(scale: str) -> list[BaseConfig]:
    """One config per sweep size, each with ``sweep_fraction`` of the final compute (module docstring)."""
    from lmstudy.scales import preset

    params = preset(STUDY, scale)
    data = replace(BaseDataConfig(**params["data"]), data_fraction=params["sweep_data_fraction"])
    configs = []
    for size in params["sweep_sizes"]:
        model = replace(model_config(size), seq_len=params["model"]["seq_len"])
        tokens = params["sweep_fraction"] * params["compute"] / flops_per_token(model, data.vocab_size)
        configs.append(BaseConfig(data=data, model=model, train_tokens=int(tokens), batch_size=params["sweep_batch_size"],
                                  lr=params["lr"], eval_every_fraction=0.1, checkpoint_fractions=(1.0,),
                                  mixed_precision=params["mixed_precision"]))
    return configs


def run_sweep(scale: str):
    """Train every sweep size (cached) and return (curves, summary) DataFrames.

    ``curves``: one row per evaluation of each size (FLOPs, tokens, val_loss). ``summary``: one row per
    size with its parameters, its loss at the sweep's compute, and the tokens (and tokens per
    parameter) it would see if it got the final run's whole compute.
    """
    import pandas as pd
    from lmstudy.scales import preset

    compute = preset(STUDY, scale)["compute"]
    curves, summary = [], []
    for config in sweep_configs(scale):
        metrics = train_base(config)
        label = size_label(config.model)
        curves += [{"size": label, **row} for row in validation_curve(config)]
        final_tokens = compute / metrics["flops_per_token"]
        summary.append({
            "size": label, "n_layer": config.model.n_layer, "n_head": config.model.n_head,
            "n_embd": config.model.n_embd, "parameters": metrics["parameters"],
            "non_embedding_parameters": metrics["non_embedding_parameters"],
            "fp16_mb": metrics["parameters"] * 2 / 1e6, "flops_per_token": metrics["flops_per_token"],
            "tokens": metrics["tokens"], "flops": metrics["train_flops"], "val_loss": metrics["val_loss"],
            "train_wall_s": metrics["train_wall_s"], "final_tokens": final_tokens,
            "final_tokens_per_parameter": final_tokens / metrics["parameters"],
        })
    return pd.DataFrame(curves), pd.DataFrame(summary)


def choose_size(summary, tokens_per_parameter: float = 20.0, max_shipped_mb: float = 40.0,
                checkpoints: int = 3) -> dict:
    """The sweep size whose tokens per parameter at the final compute is nearest (as a ratio) to
    ``tokens_per_parameter`` (Hoffmann et al. 2022's compute-optimal ~20), among the sizes whose
    ``checkpoints`` fp16 copies fit ``max_shipped_mb`` (the git budget for the shipped folders).

    Why not the sweep's own losses: they are measured at a fraction of the final compute, where the
    smallest size wins (docs/base-models.md, "Size: the sweep"); they show the direction, the rule sets the size.
    """
    fits = summary[summary["fp16_mb"] * checkpoints <= max_shipped_mb]
    if fits.empty:
        raise ValueError(f"no sweep size fits {max_shipped_mb} MB for {checkpoints} fp16 checkpoints")
    distance = (np.log(fits["final_tokens_per_parameter"]) - np.log(tokens_per_parameter)).abs()
    return fits.loc[distance.idxmin()].to_dict()


def plot_sweep(curves, summary, chosen: str):
    """Validation loss against training compute, one curve per size (each with the same compute)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, ax = plt.subplots(figsize=(7, 4.5))
    palette = dict(zip(summary["size"], sns.color_palette("viridis", len(summary))))
    for _, row in summary.iterrows():
        part = curves[curves["size"] == row["size"]]
        label = (f"{row['size']}: {row['parameters'] / 1e6:.1f}M params, "
                 f"{row['final_tokens_per_parameter']:.0f} tokens/param at the final budget"
                 + (" (chosen)" if row["size"] == chosen else ""))
        ax.plot(part["flops"], part["val_loss"], "o-", color=palette[row["size"]], label=label, ms=3,
                lw=2.5 if row["size"] == chosen else 1.2)
    ax.set_xscale("log")
    ax.set_xlabel("training compute (FLOPs)")
    ax.set_ylabel("validation loss (nats/token)")
    ax.set_title("Base-model sweep: every size trained with the same compute")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


__all__ = ["choose_size", "plot_sweep", "run_sweep", "sweep_configs"]
