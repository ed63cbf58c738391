"""The entity study's claims (:func:`claims`) and the ablation table (:func:`ablation_table`): every verdict
through the one rule of :mod:`lmstudy.claims` (GPT2E against GPT2 paired by seed, 95% t interval; the practical
thresholds are stated in :func:`claims`); the trend's per-budget verdicts and direction through
:func:`lmstudy.claims.trend_rows` on :func:`trend_gaps`. :func:`published_claims` and :func:`published_ablation`
rebuild the published tables from the committed per-seed files (``python -m lmstudy claims 02``), without
training."""

from __future__ import annotations

import pandas as pd

from lmstudy.claims import ClaimRow, Spread, against, by_seed, claims_table, differences, paired, trend_rows, verdict
from lmstudy.entity.config import ABLATIONS, MODELS
from lmstudy.paired_gaps import paired_gaps
from lmstudy.paths import figures_dir

# The practical thresholds of the claims (lmstudy.claims.verdict's ``negligible`` / ``similar_within``; :func:`claims`
# says why each). RESOLUTION: a perplexity difference under 0.1% of the perplexity is negligible: paired per-seed
# differences of nearly identical models have a tiny std, so a consistent 0.07-point gap is clear of zero, but it is
# not a difference a reader would act on.
RESOLUTION = 0.001
SIMILAR_WITHIN_PCT = 2.0  # "similar perplexity": the 95% interval of the per-seed difference inside ±2% of GPT2's
SMALL_OVERHEAD_PCT = 10.0  # "a small computational cost": a training step under 10% longer than GPT2's
SIMILARITY_NEGLIGIBLE = 0.001  # cosine similarity (Table 4 gives 4 decimals; its smallest GPT2E gain is 0.0146)
F1_NEGLIGIBLE = 0.5  # F1 points (the paper's overall gain: +3)


def trend_gaps(trend: pd.DataFrame) -> pd.DataFrame:
    """Per (step, tokens, seed): ``entity_gap`` = GPT2E's test ppl with gold entities minus with null ones
    (negative: the entities help), ``model_gap`` = GPT2E's (gold) minus GPT2's (negative: GPT2E is better).
    Paired by seed (:func:`lmstudy.paired_gaps.paired_gaps`): one seed is the same batches for both models; GPT2E
    read with null entities is a third model of the long table."""
    gold = trend[["step", "tokens", "seed", "model", "test_ppl"]]
    null = trend[trend["model"] == "GPT2E"].assign(model=NULL_ENTITIES, test_ppl=lambda t: t["test_ppl_no_entities"])
    return paired_gaps(pd.concat([gold, null[gold.columns]]), ["step", "tokens"], "test_ppl",
                       {"entity_gap": ("GPT2E", NULL_ENTITIES), "model_gap": ("GPT2E", "GPT2")})


NULL_ENTITIES = "GPT2E (null entities)"  # trend_gaps' name for GPT2E read with every entity id null


def ablation_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per model of :func:`ablation_runs`: test ppl with gold and null entities, the entity gap (gold minus
    null), and against GPT2E the per-seed paired difference of the gold test ppl (positive: the variant is
    better) with its 95% interval and the verdict of the claim "the variant lowers test perplexity"
    (:func:`lmstudy.claims.verdict`; ``negligible``: under ``RESOLUTION``, 0.1%, of GPT2E's mean test ppl)."""
    runs = runs.assign(entity_gap=runs["test_ppl"] - runs["test_ppl_no_entities"])
    reference = by_seed(runs, "test_ppl", model="GPT2E")
    rows = []
    for name in ("GPT2E", *ABLATIONS):
        part = runs[runs["model"] == name]
        row = {"model": name, "change": ABLATIONS.get(name, "the paper's reading (reference)"),
               "seeds": len(part), **{column: Spread.of(part[column]).format(2) for column in (
                   "test_ppl", "test_ppl_no_entities", "entity_gap")}}
        if name != "GPT2E":
            advantage = paired(by_seed(runs, "test_ppl", model=name), reference, better="lower")
            row.update(vs_gpt2e=advantage.format(4), verdict=verdict(advantage, RESOLUTION * reference.mean()))
        rows.append(row)
    return pd.DataFrame(rows).rename(columns={
        "test_ppl": "test ppl (gold entities)", "test_ppl_no_entities": "test ppl (null entities)",
        "entity_gap": "gold - null", "vs_gpt2e": "GPT2E - variant (gold) [95% CI]",
        "verdict": "variant lowers test ppl"})


# The paper's numbers beside ours (Stylianou & Vlahavas 2020: Tables 2-5 and Section 5's text).
PAPER = {
    "in-domain": "validation ppl: GPT2 1.20, GPT2E 1.19 (CoNLL-2012, 1e5 steps)",
    "lambada": "GPT2 219.97, GPT2E 196.81 (Table 3)",
    "time": "GPT2 0.290 s, GPT2E 0.298 s a step: +2.7% (Titan V, batch 1; whole training +2%)",
    "NN*": "GPT2 0.6971, GPT2E 0.7117 (Table 4)",
    "PRP*": "GPT2 0.7928, GPT2E 0.8250 (Table 4)",
    "overall": "F1 GPT2 54%, GPT2E 57% (Table 5, OntoNotes types)",
    "PERSON": "F1 GPT2 48%, GPT2E 51.5% (Table 5)",
    "PRODUCT": "F1 GPT2 8%, GPT2E 23.5% (Table 5)",
    "entity use": "not reported (the premise of the design)",
    "trend": "no trend reported; after 1e5 steps validation ppl GPT2 1.20, GPT2E 1.19",
}
TEST_SET = "GUM + LitBank test"
NER_SET = "LitBank test (ACE types)"


def claims(runs: pd.DataFrame, times: pd.DataFrame, similarity: pd.DataFrame, ner: pd.DataFrame,
           trend: pd.DataFrame | None = None) -> pd.DataFrame:
    """The paper's claims in its words, the paper's numbers beside ours, each verdict by :mod:`lmstudy.claims`'
    rule (GPT2E against GPT2 paired by seed: one seed = the same batches for both), then the trend's claims per
    budget with their direction (:func:`trend_claims`).

    ``runs``: :func:`perplexity_runs` (best weights); ``times``: :func:`step_time_table`; ``similarity``:
    :func:`similarity_seeds`; ``ner``: :func:`ner_table`; ``trend``: :func:`trend_table`. The thresholds, and why:

    - "similar perplexity in-domain" is an equivalence claim: the per-seed difference in % of GPT2's test
      perplexity must lie, with its whole 95% interval, inside ``±SIMILAR_WITHIN_PCT`` (2%, the margin of the
      earlier code: it covers the paper's own gap, -0.8%, and is five times our seed std of 0.4%);
    - LAMBADA perplexity: a gain under ``RESOLUTION`` (0.1%) of the perplexity is negligible;
    - time: "a small computational cost" is read as a step under ``SMALL_OVERHEAD_PCT`` (10%) longer than
      GPT2's: over three times the paper's +2.7%, so implementation differences pass, but not a cost the design
      adds at our sizes (+23% FLOPs). The effect is the 10% bound minus our overhead, in percentage points; the
      timing is one run (medians of alternating steps, the per-step times not kept), so no interval;
    - Table 4 mention similarity: GPT2E with entities against GPT2, NN* and PRP*; a difference under
      ``SIMILARITY_NEGLIGIBLE`` (0.001 cosine) is negligible;
    - NER F1 (overall micro, and PERSON, our PER, alone): F1 points; under ``F1_NEGLIGIBLE`` (0.5) negligible.
      PRODUCT is not run: LitBank has no such type.
    """
    rows: list[ClaimRow] = []

    def sides(table: pd.DataFrame, column: str, scale: float = 1.0, **where) -> tuple[pd.Series, pd.Series]:
        return tuple(scale * by_seed(table, column, **where, model=name) for name in MODELS)

    def ours(gpt2: pd.Series, gpt2e: pd.Series, digits: int, unit: str = "") -> str:
        return f"GPT2 {Spread.of(gpt2).format(digits)}{unit}, GPT2E {Spread.of(gpt2e).format(digits)}{unit}"

    gpt2, gpt2e = sides(runs, "test_ppl")
    rows.append(ClaimRow(
        "GPT2E and GPT2 show similar performances (perplexity) in-domain", differences(100 * (gpt2 - gpt2e) / gpt2),
        paper=PAPER["in-domain"], ours=ours(gpt2, gpt2e, 2), similar_within=SIMILAR_WITHIN_PCT, dataset=TEST_SET,
        note=f"effect: GPT2 minus GPT2E in % of GPT2's ppl; similar = its interval inside ±{SIMILAR_WITHIN_PCT:g}%"))
    gpt2, gpt2e = sides(runs, "lambada_ppl")
    rows.append(ClaimRow(
        "GPT2E has a slight advantage in perplexity on LAMBADA", paired(gpt2e, gpt2, better="lower"),
        paper=PAPER["lambada"], ours=ours(gpt2, gpt2e, 2), negligible=RESOLUTION * pd.concat([gpt2, gpt2e]).mean(),
        dataset="LAMBADA (last word, null entities)", note="effect: GPT2 minus GPT2E, ppl points"))

    timed = times.set_index("model")
    overhead = float(timed.loc["GPT2E", "time overhead %"])
    rows.append(ClaimRow(
        "GPT2E has a small computational cost that translates into a slightly longer training time",
        against([overhead], SMALL_OVERHEAD_PCT, better="lower"), paper=PAPER["time"],
        ours=(f"GPT2 {timed.loc['GPT2', 's/step']:.3f} s, GPT2E {timed.loc['GPT2E', 's/step']:.3f} s a step: "
              f"{overhead:+.1f}% (FLOPs {float(timed.loc['GPT2E', 'FLOP overhead %']):+.1f}%; "
              f"{timed.loc['GPT2E', 'where']})"),
        dataset="GUM + LitBank train batches", digits=1,
        note=f"effect: the {SMALL_OVERHEAD_PCT:g}% bound of 'small' minus our overhead, percentage points; one "
             "timing run (medians of alternating steps; the per-step times were not kept), so no interval"))

    mentions = similarity[similarity["measure"] == "mention similarity"]
    for group in ("NN*", "PRP*"):
        gpt2 = by_seed(mentions, "value", group=group, setting="GPT2")
        gpt2e = by_seed(mentions, "value", group=group, setting="GPT2E with entities")
        rows.append(ClaimRow(
            f"GPT2E mentions have a higher average similarity than GPT2's ({group})",
            paired(gpt2e, gpt2, better="higher"), paper=PAPER[group], ours=ours(gpt2, gpt2e, 4),
            negligible=SIMILARITY_NEGLIGIBLE, dataset="GUM test", digits=4,
            note="GPT2E with entities at inference; effect: cosine, GPT2E minus GPT2"))

    ner_claims = {"overall": ("overall", "NER with GPT2E representations: a 3% F1 increase over GPT2",
                              "micro F1 over all types"),
                  "PERSON": ("PER", "PERSON: one of the greatest F1 increases with GPT2E", "our type PER")}
    for key, (label, claim, what) in ner_claims.items():
        gpt2, gpt2e = sides(ner, "f1", 100.0, type=label)
        rows.append(ClaimRow(claim, paired(gpt2e, gpt2, better="higher"), paper=PAPER[key],
                             ours=ours(gpt2, gpt2e, 1, "%"), negligible=F1_NEGLIGIBLE, dataset=NER_SET,
                             note=f"{what}; effect: F1 points, GPT2E minus GPT2"))
    rows.append(ClaimRow.not_run("PRODUCT: one of the greatest F1 increases with GPT2E", _no_product(ner),
                                 paper=PAPER["PRODUCT"], dataset=NER_SET))
    if trend is not None:
        rows += trend_claims(trend)
    table = claims_table(rows)
    if "level" in table:
        table["level"] = table["level"].astype("Int64")  # steps; blank for the claims without a level
    return table


def _no_product(ner: pd.DataFrame) -> str:
    """Why the PRODUCT claim is not run, with what LitBank has instead (its types, and VEH's scores)."""
    types = sorted(set(ner["type"]) - {"overall"})
    text = f"LitBank has no PRODUCT type (its types: {', '.join(types)})"
    vehicles = ner[ner["type"] == "VEH"]
    if len(vehicles):  # vehicles, part of OntoNotes' PRODUCT
        text += (f"; VEH (vehicles, part of OntoNotes' PRODUCT): {int(vehicles['support'].iloc[0])} test spans, "
                 f"F1 at most {100 * vehicles['f1'].max():.1f}% for either model in any seed")
    return text


def trend_claims(trend: pd.DataFrame) -> list[ClaimRow]:
    """The trend's claims, one row per budget (level = fine-tuning steps) through
    :func:`lmstudy.claims.trend_rows`, on per-seed paired differences (one seed = the same batches): GPT2E's test
    perplexity is lower with the gold entities than with null ones (the entity layer uses them), and lower than
    GPT2's. Effects in perplexity points; ``negligible``: under ``RESOLUTION`` (0.1%) of the table's mean test
    perplexity."""
    gaps = trend_gaps(trend)
    levels = sorted(int(step) for step in gaps["step"].unique())
    by_level = [gaps[gaps["step"] == step] for step in levels]
    gpt2e, gpt2 = trend[trend["model"] == "GPT2E"], trend[trend["model"] == "GPT2"]

    def at(frame: pd.DataFrame, step: int, column: str) -> str:
        return Spread.of(frame[frame["step"] == step][column]).format(2)

    negligible = RESOLUTION * trend["test_ppl"].mean()
    note = f"effect: ppl points; negligible under {negligible:.2f} (0.1% of the mean test ppl)"
    common = dict(dataset=TEST_SET, negligible=negligible, note=note)
    return [
        *trend_rows("GPT2E uses the entities: test ppl lower with gold than with null entities", levels,
                    [list(-level["entity_gap"]) for level in by_level], paper=PAPER["entity use"],
                    ours=[f"gold {at(gpt2e, s, 'test_ppl')}, null {at(gpt2e, s, 'test_ppl_no_entities')}"
                          for s in levels], **common),
        *trend_rows("GPT2E has lower test ppl than GPT2 (gold entities)", levels,
                    [list(-level["model_gap"]) for level in by_level], paper=PAPER["trend"],
                    ours=[f"GPT2 {at(gpt2, s, 'test_ppl')}, GPT2E {at(gpt2e, s, 'test_ppl')}" for s in levels],
                    **common),
    ]


PUBLISHED_INPUTS = {"runs": "runs.csv", "times": "step_time.csv", "similarity": "similarity_seeds.csv",
                    "ner": "ner.csv", "trend": "trend.csv", "ablations": "ablation_runs.csv"}


def published_inputs(prefix: str = "02_entity_") -> dict[str, pd.DataFrame]:
    """The committed per-seed tables of a published (cpu) run, as the notebook wrote them (figures/, each name
    after ``prefix``: :func:`lmstudy.entity.config.figure_prefix`)."""
    return {name: pd.read_csv(figures_dir() / f"{prefix}{filename}") for name, filename in PUBLISHED_INPUTS.items()}


def published_claims(prefix: str = "02_entity_") -> pd.DataFrame:
    """The published claims table (``figures/02_entity_claims.csv``, ``python -m lmstudy claims 02``): :func:`claims`
    on the committed per-seed tables; no training, no model loaded."""
    inputs = published_inputs(prefix)
    return claims(inputs["runs"], inputs["times"], inputs["similarity"], inputs["ner"], inputs["trend"])


def published_smol_claims() -> pd.DataFrame:
    """The claims on SmolLM2 (``figures/02_entity_smollm2_claims.csv``, ``python -m lmstudy claims 02-smollm2``):
    :func:`published_claims` on the tables of ``python -m lmstudy study 02_entity_transformer --model smollm2``."""
    return published_claims("02_entity_smollm2_")


def published_ablation(prefix: str = "02_entity_") -> pd.DataFrame:
    """The published ablation table (``figures/02_entity_ablation.csv``; SmolLM2's with ``prefix``
    ``"02_entity_smollm2_"``): :func:`ablation_table` on the committed ``figures/<prefix>ablation_runs.csv``."""
    return ablation_table(published_inputs(prefix)["ablations"])
