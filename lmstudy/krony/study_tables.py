"""The Krony study's tables, read from its runs (training what the run cache lacks): the base at each checkpoint,
the grid, Table 6 and the trend with its per-seed gaps (:func:`lmstudy.paired_gaps.paired_gaps`)."""

from __future__ import annotations

import pandas as pd
from tqdm.auto import tqdm

from lmstudy.base import checkpoint_name
from lmstudy.evaluation import eval_domains
from lmstudy.krony.bases import base_checkpoint
from lmstudy.krony.classes import PAPER_RATIOS
from lmstudy.krony.config import LABELS, KronyConfig, ModelSpec
from lmstudy.krony.runs import base_metrics, continued_run, grid_specs, initial_metrics, table6_specs, trend_specs
from lmstudy.paired_gaps import paired_gaps

METRICS = ["wikitext_bpb", "wikitext_ppl", "wikitext_ppl_word", "lambada_acc", "lambada_acc_low", "lambada_acc_high",
           "lambada_ppl"]


def domain_keys(domains: list | None) -> list[str]:
    """Each held-out domain's perplexity and bits-per-byte keys (``domains`` None: all of the protocol's)."""
    return [f"{domain}_{unit}" for domain in (eval_domains() if domains is None else domains)
            for unit in ("ppl", "bpb")]


def _row(config: KronyConfig, spec: ModelSpec, initial: dict, trained: dict, base_parameters: int) -> dict:
    """One table row: the model, its size, its scores before (``before_*``) and after continued training, and
    each held-out domain's perplexity and bits per byte after. ``best_val_loss``: the validation loss (nats per
    token, the base's validation stream) of the weights kept, what :func:`best_init` chooses by."""
    krony = spec.kind == "krony"
    return {"model": LABELS[spec.kind], "class": spec.size_class, "init": spec.init,
            "factors": spec.n_factors if krony else None, "scalars": spec.scalars if krony else None,
            "parameters": trained["parameters"],
            "size_ratio": trained["parameters"] / base_parameters, "paper_ratio": PAPER_RATIOS[spec.size_class],
            **{f"before_{key}": initial[key] for key in ("wikitext_bpb", "wikitext_ppl", "lambada_acc")},
            "best_val_loss": trained["best_val_loss"], **{key: trained[key] for key in METRICS},
            **{key: trained[key] for key in domain_keys(config.domains)}}


def base_table(config: KronyConfig) -> pd.DataFrame:
    """The base at each checkpoint of ``fractions``: its training tokens and the protocol's scores."""
    rows = []
    for fraction in config.fractions:
        metrics = base_metrics(config, fraction)
        rows.append({"checkpoint": checkpoint_name(fraction), "fraction": fraction,
                     "base_tokens": base_checkpoint(config, fraction)[1],
                     "parameters": metrics["parameters"], **{key: metrics[key] for key in METRICS}})
    return pd.DataFrame(rows)


def models_at(config: KronyConfig, fraction: float, specs: list[ModelSpec], seed: int, desc: str) -> list[dict]:
    """Rows of ``specs`` from checkpoint ``fraction`` (training what is not cached), beside the base's size."""
    base_parameters = base_metrics(config, fraction)["parameters"]
    rows = []
    for spec in tqdm(specs, desc=desc, unit="model"):
        trained = continued_run(config, fraction, spec, seed)
        rows.append(_row(config, spec, initial_metrics(config, fraction, spec, seed), trained, base_parameters))
    return rows


def grid_table(config: KronyConfig) -> pd.DataFrame:
    """The full grid at the final checkpoint, seed 0: every class x init, then the dense baselines of
    ``compare_class``; a first row for the base itself."""
    fraction = config.fractions[-1]
    base = base_metrics(config, fraction)
    models = models_at(config, fraction, grid_specs(config), config.seeds[0], "grid")
    base_row = {"model": "base", "parameters": base["parameters"], "size_ratio": 1.0,
                **{key: base[key] for key in models[0] if key in base}}
    return pd.DataFrame([base_row, *models]).reindex(columns=list(models[0]))  # the models' column order


def best_init(grid: pd.DataFrame, size_class: str, metric: str = "best_val_loss") -> str:
    """The Krony init of ``size_class`` with the lowest validation loss in ``grid`` (``grid_table``'s
    ``best_val_loss``: the continued training's validation stream, the base's own validation split).

    Chosen on validation, never on a test set: the trend's verdicts are read on WikiText-2 test, and an init
    picked by the score the verdict then reads would favour Krony by its luck on that test set. ``metric``:
    another column, only to report what it would have picked (:func:`claims`' note)."""
    krony = grid[(grid["model"] == LABELS["krony"]) & (grid["class"] == size_class)]
    if krony.empty:
        raise ValueError(f"the grid has no Krony row of class {size_class}")
    return krony.loc[krony[metric].idxmin(), "init"]


def table6(config: KronyConfig) -> pd.DataFrame:
    """The paper's empty Table 6 at the final checkpoint, seed 0: Van Loan init, ``table6_class`` shapes,
    ``table6_factors`` factors, each without and with per-factor scalars."""
    return pd.DataFrame(models_at(config, config.fractions[-1], table6_specs(config), config.seeds[0], "table 6"))


def trend_table(config: KronyConfig, init: str) -> pd.DataFrame:
    """The central comparison from every checkpoint of ``fractions`` and every seed: the ``compare_class`` Krony
    model (``init``) vs the distilled and the scratch models; one row per checkpoint x seed x model."""
    rows = []
    for fraction in config.fractions:
        tokens = base_checkpoint(config, fraction)[1]
        for seed in config.seeds:
            for row in models_at(config, fraction, trend_specs(config, init), seed, f"trend {fraction:.0%} seed {seed}"):
                rows.append({"fraction": fraction, "base_tokens": tokens, "seed": seed, **row})
    return pd.DataFrame(rows)


def trend_gaps(trend: pd.DataFrame, metric: str = "wikitext_bpb") -> pd.DataFrame:
    """Per checkpoint and seed: Krony minus distilled and Krony minus scratch in ``metric`` (negative = Krony
    better for perplexities and bits), from ``trend_table``'s rows, paired by seed (one seed = the same
    continued-training batches: :func:`lmstudy.paired_gaps.paired_gaps`)."""
    return paired_gaps(trend, ["fraction", "base_tokens"], metric,
                       {"krony_minus_distilled": (LABELS["krony"], LABELS["distilled"]),
                        "krony_minus_scratch": (LABELS["krony"], LABELS["scratch"])})
