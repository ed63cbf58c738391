"""Tables, figures and claim checks of notebook 01_embedding_init (Welch et al. 2020, Table 1).

The notebook stays thin: it calls ``grid_configs`` (which runs to make), ``run_grid`` (the tidy
Table 1 DataFrame), ``section_figure`` (sections (a)-(d)), ``rare_word_table`` (loss by training-frequency
bucket) and ``claims`` (the paper's Section 2 claims through the one rule of :mod:`lmstudy.claims`: each a
comparison of two configurations, paired over the seeds they share, via :mod:`lmstudy.welch.claim_rows`);
``published_claims`` rebuilds the published claims table from the committed CSVs with that same ``claims``.

Our reading of the paper's sections (Section 2): (a) frozen random output embeddings, (b) frozen
pretrained output embeddings, (c) frozen random input embeddings, (d) everything else. A config
can fit several; we take the first that applies, in that order (tied frozen random -> (a)).

The claims, as the paper words them, are listed in :func:`claims`' docstring: 1-4 are about the UNK'd setting
and are checked on each UNK'd dataset (PTB ``Std`` and ``Std-news``, the news corpus with UNKs, which differs
from ``Rare`` only in UNK replacement), 5-7 on ``Rare``. A claim about every pair of configurations is one row
per pair, each with its own verdict: the configurations outside the paper's Section 3 six ran with seed 0 only,
so their pairs read ``one seed`` (the numbers shown, no interval).

Rare-word analysis: per-token losses of the best weights (``load_weights(..., "best")``, the weights
the reported test perplexity uses), bucketed by the target word's count in the training stream (0,
1-5, 6-50, 51+); the buckets of each config are cached as a run of their own.
"""

from __future__ import annotations

import math
from dataclasses import asdict, replace

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
import torch

from lmstudy.claims import ClaimRow, by_seed, claims_table, differences
from lmstudy.paths import figures_dir
from lmstudy.plots import strip_points
from lmstudy.welch.claim_rows import compare, loss_threshold, practical_threshold, show
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
    evaluated, which moves every configuration alike (the sample effect dominated at the cpu preset: study 01's page
    in docs/)."""
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


# The paper's Table 1 (Std / Rare validation perplexity; its configuration icons did not survive the text copy, so
# only what the text names can be placed: "ours" is the Rare column's best, 61.6 / 97.1).
PAPER_OURS = {"Std": 61.6, "Rare": 97.1}
PAPER_RARE_TOP3 = (97.1, 98.1, 98.5)
RARE_COUNT = 5  # "rare": seen at most 5 times in training (the paper's Table 4 and its largest cutoff K)
V1_STD_NOTE = ("v1 splits: Std (PTB) column of the v1 run (git a5d41b7, d9fb179; "
               "figures/01_embedding_init_table1_splits_v1.csv); the study command now trains on the v2 splits")


def claims(table: pd.DataFrame, rare_words: pd.DataFrame | None = None,
           notes: dict[str, str] | None = None) -> pd.DataFrame:
    """The paper's Section 2 claims on ``table`` (``run_grid``'s DataFrame), through :mod:`lmstudy.claims`.

    Each claim is a comparison of validation perplexities per seed (:func:`lmstudy.welch.claim_rows.compare`:
    paired over shared seeds; a configuration that ran with seed 0 only gives a ``one seed`` row, its numbers
    still shown). Claims about "every pair" are one row per pair, so each pair gets its own verdict:

    1. "Pretrained embeddings are better in all but one case": every pair differing only in initialisation;
    2. "it is always better to freeze [the pretrained input embeddings]": untied pairs (freezing a tied matrix
       freezes the output too, not "all else equal");
    3. "Freezing the output embeddings consistently leads to poor performance": the best frozen-output
       configuration against the worst one that does not freeze the output;
    4. "support the practise of tying when the input embeddings are random, but the benefit is half as large
       when they are pretrained": (a) tied vs untied random; (b) the tying gain with random minus with pretrained;
    5. Rare: "Our proposed approach ... has the best results": ours against the best other (by mean);
    6. Rare: "the top three models not tying": the best tied configuration against the third-best untied one;
    7. "the improvement comes from improved representation of rare words" (with ``rare_words``, the
       :func:`rare_word_table` of standard vs ours): the per-token loss gain of ours over standard on target
       words seen at most :data:`RARE_COUNT` times in training minus the gain on the others.

    Claims 1-4 run on every UNK'd dataset (``Std``, ``Std-news``), 5-7 on ``Rare``. ``notes``: a note per
    dataset (e.g. the v1 splits of the published Std column), copied into its rows."""
    notes = notes or {}
    std_datasets = [d for d in datasets_of(table) if d != "Rare"] or ["Std"]
    rows: list[ClaimRow] = []

    def ppl(name: str, dataset: str) -> pd.Series:
        return by_seed(table, "valid_ppl", config=name, dataset=dataset)

    def names(dataset: str) -> list[str]:
        return sorted(table.loc[table["dataset"] == dataset, "config"].unique())

    def mean(name: str, dataset: str) -> float:
        return float(ppl(name, dataset).mean())

    def compare_configs(claim: str, claimed: str, other: str, dataset: str, paper: str) -> ClaimRow:
        return compare(claim, ppl(claimed, dataset), ppl(other, dataset), names=(claimed, other), paper=paper,
                       dataset=dataset, note=notes.get(dataset, ""))

    def not_run(claim: str, dataset: str, why: str, paper: str) -> ClaimRow:
        return ClaimRow.not_run(claim, why, paper=paper, dataset=dataset)

    pair_claims = (
        ("1. Pretrained embeddings are better in all but one case", _pretrained_version,
         "better in all pairs but one, which differs by 0.5 (Std)", "no random/pretrained pair in the grid"),
        ("2. As for freezing the pretrained input embeddings, it is always better to freeze them",
         _frozen_input_version, "always better (Std)", "no trainable/frozen pretrained-input pair in the grid"))
    for claim, change, paper, missing in pair_claims:
        for d in std_datasets:
            pairs = _pairs(names(d), change)
            rows += [compare_configs(f"{claim} (pair: {a})", b, a, d, paper) for a, b in pairs]
            if not pairs:
                rows.append(not_run(claim, d, missing, paper))

    claim = "3. Freezing the output embeddings consistently leads to poor performance"
    paper = "frozen output, sections (a), (b): 90.7-680; the others (c), (d): 59.8-82.2 (Std)"
    for d in std_datasets:
        frozen_out = [n for n in names(d) if EmbeddingConfig.from_name(n).output_frozen]
        other = [n for n in names(d) if not EmbeddingConfig.from_name(n).output_frozen]
        if frozen_out and other:
            best_frozen = min(frozen_out, key=lambda n: mean(n, d))
            worst_other = max(other, key=lambda n: mean(n, d))
            rows.append(compare_configs(f"{claim} (the best frozen-output configuration is worse than the worst "
                                        "other)", worst_other, best_frozen, d, paper))
        else:
            rows.append(not_run(claim, d, "needs configs with and without frozen output embeddings", paper))

    untied = "untied/in=random,trainable/out=random,trainable"
    tied_pre, untied_pre = "tied/pretrained,trainable", "untied/in=pretrained,trainable/out=pretrained,trainable"
    claim = "4. The results do support the practise of tying when the input embeddings are random"
    paper = "tying helps with random input embeddings (Std; rows not placeable: icons lost)"
    claim_b = "4. ... but the benefit [of tying] is half as large when they are pretrained"
    paper_b = "the tying gain with pretrained embeddings is half that with random ones (Std)"
    for d in std_datasets:
        present = names(d)
        if STANDARD not in present or untied not in present:
            rows += [not_run(claim, d, f"needs {STANDARD} and {untied}", paper),
                     not_run(claim_b, d, f"needs {STANDARD} and {untied}", paper_b)]
            continue
        rows.append(compare_configs(claim, STANDARD, untied, d, paper))
        if tied_pre in present and untied_pre in present:
            gain_random = (ppl(untied, d) - ppl(STANDARD, d)).dropna()  # per seed, > 0: tying helps
            gain_pretrained = (ppl(untied_pre, d) - ppl(tied_pre, d)).dropna()
            seeds = gain_random.index.intersection(gain_pretrained.index)  # the seeds all four ran
            gain_random, gain_pretrained = gain_random[seeds], gain_pretrained[seeds]
            rows.append(ClaimRow(
                claim_b, differences(gain_random - gain_pretrained), paper=paper_b, dataset=d, digits=1,
                note=notes.get(d, ""), negligible=practical_threshold(mean(STANDARD, d), mean(tied_pre, d)),
                ours=f"tying gain on the seeds all four ran ({', '.join(map(str, seeds))}): random "
                     f"{show(gain_random)}, pretrained {show(gain_pretrained)}"))
        else:
            rows.append(not_run(claim_b, d, f"needs {tied_pre} and {untied_pre}", paper_b))

    rare = sorted(names("Rare"), key=lambda n: mean(n, "Rare"))
    claim = "5. Our proposed approach, using pretrained untied embeddings and freezing the input, has the best results"
    paper = f"ours {PAPER_OURS['Rare']} on Rare, the best (Std: {PAPER_OURS['Std']}); next best 98.1"
    if PROPOSED in rare and len(rare) > 1:
        best_other = next(n for n in rare if n != PROPOSED)
        row = compare_configs(f"{claim} (Rare)", PROPOSED, best_other, "Rare", paper)
        rows.append(replace(row, note=_joined(f"ours ranks {rare.index(PROPOSED) + 1} of {len(rare)} by mean",
                                                 notes.get("Rare", ""))))
    else:
        rows.append(not_run(f"{claim} (Rare)", "Rare", f"needs {PROPOSED} and another config on Rare", paper))

    claim = "6. Tying is also no longer the best approach, with the top three models not tying (Rare)"
    paper = f"top three on Rare ({', '.join(map(str, PAPER_RARE_TOP3))}) all untied"
    tied = [n for n in rare if EmbeddingConfig.from_name(n).tied]
    untied_rare = [n for n in rare if not EmbeddingConfig.from_name(n).tied]
    if tied and len(untied_rare) >= 3:
        row = compare_configs(claim, untied_rare[2], tied[0], "Rare", paper)  # the third-best untied vs best tied
        rows.append(replace(row, note=_joined(f"top three by mean: {', '.join(rare[:3])}", notes.get("Rare", ""))))
    else:
        rows.append(not_run(claim, "Rare", "needs a tied and three untied configurations on Rare", paper))

    claim = "7. We find that the improvement comes from improved representation of rare words"
    paper = "Section 1 and 5; the evidence is Table 3 (notebook 01b)"
    if rare_words is not None and {STANDARD, PROPOSED} <= set(rare_words["config"]) and "Rare" in set(
            rare_words["dataset"]):
        rows.append(_rare_word_row(claim, rare_words[rare_words["dataset"] == "Rare"], paper,
                                   notes.get("Rare", "")))
    else:
        rows.append(not_run(claim, "Rare", "needs the rare-word buckets of standard and ours on Rare", paper))
    return claims_table(rows)


def _joined(*parts: str) -> str:
    return "; ".join(part for part in parts if part)


def _rare_word_row(claim: str, buckets: pd.DataFrame, paper: str, note: str) -> ClaimRow:
    """Claim 7 from :func:`rare_word_table` rows (one dataset): per seed, the loss gain of ours over standard
    (nats per token, > 0: ours better) on target words seen at most :data:`RARE_COUNT` times in training, minus
    the gain on the words seen more often. > 0: the gain is larger on rare words, the paper's reading."""
    rare_labels = [label for low, high, label in BUCKETS if high is not None and high <= RARE_COUNT]

    def loss(config: str, rare: bool) -> pd.Series:
        part = buckets[(buckets["config"] == config) & (buckets["bucket"].isin(rare_labels) == rare)]
        weighted = (part["loss"] * part["tokens"]).groupby(part["seed"]).sum()
        return weighted / part.groupby("seed")["tokens"].sum()

    gain_rare = loss(STANDARD, True) - loss(PROPOSED, True)
    gain_frequent = loss(STANDARD, False) - loss(PROPOSED, False)
    share = buckets[buckets["config"] == STANDARD].groupby("seed").apply(
        lambda b: 100 * b.loc[b["bucket"].isin(rare_labels), "tokens"].sum() / b["tokens"].sum(),
        include_groups=False)
    ours = (f"loss gain of ours over standard (nats/token): words seen <= {RARE_COUNT} times in training "
            f"{show(gain_rare, 3)} ({show(share)}% of test tokens), the others {show(gain_frequent, 3)}")
    return ClaimRow(claim, differences((gain_rare - gain_frequent).dropna()), paper=paper, ours=ours,
                    negligible=loss_threshold(), dataset="Rare", digits=3,
                    note=_joined("test tokens of seed 0's best weights (figures/01_embedding_init_rare_words.csv)",
                                 note))


def published_claims() -> pd.DataFrame:
    """The published claims of notebook 01 from committed files only (no training): Table 1 on the v2 splits
    (``figures/01_embedding_init_table1.csv``: Std-news, Rare), the Std (PTB) column of the v1 run
    (``figures/01_embedding_init_table1_splits_v1.csv``, noted as such: PTB was not rerun on v2) and the rare-word
    buckets (``figures/01_embedding_init_rare_words.csv``), through :func:`claims`."""
    figures = figures_dir()
    table = pd.read_csv(figures / "01_embedding_init_table1.csv")
    v1 = pd.read_csv(figures / "01_embedding_init_table1_splits_v1.csv")
    table = pd.concat([v1[v1["dataset"] == "Std"], table], ignore_index=True)
    rare_words = pd.read_csv(figures / "01_embedding_init_rare_words.csv")
    return claims(table, rare_words, notes={"Std": V1_STD_NOTE})


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
