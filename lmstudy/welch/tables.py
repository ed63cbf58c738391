"""Tables, figures and claim checks of notebook 01_embedding_init (Welch et al. 2020, Table 1).

The notebook stays thin: it calls ``grid_configs`` (which runs to make), ``run_grid`` (the tidy
Table 1 DataFrame), ``section_figure`` (sections (a)-(d)), ``claims`` (the paper's five claims,
each holds / does not hold / not run, with the numbers; vocabulary of :mod:`lmstudy.claims`) and
``rare_word_table`` (loss by training-frequency bucket).

Our reading of the paper's sections (Section 2): (a) frozen random output embeddings, (b) frozen
pretrained output embeddings, (c) frozen random input embeddings, (d) everything else. A config
can fit several; we take the first that applies, in that order (tied frozen random -> (a)).

The five claims checked (Section 2, on validation perplexity, mean over seeds). Claims 1-4 are about the
UNK'd setting and are checked on each UNK'd dataset (PTB ``Std`` and ``Std-news``, the news corpus with
UNKs, which differs from ``Rare`` only in UNK replacement); claim 5 on ``Rare``:
1. Pretrained beats random in (all but one of) the pairs differing only in initialisation;
   we say it holds when at most one pair goes the other way.
2. Freezing pretrained input embeddings is always better, all else equal (untied pairs: freezing
   a tied matrix would freeze the output too).
3. Freezing the output embeddings is the worst choice: every frozen-output config (sections a, b)
   is worse than every config that does not freeze the output.
4. Tying helps when the input embeddings are random (tied random trainable < untied random trainable
   both sides), and helps less when both are pretrained (when that pair was run).
5. Rare: the proposed approach (untied, pretrained frozen input) is the best configuration.

Rare-word analysis: per-token losses of the best weights (``load_weights(..., "best")``, the weights
the reported test perplexity uses), bucketed by the target word's count in the training stream (0,
1-5, 6-50, 51+); the buckets of each config are cached as a run of their own.
"""

from __future__ import annotations

import math
from dataclasses import asdict

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
import torch

from lmstudy.claims import ClaimRow, claims_table, spreads
from lmstudy.plots import strip_points
from lmstudy.welch.awd_lstm import per_token_losses
from lmstudy.welch.embedding_config import (
    ALL_CONFIGS,
    SECTION3_CONFIGS,
    EmbeddingConfig,
)
from lmstudy.runs import cached, get_run
from lmstudy.welch.study import (
    DATA_SETTINGS,
    RUN_FIELDS,
    STUDY,
    EmbeddingInitConfig,
    build_model,
    run,
)
from lmstudy.training import load_weights
from lmstudy.word_lm import load_word_lm

STANDARD = "tied/random,trainable"  # the standard approach
PROPOSED = "untied/in=pretrained,frozen/out=pretrained,trainable"  # "ours"
# Named grids for the notebook's ``configs`` parameter (a string: papermill cannot parse lists of names
# holding commas). standard_vs_ours: the standard approach, ours, and ours without freezing (smoke).
CONFIG_SETS = {
    "section3": SECTION3_CONFIGS,
    "all": ALL_CONFIGS,
    "standard_vs_ours": tuple(EmbeddingConfig.from_name(n) for n in (
        STANDARD, PROPOSED, "untied/in=pretrained,trainable/out=pretrained,trainable")),
}
BUCKETS = ((0, 0, "0"), (1, 5, "1-5"), (6, 50, "6-50"), (51, None, "51+"))


def grid_configs(configs: str | list[str], seeds: list[int], settings: list[str], section3_seeds: list[int] = (),
                 **params) -> list[EmbeddingInitConfig]:
    """Run configs of a grid: ``configs`` names a ``CONFIG_SETS`` grid or is a list of names, each run with
    ``seeds``; the Section 3 configs among them also with ``section3_seeds`` (the paper's extra seeds).
    ``params`` are the notebook's parameters: keys that are not run-config fields are ignored."""
    names = [c.name for c in CONFIG_SETS[configs]] if isinstance(configs, str) else list(configs)
    section3 = {c.name for c in SECTION3_CONFIGS}
    run_params = {k: v for k, v in params.items() if k in RUN_FIELDS}
    return [EmbeddingInitConfig(embedding=name, seed=seed, **DATA_SETTINGS[setting], **run_params)
            for setting in settings for name in names
            for seed in dict.fromkeys([*seeds, *(section3_seeds if name in section3 else ())])]


def setting_of(config: EmbeddingInitConfig) -> str:
    """The ``DATA_SETTINGS`` name (Std, Std-news, Rare) of a run config's domain and UNK cutoff."""
    return next(name for name, s in DATA_SETTINGS.items()
                if (s["domain"], s["unk_cutoff"]) == (config.domain, config.unk_cutoff))


def datasets_of(table: pd.DataFrame) -> list[str]:
    """The data settings present in ``table``, in ``DATA_SETTINGS`` order (Std, Std-news, Rare)."""
    present = set(table["dataset"])
    return [name for name in DATA_SETTINGS if name in present]


def section(embedding: str | EmbeddingConfig) -> str:
    """The paper's Table 1 section of a configuration (see the module docstring)."""
    e = EmbeddingConfig.from_name(str(embedding))
    if e.output_frozen:
        return "(a) frozen random output" if e.output_init == "random" else "(b) frozen pretrained output"
    if e.input_frozen and e.input_init == "random":
        return "(c) frozen random input"
    return "(d) various"


def table_row(config: EmbeddingInitConfig, metrics: dict) -> dict:
    """One tidy Table 1 row."""
    e = EmbeddingConfig.from_name(config.embedding)
    return dict(config=config.embedding, section=section(e), tied=e.tied, input_init=e.input_init,
                input_frozen=e.input_frozen, output_init=e.output_init, output_frozen=e.output_frozen,
                dataset=setting_of(config), seed=config.seed, valid_ppl=metrics["val_ppl"],
                test_ppl=metrics["test_ppl"], epochs=metrics.get("epochs"), steps=metrics.get("steps"),
                wall_s=metrics.get("train_wall_s"))


def run_grid(configs: list[EmbeddingInitConfig]) -> pd.DataFrame:
    """Train (or fetch from the run cache) every config; the tidy Table 1 DataFrame."""
    return pd.DataFrame([table_row(config, run(config)) for config in configs])


def mean_ppl(table: pd.DataFrame, column: str = "valid_ppl") -> pd.DataFrame:
    """Mean over seeds: rows config, columns dataset."""
    return table.groupby(["config", "dataset"])[column].mean().unstack("dataset")


def split_shift(new: pd.DataFrame, old: pd.DataFrame) -> pd.DataFrame:
    """How far Table 1 moved between two split formats (``old``: ``run_grid``'s table on the v1 splits, ``new``:
    on the current ones). One row per configuration and dataset present in both: the validation and test
    perplexity (mean over seeds) before and after, and the change in percent. The v1 splits let near-duplicates
    of training documents into valid/test (``lmstudy.data.splits``); the v2 rule also redraws which documents are
    evaluated, which moves every configuration alike (README: the sample effect dominated at the cpu preset)."""
    keys = ["config", "dataset"]
    means = [t.groupby(keys)[["valid_ppl", "test_ppl"]].mean() for t in (old, new)]
    shift = means[0].join(means[1], lsuffix="_v1", rsuffix="_now", how="inner")
    for column in ("valid_ppl", "test_ppl"):
        shift[f"{column}_change_pct"] = 100 * (shift[f"{column}_now"] / shift[f"{column}_v1"] - 1)
    return shift.reset_index()


def claim_shift(new: pd.DataFrame, old: pd.DataFrame) -> pd.DataFrame:
    """The verdicts of :func:`claims` on two tables side by side (``verdict_v1``, ``verdict_now``, ``changed``),
    one row per claim and dataset checked in both."""
    both = old[["claim", "dataset", "verdict"]].merge(new[["claim", "dataset", "verdict"]], on=["claim", "dataset"],
                                                      suffixes=("_v1", "_now"))
    return both.assign(changed=both["verdict_v1"] != both["verdict_now"])


def section_figure(table: pd.DataFrame, title: str = "") -> plt.Figure:
    """Validation perplexity per configuration (mean over seeds, bars; seeds as dots), grouped by section,
    one panel per dataset."""
    sns.set_theme(style="whitegrid")
    datasets = datasets_of(table)
    order = (table.groupby("config")["valid_ppl"].mean().rename("ppl").reset_index()
             .assign(section=lambda d: d["config"].map(section)).sort_values(["section", "ppl"])["config"].tolist())
    figure, axes = plt.subplots(1, len(datasets), figsize=(6 * len(datasets), 0.35 * len(order) + 1.5),
                                sharey=True, squeeze=False)
    for axis, dataset in zip(axes[0], datasets):
        part = table[table["dataset"] == dataset]
        sns.barplot(data=part, y="config", x="valid_ppl", hue="section", order=order, errorbar=None,
                    dodge=False, ax=axis)
        strip_points(data=part, y="config", x="valid_ppl", order=order, color="black", size=3, ax=axis)
        axis.set(title=f"{dataset}", xlabel="validation perplexity", ylabel="")
        if axis is not axes[0][-1] and axis.get_legend() is not None:
            axis.get_legend().remove()
    figure.suptitle(title)
    figure.tight_layout()
    return figure


def _pairs(names: list[str], change) -> list[tuple[str, str]]:
    """(a, b) pairs of configs present where b = change(a)."""
    present = set(names)
    out = []
    for name in names:
        other = change(EmbeddingConfig.from_name(name))
        if other is not None and other.name in present:
            out.append((name, other.name))
    return out


def _with(e: EmbeddingConfig, **changes) -> EmbeddingConfig | None:
    values = {**asdict(e), **changes}
    try:
        return EmbeddingConfig(**values)
    except ValueError:
        return None


def _pretrained_version(e: EmbeddingConfig) -> EmbeddingConfig | None:
    """The same config with every random side pretrained (None if it has no random side)."""
    if "random" not in (e.input_init, e.output_init):
        return None
    return _with(e, input_init="pretrained", output_init="pretrained")


def _frozen_input_version(e: EmbeddingConfig) -> EmbeddingConfig | None:
    # Untied only: freezing a tied matrix freezes the output too, which is not "all else equal".
    if e.tied or e.input_init != "pretrained" or e.input_frozen:
        return None
    return _with(e, input_frozen=True)


def claims(table: pd.DataFrame) -> pd.DataFrame:
    """The paper's five claims on ``table`` (``run_grid``'s DataFrame): claim, dataset, verdict, evidence.

    Claims 1-4 are checked on every UNK'd dataset of the table (``Std``, ``Std-news``: every dataset but
    ``Rare``), claim 5 on ``Rare``. Perplexities are means over seeds, with their standard deviation where
    a config ran with several seeds."""
    stats = spreads(table, ["config", "dataset"], "valid_ppl")  # a Spread over seeds per (config, dataset)
    std_datasets = [d for d in datasets_of(table) if d != "Rare"] or ["Std"]
    rows: list[ClaimRow] = []

    def add(claim: str, dataset: str, verdict: str, evidence: str) -> None:
        rows.append(ClaimRow(claim, verdict, evidence, dataset=dataset))

    def ppl(name: str, dataset: str) -> float:
        return stats[(name, dataset)].mean if (name, dataset) in stats.index else math.nan

    def show(name: str, dataset: str) -> str:
        """Mean perplexity, ± the seed spread when the config ran with several seeds."""
        return stats[(name, dataset)].format(1) if (name, dataset) in stats.index else "not run"

    def names(dataset: str) -> list[str]:
        return [name for name, d in stats.index if d == dataset]

    def pair_claim(claim: str, change, side: str, exceptions: int, missing: str) -> None:
        """A claim on the pairs (a, change(a)) that differ in one choice: holds when ``change``'s side
        (pretrained, frozen) is better in all pairs but at most ``exceptions``."""
        for d in std_datasets:
            pairs = _pairs(names(d), change)
            if not pairs:
                add(claim, d, "not run", missing)
                continue
            better = sum(ppl(b, d) < ppl(a, d) for a, b in pairs)
            add(claim, d, "holds" if len(pairs) - better <= exceptions else "does not hold",
                f"{side} better in {better}/{len(pairs)} pairs; "
                + "; ".join(f"{a}: {show(a, d)} -> {side} {show(b, d)}" for a, b in pairs))

    pair_claim("1. pretrained beats random init (all but one pair)", _pretrained_version, "pretrained", 1,
               "no random/pretrained pair in the grid")
    pair_claim("2. freezing pretrained input embeddings is always better", _frozen_input_version, "frozen", 0,
               "no trainable/frozen pretrained-input pair in the grid")

    # 3. freezing the output embeddings is the worst choice
    claim = "3. frozen output embeddings are worse than every non-frozen-output config"
    for d in std_datasets:
        frozen_out = [n for n in names(d) if EmbeddingConfig.from_name(n).output_frozen]
        other = [n for n in names(d) if not EmbeddingConfig.from_name(n).output_frozen]
        if frozen_out and other:
            best_frozen = min(frozen_out, key=lambda n: ppl(n, d))
            worst_other = max(other, key=lambda n: ppl(n, d))
            add(claim, d, "holds" if ppl(best_frozen, d) > ppl(worst_other, d) else "does not hold",
                f"best frozen-output {best_frozen} {show(best_frozen, d)} vs worst other {worst_other} "
                f"{show(worst_other, d)}")
        else:
            add(claim, d, "not run", "needs configs with and without frozen output embeddings")

    # 4. tying helps with random input embeddings, and helps less with pretrained ones
    untied = "untied/in=random,trainable/out=random,trainable"
    tied_pre, untied_pre = "tied/pretrained,trainable", "untied/in=pretrained,trainable/out=pretrained,trainable"
    claim = "4. tying helps with random embeddings, less with pretrained ones"
    for d in std_datasets:
        present = names(d)
        if STANDARD in present and untied in present:
            gain = ppl(untied, d) - ppl(STANDARD, d)  # > 0: tying helps
            evidence = f"random: tied {show(STANDARD, d)} vs untied {show(untied, d)} (gain {gain:.1f})"
            holds = gain > 0
            if tied_pre in present and untied_pre in present:
                gain_pre = ppl(untied_pre, d) - ppl(tied_pre, d)
                evidence += f"; pretrained: tied {show(tied_pre, d)} vs untied {show(untied_pre, d)} (gain {gain_pre:.1f})"
                holds = holds and gain_pre < gain
            else:
                evidence += "; pretrained pair not run"
            add(claim, d, "holds" if holds else "does not hold", evidence)
        else:
            add(claim, d, "not run", f"needs {STANDARD} and {untied}")

    # 5. Rare: the proposed approach is best
    claim = "5. untied, pretrained, frozen input (ours) is the best config"
    rare = sorted(names("Rare"), key=lambda n: ppl(n, "Rare"))
    if PROPOSED in rare:
        add(claim, "Rare", "holds" if rare[0] == PROPOSED else "does not hold",
            f"ours {show(PROPOSED, 'Rare')} (rank {rare.index(PROPOSED) + 1}/{len(rare)}); "
            f"best {rare[0]} {show(rare[0], 'Rare')}; standard {show(STANDARD, 'Rare')}")
    else:
        add(claim, "Rare", "not run", f"needs {PROPOSED} on Rare")
    return claims_table(rows)


@torch.no_grad()
def bucket_losses(losses: torch.Tensor, targets: torch.Tensor, train_ids: torch.Tensor, vocab_size: int) -> pd.DataFrame:
    """Mean loss, perplexity and token share per training-frequency bucket of the target word."""
    counts = torch.bincount(train_ids.long(), minlength=vocab_size)[targets]  # (N,) training count per target
    rows = []
    for low, high, label in BUCKETS:
        mask = (counts >= low) & ((counts <= high) if high is not None else torch.ones_like(counts, dtype=torch.bool))
        n = int(mask.sum())
        loss = losses[mask].double().mean().item() if n else math.nan
        rows.append(dict(bucket=label, tokens=n, token_pct=100 * n / len(targets), loss=loss, ppl=math.exp(loss) if n else math.nan))
    return pd.DataFrame(rows)


def rare_word_buckets(config: EmbeddingInitConfig, part: str = "test") -> pd.DataFrame:
    """Loss by training-frequency bucket on ``part`` for one config, with its best weights.

    Cached as a run of its own, so that a run archive without weights (``runs archive --weights none``)
    still redraws the table."""
    def fn(run_) -> dict:
        run(config)  # cached: makes sure the trained run exists
        data = load_word_lm(config.domain, config.unk_cutoff, config.train_tokens, config.eval_tokens)
        model, _ = build_model(config, data)
        load_weights(model, get_run(STUDY, asdict(config)), "best")
        losses, targets = per_token_losses(model, getattr(data, part), config.test_batch_size, config.bptt)
        return {"rows": bucket_losses(losses, targets, data.train, len(data.vocab)).to_dict("records")}

    return pd.DataFrame(cached(STUDY, {"stage": "rare_words", "part": part, **asdict(config)}, fn)["rows"])


def rare_word_table(configs: list[EmbeddingInitConfig], part: str = "test") -> pd.DataFrame:
    """``rare_word_buckets`` of each config, labelled by config, dataset and seed."""
    return pd.concat([rare_word_buckets(config, part).assign(config=config.embedding, dataset=setting_of(config),
                                                             seed=config.seed) for config in configs],
                     ignore_index=True)


def rare_word_figure(table: pd.DataFrame, title: str = "") -> plt.Figure:
    """Perplexity per frequency bucket (log scale), one panel per dataset, hue = configuration."""
    sns.set_theme(style="whitegrid")
    datasets = datasets_of(table)
    n_configs = table["config"].nunique()
    figure, axes = plt.subplots(1, len(datasets), figsize=(5.5 * len(datasets), 3.5 + 0.25 * n_configs), squeeze=False)
    for axis, dataset in zip(axes[0], datasets):
        sns.barplot(data=table[table["dataset"] == dataset], x="bucket", y="ppl", hue="config", errorbar=None,
                    order=[b[2] for b in BUCKETS], ax=axis)
        axis.set(yscale="log", title=dataset, xlabel="training count of the target word", ylabel="perplexity")
        axis.get_legend().remove()
    # One legend below the panels: the config names are long.
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=1, frameon=False)
    figure.suptitle(title)
    figure.tight_layout(rect=(0, min(0.5, 0.07 * n_configs), 1, 1))
    return figure


__all__ = ["BUCKETS", "CONFIG_SETS", "PROPOSED", "STANDARD", "bucket_losses", "claims", "datasets_of", "grid_configs",
           "mean_ppl", "rare_word_buckets", "rare_word_figure", "rare_word_table", "run_grid", "section",
           "section_figure", "table_row"]
