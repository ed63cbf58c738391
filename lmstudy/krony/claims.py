"""The Krony study's claims, as the paper states them, through :mod:`lmstudy.claims`' one rule: on our base
(:func:`claims`, the published table rebuilt from the committed cpu tables by :func:`published_claims`) and on
SmolLM2 (:func:`smol_claims`, from ``results/krony_smollm2`` by :func:`published_smol_claims`)."""

from __future__ import annotations

import math

import pandas as pd

from lmstudy.claims import ClaimRow, Effect, Spread, by_seed, claims_table, differences, trend_rows, unpaired
from lmstudy.krony.config import LABELS, STUDY_NOTEBOOK, KronyConfig
from lmstudy.krony.study_tables import best_init
from lmstudy.paths import REPO_ROOT, figures_dir
from lmstudy.scales import preset

# The paper's Table 4 (perplexity, GPT-2's tokenizer, the paper's own evaluation; "" where it has no number).
PAPER_TABLE4 = pd.DataFrame([
    {"parameters": "124M", "model": "GPT2", "wikitext103_ppl": 29.16, "wikitext2_ppl": 24.67, "lambada_ppl": 45.28},
    {"parameters": "82M", "model": "DistilGPT2", "wikitext103_ppl": 44.53, "wikitext2_ppl": 36.48,
     "lambada_ppl": 76.00},
    {"parameters": "81M", "model": "KronyPT-81M-1350", "wikitext103_ppl": 41.98, "wikitext2_ppl": 34.99,
     "lambada_ppl": math.nan},
    {"parameters": "81M", "model": "KronyPT-81M-3950", "wikitext103_ppl": math.nan, "wikitext2_ppl": math.nan,
     "lambada_ppl": 64.92},
])

# The practical thresholds, in % of the loss of the side compared against (bits per byte, or log perplexity:
# for one text and one tokenizer the two are proportional, so the same share reads both). Both come from the
# paper's smallest reported win, Krony-PT-81M over DistilGPT2 on WikiText-2 (34.99 vs 36.48 perplexity, Table 4):
# 1.16% of DistilGPT2's log perplexity.
SMOL_RESULTS = REPO_ROOT / "results" / "krony_smollm2"  # `python -m lmstudy krony smol --scale cpu`'s tables
NEGLIGIBLE_PERCENT = 0.1  # a tenth of that win: a real difference below it is negligible
SIMILAR_PERCENT = 1.0  # "do not help much", "no benefits": within ± 1%, just under the smallest win the paper reports


def _one(table: pd.DataFrame, **where) -> pd.Series | None:
    """The one row of ``table`` matching ``where`` (column = value), or None."""
    mask = pd.Series(True, index=table.index)
    for column, value in where.items():
        mask &= table[column] == value
    return table[mask].iloc[0] if mask.any() else None


def _losses(values: pd.Series, log: bool) -> pd.Series:
    """``values`` by seed without NaN, as losses: ``log``: perplexities, as log perplexities."""
    values = values.dropna().astype(float)
    return values.map(math.log) if log else values


def percent_ahead(claimed: pd.Series, other: pd.Series, log: bool = False) -> pd.Series:
    """Per seed (the seeds both sides have): how far ``claimed``'s loss is below ``other``'s, in % of ``other``'s:
    ``100 * (other - claimed) / other`` (positive: ``claimed`` better). ``log``: the values are perplexities,
    compared as log perplexities (the loss they come from)."""
    claimed, other = _losses(claimed, log), _losses(other, log)
    shared = claimed.index.intersection(other.index)
    return 100 * (other[shared] - claimed[shared]) / other[shared]


def percent_effect(claimed: pd.Series, other: pd.Series, log: bool = False) -> Effect:
    """:func:`percent_ahead` as an :class:`lmstudy.claims.Effect`, by the rule of :func:`lmstudy.claims.paired`:
    the paired t interval on two or more shared seeds, else Welch's t on the two sides (each in % of ``other``'s
    mean), which with a single value on a side gives the difference alone (*one seed*)."""
    per_seed = percent_ahead(claimed, other, log)
    if len(per_seed) >= 2:
        return differences(per_seed)
    claimed, other = _losses(claimed, log), _losses(other, log)
    scale = 100 / other.mean() if len(other) else math.nan
    return unpaired((claimed * scale).tolist(), (other * scale).tolist(), "lower")


def _values(table: pd.DataFrame, metric: str, seed: int, **where) -> pd.Series:
    """``metric`` of the one row of a one-seed table (the grid, Table 6) matching ``where``, as values by seed
    (``seed``: the seed it ran); empty when there is no such row."""
    row = _one(table, **where)
    return pd.Series({seed: row[metric]}, dtype=float) if row is not None else pd.Series(dtype=float)


def _compare(claim: str, claimed: pd.Series, other: pd.Series, names: tuple[str, str], unit: str, *,
             log: bool = False, similar: bool = False, value_digits: int = 4, **fields) -> ClaimRow:
    """One claim from two sides' values by seed: ``claimed`` (the side the paper says is better, or no worse)
    against ``other``; the effect in % of ``other``'s loss (:func:`percent_effect`); ``similar``: the claim is an
    equivalence (within ± ``SIMILAR_PERCENT``), else directional (``NEGLIGIBLE_PERCENT``). ``value_digits``: of
    the two sides' values in ``ours``; ``fields``: the :class:`lmstudy.claims.ClaimRow`'s others."""
    if claimed.dropna().empty or other.dropna().empty:
        note = fields.pop("note", "")
        return ClaimRow.not_run(claim, f"needs the rows of {names[0]} and {names[1]}" + (note and f"; {note}"),
                                **fields)
    ours = (f"{names[0]} {Spread.of(claimed).format(value_digits)} vs {names[1]} "
            f"{Spread.of(other).format(value_digits)} {unit}"
            + ("" if len(claimed.dropna()) > 1 else f" (seed {claimed.dropna().index[0]})"))
    return ClaimRow(claim, percent_effect(claimed, other, log), ours=ours,
                    negligible=0.0 if similar else NEGLIGIBLE_PERCENT,
                    similar_within=SIMILAR_PERCENT if similar else None, **fields)


def _trend_claim(claim: str, trend: pd.DataFrame, kind: str, metric: str, unit: str, *, log: bool = False,
                 value_digits: int = 4, **fields) -> list[ClaimRow]:
    """Krony against the ``kind`` baseline on ``metric`` at every base checkpoint of ``trend``, per seed (paired:
    a seed is the same continued-training batches), and the trend of the effect over the base's tokens."""
    levels = [int(tokens) for tokens in sorted(trend["base_tokens"].unique())]
    values, texts = [], []
    for tokens in levels:
        krony, other = (by_seed(trend, metric, model=LABELS[side], base_tokens=tokens) for side in ("krony", kind))
        values.append(percent_ahead(krony, other, log).tolist())
        texts.append(f"Krony {Spread.of(krony).format(value_digits)} vs {LABELS[kind]} "
                     f"{Spread.of(other).format(value_digits)} {unit}")
    return trend_rows(claim, levels, values, ours=texts, negligible=NEGLIGIBLE_PERCENT, **fields)


def _paper_table4(column: str, krony: str, what: str) -> str:
    """The paper's Table 4 numbers of ``krony`` and DistilGPT2 on ``column``, with the effect in our unit."""
    table = PAPER_TABLE4.set_index("model")[column]
    effect = percent_ahead(pd.Series([table[krony]]), pd.Series([table["DistilGPT2"]]), log=True).iloc[0]
    return (f"{krony} {table[krony]:.2f} vs DistilGPT2 {table['DistilGPT2']:.2f} {what} perplexity (Table 4): "
            f"{effect:+.2f}%")


INIT_WORDINGS = {"van_loan": "Van Loan init passes on the pre-training ('VL is not a random initialization', Sec. 5.2)",
                 "prune": "The pruning-based initialization (Sec. 3.4.2) passes on the pre-training"}


def init_rows(grid: pd.DataFrame, classes, inits, seed: int) -> list[ClaimRow]:
    """Van Loan and pruning each against random init, per class, from a one-seed grid (``seed``)."""
    final = grid[grid["model"] == LABELS["krony"]]
    return [_compare(f"{INIT_WORDINGS[init]}: beats random init, {size_class} class",
                     _values(final, "wikitext_bpb", seed, **{"class": size_class, "init": init}),
                     _values(final, "wikitext_bpb", seed, **{"class": size_class, "init": "random"}), (init, "random"),
                     "bits/byte", dataset="WikiText-2 test", paper="no number",
                     note="the grid ran seed 0 only (the trend's other seeds are of one init: random has none to pair)")
            for size_class in classes
            for init in [init for init in ("van_loan", "prune") if init in inits and "random" in inits]]


def table6_claim_rows(table6_rows: pd.DataFrame, factors, size_class: str, seed: int, factors_note: str
                      ) -> list[ClaimRow]:
    """Table 6's two sentences (Sec. 4.4) at ``size_class`` from its one-seed runs: every factor count against 1
    (an equivalence), and scalars against none at every factor count. ``factors_note``: what the paper compared."""
    rows = [_compare(
        f"Adding multiple factors do not help much (Sec. 4.4): {n} factors vs 1, {size_class} class",
        _values(table6_rows, "wikitext_bpb", seed, factors=n, scalars=False),
        _values(table6_rows, "wikitext_bpb", seed, factors=1, scalars=False), (f"{n} factors", "1"),
        "bits/byte", similar=True, dataset="WikiText-2 test", paper="Table 6 left empty",
        note=f"equivalence within ± {SIMILAR_PERCENT:g}% of 1 factor's bits per byte; Van Loan init, no "
             f"scalars; {factors_note}") for n in factors if n > 1]
    rows += [_compare(
        f"Adding scalars can during training improve model performance (Sec. 4.4): {n} factor(s), {size_class} class",
        _values(table6_rows, "wikitext_bpb", seed, factors=n, scalars=True),
        _values(table6_rows, "wikitext_bpb", seed, factors=n, scalars=False), ("scalars", "none"), "bits/byte",
        dataset="WikiText-2 test", paper="Table 6 left empty", note="Van Loan init; Table 6 ran one seed", digits=3)
        for n in factors]
    return rows


def claims(config: KronyConfig, grid: pd.DataFrame, table6_rows: pd.DataFrame, trend: pd.DataFrame) -> pd.DataFrame:
    """The paper's claims, as the paper states them, through :mod:`lmstudy.claims`' rule.

    Every effect is in % of the loss of the side compared against (bits per byte; LAMBADA's target
    perplexities as log perplexities), positive = the paper's direction; thresholds ``NEGLIGIBLE_PERCENT`` (0.1%)
    and, for the two "not much" claims, the equivalence margin ``SIMILAR_PERCENT`` (± 1%): both from the
    paper's smallest reported win, 1.16% (module constants).

    - "Our 81M model variant outperforms distilgpt2 ... on all standard language modeling datasets" (Abstract,
      Sec. 4.3): the ``compare_class`` Krony model against the distilled model (the DistilGPT2 analogue) from
      every base checkpoint, per seed (paired), with the trend over the base's training tokens, on WikiText-2
      test (bits per byte) and LAMBADA (target perplexity); WikiText-103 is not run (its test text is WikiText-2's).
    - "A fair comparison would be to initialize all the parameters ... with random values" (Sec. 5.2): the same
      against the scratch model (random init, the same tokens), WikiText-2.
    - "Empirical evidence shows no benefits [of distillation] compared to only vanilla supervised learning"
      (Sec. 1): not run. Our shared-base runs have no model trained both with and without distillation; the
      old-base study (git tag ``legacy-old-base``) had one such pair, one seed, and was retired with that base.
    - Van Loan and pruning initialisation pass on the pre-training (Sec. 3.4, 5.2): each beats random init, per
      class (the grid: seed 0).
    - "Adding multiple factors do not help much, but adding scalars can during training improve model
      performance" (Sec. 4.4, Table 6 left empty): 2 and 4 factors against 1 (equivalence) and scalars against none
      at each factor count (``table6_class``, Van Loan, seed 0).
    - "The scalers in the case of 4 factors ... always do converge to around 4" (Sec. 4.5): not run.

    The grid and Table 6 ran seed 0 only: their rows read *one seed* (no interval, no verdict). The trend's Krony
    init is the grid's lowest validation loss (:func:`best_init`); its rows' note says which and what test bits
    per byte would have picked.
    """
    seed, size = config.seeds[0], config.compare_class
    rows: list[ClaimRow] = []

    # The central claim, from every checkpoint of the base.
    krony_init = sorted(set(trend.loc[trend["model"] == LABELS["krony"], "init"]))
    by_validation, by_test = best_init(grid, size), best_init(grid, size, metric="wikitext_bpb")
    krony = grid[(grid["model"] == LABELS["krony"]) & (grid["class"] == size)].set_index("init")["best_val_loss"]
    losses = ", ".join(f"{init} {loss:.3f}" for init, loss in krony.sort_values().items())
    chosen = (f"Krony init {', '.join(krony_init)}: the grid's lowest validation loss (nats/token, seed 0: {losses}); "
              + ("test bits per byte picks the same" if by_test == by_validation else f"test bits per byte would "
                 f"pick {by_test}"))
    if krony_init != [by_validation]:
        chosen += f"; the trend ran {', '.join(krony_init)}, not the validation choice {by_validation}: rerun it"
    outperforms = f"Our {size} model variant outperforms distilgpt2 on all standard language modeling datasets"
    rows += _trend_claim(outperforms, trend, "distilled", "wikitext_bpb", "bits/byte",
                         paper=_paper_table4("wikitext2_ppl", "KronyPT-81M-1350", "WikiText-2"),
                         dataset="WikiText-2 test", note=f"effect: % of distilled's bits per byte. {chosen}")
    rows += _trend_claim(outperforms, trend, "distilled", "lambada_ppl", "target ppl", log=True, value_digits=1,
                         paper=_paper_table4("lambada_ppl", "KronyPT-81M-3950", "LAMBADA"), dataset="LAMBADA",
                         note="effect: % of distilled's log perplexity of the last word (per token, "
                              f"{config.lambada_examples or 5153} passages); the paper's LAMBADA measure is not stated")
    rows.append(ClaimRow.not_run(
        outperforms, "the protocol scores WikiText-2 test, whose articles are WikiText-103's test set too; the "
        "paper's two numbers differ by its evaluation, which we do not reproduce", dataset="WikiText-103",
        paper=_paper_table4("wikitext103_ppl", "KronyPT-81M-1350", "WikiText-103")))
    rows += _trend_claim("A fair comparison would be to initialize all the parameters of the new compressed model "
                         "with random values (Sec. 5.2): Krony against that model, the same tokens", trend, "scratch",
                         "wikitext_bpb", "bits/byte", dataset="WikiText-2 test",
                         note="effect: % of the scratch model's bits per byte; the paper argues it, does not run it")

    # Distillation: no run of ours trains one model both with and without it.
    no_distillation = ("Distillation: empirical evidence shows no benefits compared to only vanilla supervised "
                       "learning")
    for dataset in ("WikiText-2 test", "LAMBADA"):
        rows.append(ClaimRow.not_run(
            no_distillation, "our shared-base runs have no model trained both with and without distillation; the "
            "old-base study (git tag legacy-old-base) had one such pair, one seed", dataset=dataset,
            paper="no number"))

    rows += init_rows(grid, config.classes, config.inits, seed)
    rows += table6_claim_rows(table6_rows, config.table6_factors, config.table6_class, seed,
                              "the paper compares 4 factors at 92.2M with its 96M class")
    rows.append(ClaimRow.not_run(
        "The scalers in the case of 4 factors, no matter what the initialization is, always do converge to around 4 "
        "(Sec. 4.5)", "the archived runs keep metrics and logs, not weights, and the log does not record the scalars; "
        "reading them needs the 4-factor run retrained with its weights kept", paper="about 4"))
    return claims_table(rows)


def published_claims() -> pd.DataFrame:
    """The published claims table (``figures/03_krony_claims.csv``, ``python -m lmstudy claims 03``) from the
    committed tables of the cpu run only (``figures/03_krony_grid.csv``, ``_table6.csv``, ``_trend.csv``, written
    from the archived runs ``results/runs/03_krony_shared``):
    :func:`claims` with the cpu preset, nothing trained or loaded."""
    figures = figures_dir()
    grid, rows6, trend = (pd.read_csv(figures / f"03_krony_{name}.csv") for name in ("grid", "table6", "trend"))
    return claims(KronyConfig(**preset(STUDY_NOTEBOOK, "cpu")), grid, rows6, trend)


OUTPERFORMS = "Our {size} model variant outperforms distilgpt2 on all standard language modeling datasets"
NO_DISTILLATION = "Distillation: empirical evidence shows no benefits compared to only vanilla supervised learning"


def smol_claims(central: pd.DataFrame, grid: pd.DataFrame, table6_rows: pd.DataFrame,
                compare_class: str = "81M") -> pd.DataFrame:
    """The paper's claims on SmolLM2 (``lmstudy.krony.smol``'s tables: ``central`` with its seeds, ``grid`` and
    ``table6_rows`` of seed 0), through the same rule and thresholds as :func:`claims`.

    - The central sentence at ``compare_class``: Krony (the init of lowest validation loss at seed 0) against the
      distilled model, paired by seed, on WikiText-2 (bits per byte) and LAMBADA (target perplexity); at the other
      classes from the grid (one seed; the paper compares its 81M class only).
    - "No benefits" of distillation over vanilla supervised learning (an equivalence within ± ``SIMILAR_PERCENT``):
      the narrowed model trained without the teacher against the distilled one, per class.
    - Initialisation against random, per class (:func:`init_rows`), and Table 6 (:func:`table6_claim_rows`) at the
      class of ``table6_rows``.
    - The scalars converging to 4 with 4 factors: not run (the 81M class's shape takes 3 factors).
    """
    rows: list[ClaimRow] = []
    classes = sorted(set(grid["class"].dropna()) | {compare_class}, key=lambda c: -float(c.rstrip("M")))
    for size_class in classes:
        table = central if size_class == compare_class else grid
        part = table[table["class"] == size_class]
        seeded = f"{len(set(part['seed']))} seeds, paired" if size_class == compare_class else "seed 0 (the grid)"
        chosen = best_init(part[part["seed"] == 0], size_class) if (part["model"] == LABELS["krony"]).any() else None
        sides = {kind: part[(part["model"] == LABELS[kind]) & ((part["init"] == chosen) if kind == "krony" else True)
                            ].set_index("seed") for kind in ("krony", "distilled", "narrowed")}
        paper = {"WikiText-2 test": _paper_table4("wikitext2_ppl", "KronyPT-81M-1350", "WikiText-2"),
                 "LAMBADA": _paper_table4("lambada_ppl", "KronyPT-81M-3950", "LAMBADA")}
        if size_class != compare_class:
            paper = {dataset: "the paper compares its 81M class only" for dataset in paper}
        for dataset, metric, unit, log in (("WikiText-2 test", "wikitext_bpb", "bits/byte", False),
                                           ("LAMBADA", "lambada_ppl", "target ppl", True)):
            rows.append(_compare(
                OUTPERFORMS.format(size=size_class), sides["krony"].get(metric, pd.Series(dtype=float)),
                sides["distilled"].get(metric, pd.Series(dtype=float)), ("Krony", "distilled"), unit, log=log,
                value_digits=1 if log else 4, dataset=dataset, paper=paper[dataset],
                note=f"SmolLM2 compressed to the {size_class} class; Krony init {chosen} (lowest validation loss); "
                     f"{seeded}; effect: % of distilled's {'log perplexity' if log else 'bits per byte'}"))
        rows.append(_compare(
            f"{NO_DISTILLATION}: {size_class} class", sides["narrowed"].get("wikitext_bpb", pd.Series(dtype=float)),
            sides["distilled"].get("wikitext_bpb", pd.Series(dtype=float)), ("vanilla", "distilled"), "bits/byte",
            similar=True, dataset="WikiText-2 test", paper="no number",
            note=f"vanilla: the distilled model's start (narrowed MLPs) trained with cross-entropy alone; {seeded}; "
                 f"equivalence within ± {SIMILAR_PERCENT:g}% of distilled's bits per byte"))
    rows += init_rows(grid, classes, ("van_loan", "prune", "random"), 0)
    table6_class = str(table6_rows["class"].iloc[0]) if len(table6_rows) else compare_class
    factors = sorted(int(n) for n in table6_rows["factors"].dropna().unique()) if len(table6_rows) else [1]
    rows += table6_claim_rows(table6_rows, factors, table6_class, 0,
                              f"SmolLM2's {table6_class} class takes {max(factors)} factors of its shape at most")
    rows.append(ClaimRow.not_run(
        "The scalers in the case of 4 factors, no matter what the initialization is, always do converge to around 4 "
        "(Sec. 4.5)", f"Table 6 on SmolLM2 runs 1-{max(factors)} factors at the {table6_class} class (4 would exceed "
        "the class's size)", paper="about 4"))
    return claims_table(rows)


def published_smol_claims() -> pd.DataFrame:
    """``figures/03_krony_smollm2_claims.csv`` (``python -m lmstudy claims 03-smollm2``): :func:`smol_claims` on the
    committed ``results/krony_smollm2`` tables (a part not run yet gives *not run* rows), nothing trained."""
    central = pd.read_csv(SMOL_RESULTS / "central.csv")
    parts = {name: pd.read_csv(SMOL_RESULTS / f"{name}.csv") if (SMOL_RESULTS / f"{name}.csv").is_file()
             else central.iloc[0:0] for name in ("grid", "table6")}
    return smol_claims(central, parts["grid"], parts["table6"])
