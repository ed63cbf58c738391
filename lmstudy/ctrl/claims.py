"""The claims of Keskar et al. (2019, CTRL) against study 04's committed results, through lmstudy.claims' rule.

:func:`claims` turns the study's tables (``figures/04_control_codes_*.csv``, :func:`read_tables`) into the
published claims table; :func:`published_claims` (``python -m lmstudy claims 04``) reads the committed ones,
nothing trained or loaded. The notebook calls :func:`claims` on the tables it has just written: one code path.

**What the replicates are.** The cpu run trained each arm once (seed 0; ``results/runs/04_control_codes``),
so no claim has seeds. Each claim's effect is read over the units the study measured, and its row says which:

- perplexity claims: the **21 domains** (the per-domain gap in log perplexity, nats a token: each domain one
  replicate, so the interval says whether the codes help across domains, not whether one domain's gap is
  luck; the per-domain counts are in ``ours``);
- attribution and controllability: the **21 codes** (each code's top-1 share, or the share of its 8
  generations, 4 neutral prompts x 2 sampling seeds, classified as its domain, against chance ``1/K``): each
  code counts the same, as the uniform prior does, and documents of one code do not count as independent;
- claims resting on generation: the **generations** (the sampling seeds x prompts, or, for greedy decoding,
  which has no seed, the 84 continuations: 4 prompts x 21 codes, paired across decoding rules);
- the ``Rating:`` likelihood: the **held-out rated reviews** (paired: own rating vs the opposite one).

**Thresholds** (``negligible``: an effect clear of zero but smaller is real and too small to matter):
:data:`NATS` = 0.001 nats a token (0.1% of perplexity) for perplexity gaps; :data:`SHARE` = 0.01 (one
percentage point) for accuracies, repeated-4-gram shares and probabilities; :data:`BPB` = 0.01 bits per byte
for the judge's scores. "θ = 1.2 at no cost" is an equivalence claim: it holds when the judge's whole interval
lies within :data:`NO_COST_BPB` = ±0.05 bits per byte of greedy decoding (about 5% of SmolLM2's 0.97 bits per
byte on WikiText-2).

**Generation quality is judged by another model.** The published sweep judged each decoding rule by the
generator's own perplexity of its text, which is circular (a model prefers its own choices, its greedy loops
most of all). The quality rows read ``figures/04_control_codes_quality.csv``, the from_base sweep regenerated
from ``models/ctrl-demo`` with its texts and scored by SmolLM2 in bits per byte (``python -m lmstudy ctrl
quality``, :mod:`lmstudy.ctrl.quality`). The scratch arm's weights were never committed and its sweep kept
only means: its quality rows are not run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from lmstudy.claims import ClaimRow, Spread, against, claims_table, differences, paired
from lmstudy.ctrl.probes import mentions
from lmstudy.ctrl.study import PAPER_THETA
from lmstudy.paths import REPO_ROOT, figures_dir

PREFIX = "04_control_codes_"
TABLES = ("perplexity", "attribution", "controllability", "repetition", "quality", "ratings", "mixing", "links",
          "attribution_examples")
ARCHIVE = REPO_ROOT / "results" / "runs" / "04_control_codes"
ARMS = ("from_base", "scratch")
DEMO_ARM = "from_base"  # the chosen arm (study.better_arm), exported as models/ctrl-demo: the probes ran on it

NATS = 0.001
SHARE = 0.01
BPB = 0.01
NO_COST_BPB = 0.05

GREEDY = "greedy"
PENALISED = f"greedy + ctrl θ={PAPER_THETA:g}"
NUCLEUS = "nucleus p=0.9"

# Table 6 on our model: the domain each probe statement is written in the manner of (study.PROBE_STATEMENTS;
# the "Global warming" claims have no such domain among our codes), and the pairs that differ in punctuation.
PROBE_SOURCES = {
    "The film was a waste of two hours.": "Reviews",
    "The film was a waste of two hours": "Reviews",
    "Shares of the company fell 5 percent after the report.": "News",
    "how do i mount a usb drive in ubuntu?": "IRC",
    "What is the capital of Australia?": "Questions",
    "What is the capital of Australia ?": "Questions",
    "A man in a blue shirt is riding a bike.": "Translation",
}
PUNCTUATION_PAIRS = (
    ("The film was a waste of two hours.", "The film was a waste of two hours"),
    ("What is the capital of Australia?", "What is the capital of Australia ?"),
    ("Global warming is a lie.", "Global warming is a lie"),
)

CLAIM_REPEAT = "Greedy sampling with θ ≈ 1.2 prevents the repetitions of greedy decoding (share of repeated 4-grams)"
CLAIM_COST = ("Greedy sampling with θ ≈ 1.2 yields a good balance between truthful generation and lack of "
              "repetition: its text is about as likely as greedy's (judged by SmolLM2)")
CLAIM_SAMPLE = ("Penalised near-greedy decoding trusts the model where sampling mistrusts it: θ = 1.2 text is more "
                "likely than nucleus-sampled text (judged by SmolLM2)")
PAPER_STEER = "qualitative only (Tables 1-2: one prompt, different codes, different text); no perplexity reported"
PAPER_TABLE6 = ("Table 6 (rankings, no accuracy): 'Global warming is a lie.' -> r/unpopularopinion, r/conspiracy, "
                "r/science; 'My landlord is suing me for unpaid rent.' -> r/legaladvice, r/personalfinance, r/frugal")
PAPER_THETA_TEXT = f"greedy with θ ≈ {PAPER_THETA:g} (§4.1); no repetition or quality numbers reported"


# ---------------------------------------------------------------------------------------------------
# inputs


def read_tables(folder: str | Path | None = None) -> dict[str, pd.DataFrame | None]:
    """The study's tables ``04_control_codes_<name>.csv`` of ``folder`` (default: figures/), by name
    (:data:`TABLES`); a table that is not there is None (its claims are then not run, saying why)."""
    folder = Path(folder) if folder is not None else figures_dir()
    return {name: pd.read_csv(folder / f"{PREFIX}{name}.csv") if (folder / f"{PREFIX}{name}.csv").exists() else None
            for name in TABLES}


def archived_runs(archive: str | Path = ARCHIVE) -> dict[str, str]:
    """Arm -> run id of the archived cpu runs (their ``config.json`` says ``scratch`` or not), for the notes."""
    runs = {}
    for config in sorted(Path(archive).glob("*/config.json")):
        values = json.loads(config.read_text(encoding="utf-8"))
        runs["scratch" if values.get("scratch") else "from_base"] = config.parent.name
    return runs


# ---------------------------------------------------------------------------------------------------
# the claims


def _steering_rows(perplexity: pd.DataFrame, arm: str, note: str) -> list[ClaimRow]:
    """Right code vs no code, the mean wrong code and the best wrong code: the per-domain log-perplexity gap."""
    domains = perplexity[perplexity["arm"] == arm]
    right = np.log(domains["right_code"].to_numpy())
    rows = []
    for column, other in (("no_code", "no code"), ("wrong_code_mean", "the wrong codes (mean loss)"),
                          ("best_wrong_code_ppl", "the best wrong code")):
        gaps = np.log(domains[column].to_numpy()) - right
        ours = (f"perplexity {domains['right_code'].mean():.1f} with its code vs {domains[column].mean():.1f} with "
                f"{other} (mean over domains); lower in {int((gaps > 0).sum())} of {len(gaps)} domains")
        rows.append(ClaimRow(
            f"Control codes govern style and content: held-out text is more likely under its own domain code than "
            f"under {other}", differences(gaps), paper=PAPER_STEER, ours=ours, negligible=NATS, level=arm,
            note=f"effect: log-perplexity gap in nats a token; replicates: the {len(gaps)} domains. {note}",
            digits=3))
    return rows


def _attribution_rows(attribution: pd.DataFrame, arm: str, note: str) -> list[ClaimRow]:
    """Top-1 and top-3 source attribution per code against chance (1/K, 3/K)."""
    codes = attribution[(attribution["arm"] == arm) & (attribution["true_code"] != "all")]
    overall = attribution[(attribution["arm"] == arm) & (attribution["true_code"] == "all")].iloc[0]
    rows = []
    for column, chance_column, rank in (("top1", "chance_top1", "first"), ("top3", "chance_top3", "among the top 3")):
        chance = float(codes[chance_column].iloc[0])
        ours = (f"{column} {Spread.of(codes[column]).format(3)} over codes ({float(overall[column]):.3f} over "
                f"{int(overall['documents'])} documents); chance {chance:.3f}")
        rows.append(ClaimRow(
            f"Source attribution p(c|x) ∝ p(x|c)p(c), uniform prior, ranks a text's true domain {rank}",
            against(codes[column], chance, better="higher"), paper=PAPER_TABLE6, ours=ours, negligible=SHARE,
            level=arm, note=f"effect: accuracy minus chance; replicates: the {len(codes)} codes' held-out documents "
            f"(whole documents up to the context). {note}", digits=3))
    return rows


def _table6_rows(examples: pd.DataFrame, note: str) -> list[ClaimRow]:
    """Our Table 6 probes: the intended domain first, and the sensitivity to a final period."""
    probes = examples.set_index("statement")
    hits = [float(probes.loc[statement, "source_1"] == source) for statement, source in PROBE_SOURCES.items()
            if statement in probes.index]
    chance = 1 / 21
    changed = [float(tuple(probes.loc[a, ["source_1", "source_2", "source_3"]])
                     != tuple(probes.loc[b, ["source_1", "source_2", "source_3"]]))
               for a, b in PUNCTUATION_PAIRS if a in probes.index and b in probes.index]
    return [
        ClaimRow("Table 6 probes: a statement written in the manner of a domain is attributed to it first",
                 against(hits, chance, better="higher"), paper=PAPER_TABLE6,
                 ours=f"{int(sum(hits))} of {len(hits)} statements (chance {chance:.3f})", negligible=SHARE,
                 level=DEMO_ARM, note=f"effect: share minus chance; replicates: our {len(hits)} statements "
                 f"(lmstudy.ctrl.study.PROBE_STATEMENTS; the paper's Reddit opinions have no codes here). {note}",
                 digits=3),
        ClaimRow("Attribution is sensitive to small changes in the prompt ('Global warming is a lie' differs from "
                 "'Global warming is a lie.')", against(changed, 0.0, better="higher"),
                 paper="Table 6: 'lie.' -> r/unpopularopinion, r/conspiracy, r/science; 'lie' -> r/eli5, r/science, "
                 "r/unpopularopinion",
                 ours=f"top-3 ranking changed in {int(sum(changed))} of {len(changed)} pairs (a final period or space)",
                 level=DEMO_ARM, note=f"effect: share of pairs whose top-3 changed; replicates: the {len(changed)} "
                 f"pairs. {note}"),
    ]


def _controllability_rows(control: pd.DataFrame, arm: str, note: str) -> list[ClaimRow]:
    codes = control[control["arm"] == arm]
    chance = float(codes["chance"].iloc[0])
    overall = float((codes["accuracy"] * codes["generations"]).sum() / codes["generations"].sum())
    return [ClaimRow(
        "Even for identical prompts, control codes allow for predictable variation in generation: a continuation "
        "is recognised as its code's domain", against(codes["accuracy"], chance, better="higher"),
        paper=PAPER_STEER, ours=f"classified as its domain: {Spread.of(codes['accuracy']).format(3)} over codes "
        f"({overall:.3f} of {int(codes['generations'].sum())} generations); chance {chance:.3f}", negligible=SHARE,
        level=arm, note=f"effect: accuracy minus chance; replicates: the {len(codes)} codes, each the share of its "
        f"{int(codes['generations'].iloc[0])} generations (4 neutral prompts x 2 sampling seeds, nucleus p = 0.9, "
        f"40 tokens) that a TF-IDF classifier fitted on real held-out text assigns to its domain. {note}", digits=3)]


def by_continuation(quality: pd.DataFrame, setting: str, column: str) -> pd.Series:
    """``column`` of one decoding rule's continuations, indexed by (prompt, code): one side of a pairing."""
    rows = quality[quality["setting"] == setting]
    return rows.set_index(["prompt", "code"])[column].astype(float)


def _repetition_rows(repetition: pd.DataFrame, quality: pd.DataFrame | None, note: str,
                     runs: Mapping[str, str]) -> list[ClaimRow]:
    """θ = 1.2 cuts repetition (both arms); its cost in text quality judged by SmolLM2 (from_base)."""
    claim_repeat, claim_cost, claim_sample = CLAIM_REPEAT, CLAIM_COST, CLAIM_SAMPLE
    rows = []
    summary = repetition.set_index(["arm", "setting"])
    for arm in ARMS:
        greedy, penalised = (summary.loc[(arm, setting)] for setting in (GREEDY, PENALISED))
        published = (f"published sweep: {greedy['repeated_4gram']:.3f} greedy vs {penalised['repeated_4gram']:.3f}; "
                     f"own perplexity {greedy['perplexity']:.2f} vs {penalised['perplexity']:.2f}")
        if arm == DEMO_ARM and quality is not None:
            before, after = (by_continuation(quality, setting, "repeated_4gram") for setting in (GREEDY, PENALISED))
            rows.append(ClaimRow(
                claim_repeat, paired(after, before, better="lower"), paper=PAPER_THETA_TEXT,
                ours=f"{before.mean():.3f} greedy vs {after.mean():.3f} at θ = {PAPER_THETA:g} ({published})",
                negligible=SHARE, level=arm, note="replicates: the 84 continuations (4 prompts x 21 codes, 40 "
                "tokens; greedy has no sampling seed), paired across rules; regenerated from models/ctrl-demo "
                "(float16 export of the run) by python -m lmstudy ctrl quality. " + note.format(arm=runs.get(arm, "?")),
                digits=3))
        else:
            rows.append(ClaimRow(
                claim_repeat, differences([greedy["repeated_4gram"] - penalised["repeated_4gram"]]),
                paper=PAPER_THETA_TEXT, ours=published, negligible=SHARE, level=arm,
                note="one value: the published sweep kept only the mean per rule and this arm's weights were not "
                "committed, so no continuation can be paired. " + note.format(arm=runs.get(arm, "?")), digits=3))
    if quality is None:
        why = "figures/04_control_codes_quality.csv is missing: run python -m lmstudy ctrl quality"
        rows += [ClaimRow.not_run(claim, why, paper=PAPER_THETA_TEXT, level=DEMO_ARM)
                 for claim in (claim_cost, claim_sample)]
    else:
        greedy, penalised, nucleus = (by_continuation(quality, setting, "judge_bpb")
                                      for setting in (GREEDY, PENALISED, NUCLEUS))
        own = {setting: by_continuation(quality, setting, "perplexity").mean() for setting in (GREEDY, PENALISED,
                                                                                                NUCLEUS)}
        judged = (f"SmolLM2 bits per byte: greedy {greedy.mean():.3f}, θ = {PAPER_THETA:g} {penalised.mean():.3f}, "
                  f"nucleus {nucleus.mean():.3f} (the generator's own perplexity: {own[GREEDY]:.2f}, "
                  f"{own[PENALISED]:.2f}, {own[NUCLEUS]:.2f})")
        common = ("replicates: the 84 continuations, paired across rules; regenerated from models/ctrl-demo and "
                  "scored by SmolLM2-135M (python -m lmstudy ctrl quality)")
        rows.append(ClaimRow(
            claim_cost, paired(penalised, greedy, better="lower"), paper=PAPER_THETA_TEXT, ours=judged,
            similar_within=NO_COST_BPB, level=DEMO_ARM, digits=3,
            note=f"effect: greedy minus θ = {PAPER_THETA:g} in bits per byte (negative: θ costs), 'about as likely' = "
            f"within ±{NO_COST_BPB} bits per byte; {common}. Any judge finds a loop cheap, so this comparison "
            "favours greedy: read it with the next row"))
        rows.append(ClaimRow(
            claim_sample, paired(penalised, nucleus, better="lower"), paper="§4.1: 'By choosing to sample, we "
            "mistrust the model'", ours=judged, negligible=BPB, level=DEMO_ARM, digits=3,
            note=f"effect: nucleus minus θ = {PAPER_THETA:g} in bits per byte; {common}. The two rules repeat "
            "alike (repeated 4-grams near 0), so the judge's bias for loops plays no part here"))
    scratch_why = ("the scratch arm's weights were never committed and its sweep kept no texts, so no other model "
                   "can judge them (its own perplexity rose from {greedy:.2f} to {penalised:.2f}: circular)")
    greedy, penalised = (summary.loc[("scratch", setting), "perplexity"] for setting in (GREEDY, PENALISED))
    rows += [ClaimRow.not_run(claim, scratch_why.format(greedy=greedy, penalised=penalised), paper=PAPER_THETA_TEXT,
                              level="scratch") for claim in (claim_cost, claim_sample)]
    return rows


def _rating_rows(ratings: pd.DataFrame | None) -> list[ClaimRow]:
    """The secondary code ``Rating:`` after ``Reviews`` (likelihood and generation), and ``Title:``."""
    claim_likelihood = ("Additional control codes following the domain code (Reviews Rating: VALUE) further "
                        "constrain generation: a review is more likely under its own rating than the opposite one")
    claim_generation = ("Control codes can be combined (Reviews, Rating:, and VALUE) to provide finer-grained "
                        "control: Rating: 5.0 generates more positive reviews than Rating: 1.0")
    paper = ("Table 2: 'Reviews Rating: 5.0' -> '... the best thing on my hair'; 'Reviews Rating: 1.0' -> "
             "'... a complete waste of money'")
    rows = []
    if ratings is None:
        why = "figures/04_control_codes_ratings.csv is missing: run python -m lmstudy ctrl quality"
        rows += [ClaimRow.not_run(claim, why, paper=paper, level=DEMO_ARM)
                 for claim in (claim_likelihood, claim_generation)]
    else:
        likelihood = ratings[ratings["kind"] == "likelihood"]
        generation = ratings[ratings["kind"] == "generation"]
        rows.append(ClaimRow(
            claim_likelihood, differences(likelihood["loss_opposite"] - likelihood["loss_right"]), paper=paper,
            ours=f"loss {likelihood['loss_right'].mean():.4f} with its rating vs {likelihood['loss_opposite'].mean():.4f}"
            f" with the opposite one (nats a token); own rating better for "
            f"{int((likelihood['loss_opposite'] > likelihood['loss_right']).sum())} of {len(likelihood)} reviews",
            negligible=NATS, level=DEMO_ARM, digits=4,
            note=f"replicates: the {len(likelihood)} rated held-out IMDB reviews (1.0 <-> 5.0, 2.0 <-> 4.0), paired; "
            "models/ctrl-demo, python -m lmstudy ctrl quality"))
        same = int((generation["text_5"].fillna("") == generation["text_1"].fillna("")).sum())
        rows.append(ClaimRow(
            claim_generation, differences(generation["p_positive_5"] - generation["p_positive_1"]), paper=paper,
            ours=f"P(positive) {generation['p_positive_5'].mean():.3f} under 5.0 vs {generation['p_positive_1'].mean():.3f}"
            f" under 1.0; identical text in {same} of {len(generation)} pairs",
            negligible=SHARE, level=DEMO_ARM, digits=3,
            note=f"replicates: {len(generation)} (prompt, sampling seed) pairs, the same seed under both ratings "
            "(nucleus p = 0.9, 40 tokens); P(positive) from a TF-IDF classifier fitted on rated training reviews; "
            "models/ctrl-demo, python -m lmstudy ctrl quality"))
    rows.append(ClaimRow.not_run(
        "Title: after a domain code constrains the model to start with a title (Table 2)",
        "every News and subreddit document is trained with its Title:/Text: lines, so there is no untitled "
        "contrast to measure, and what makes a generated line a title needs a judge we do not have",
        paper="Table 2: 'Books Title: ...' / 'Reddit Title:' examples", level=DEMO_ARM))
    rows.append(ClaimRow.not_run(
        "Secondary codes (Rating:, Title:) in the scratch arm", "the scratch arm's weights were never committed",
        paper=paper, level="scratch"))
    return rows


def mixing_rows(mixing: pd.DataFrame, note: str, level: str = DEMO_ARM) -> list[ClaimRow]:
    """Code-mixing (Table 5): per mixed generation, the template kept, the domain kept, both."""
    mixed = mixing[mixing["mixed"].astype(bool)]
    reference = mixing[~mixing["mixed"].astype(bool)]  # each template under its own domain
    template, domain = mixed["template_kept"].fillna(0.0), mixed["domain_kept"].fillna(0.0)
    both = template * domain
    chance = 1 / 20  # the domain classifier chooses among the 21 codes but the template's own
    paper = ("Table 5: 'Diet English: I lost 10 kgs! ; German:' alternates English and German while respecting the "
             "Diet domain; 'Politics Title:' + a French prompt")
    replicates = (f"replicates: the {len(mixed)} mixed generations ({mixed['code'].nunique()} composite codes x "
                  f"{mixed['seed'].nunique()} sampling seeds, nucleus p = 0.9, 40 tokens)")
    return [
        ClaimRow("Some codes can be mixed to generate text with novel cross-over behavior: the text keeps both the "
                 "template and the domain", against(both, 0.0, better="higher"), paper=paper,
                 ours=f"both kept in {int(both.sum())} of {len(both)}", level=level, digits=3,
                 note=f"effect: share keeping both; {replicates}. {note}"),
        ClaimRow("Mixed codes keep the template (English ... ; German: continues in German; Q: completes a question)",
                 against(template, 0.0, better="higher"), paper=paper,
                 ours=f"kept in {int(template.sum())} of {len(template)} (with the template's own domain: "
                 f"{int(reference['template_kept'].fillna(0).sum())} of {len(reference)})", level=level, digits=3,
                 note=f"effect: share keeping the template (a question's first line ends in ?, a translation's "
                 f"is German by a classifier fitted on Multi30k); {replicates}. {note}"),
        ClaimRow("Mixed codes respect the domain (the domain classifier names the domain code)",
                 against(domain, chance, better="higher"), paper=paper,
                 ours=f"kept in {int(domain.sum())} of {len(domain)}; chance {chance:.2f}", negligible=SHARE,
                 level=level, digits=3, note=f"effect: share minus chance (1/20: the template's own domain is "
                 f"left out); {replicates}. {note}"),
    ]


def link_rows(links: pd.DataFrame, note: str, level: str = DEMO_ARM,
               decoding: str = "greedy + θ = 1.2") -> list[ClaimRow]:
    """Link codes (Table 3): the changed part of the URL named in the text; the text changed at all."""
    steered = []
    for _, probe in links[links["mentions"].notna()].groupby("probe", sort=False):
        for _, variant in probe.iterrows():
            others = probe[probe["value"] != variant["value"]]["continuation"].fillna("")
            steered.append(mentions(variant["value"], str(variant["continuation"] or ""))
                           - float(np.mean([mentions(variant["value"], text) for text in others])))
    changed = 1 - links["overlap"]
    paper = ("Table 3: links.../2007/.../us-president -> Bush, /2014/ -> Obama, /2018/ -> Trump; cnn vs etonline "
             "'star'; /style/ vs /politics/ george-clooney")
    return [
        ClaimRow("Novel URLs can be used to specify domain, subdomain, entities and dates: the text follows the "
                 "changed part of the link (names the topic, category or subreddit)",
                 differences(steered), paper=paper,
                 ours=f"continuations naming their URL's value: {int(links['mentions'].sum())} of "
                 f"{int(links['mentions'].notna().sum())}", negligible=SHARE, level=level, digits=3,
                 note=f"effect: per value, named under its own URL minus named under the probe's other URLs; "
                 f"replicates: the {len(steered)} generations (Reuters topic, BBC category, subreddit values; "
                 f"{decoding}). "
                 f"{note}"),
        ClaimRow("A changed link changes the generated text (Table 3: the same path under different dates)",
                 against(changed, 0.0, better="higher"), paper=paper,
                 ours=f"word overlap with the probe's other variants {Spread.of(links['overlap']).format(2)} "
                 f"(1 = the same text)", negligible=SHARE, level=level, digits=3,
                 note=f"effect: 1 - word overlap; replicates: the {len(links)} variants (overlaps within a probe "
                 f"share texts, so they are not independent: the interval is optimistic). Changed is not steered: "
                 f"see the previous row. {note}"),
    ]


def _probe_rows(tables: Mapping[str, pd.DataFrame | None], name: str, rows_of, claim: str, note: str) -> list[ClaimRow]:
    """``rows_of(table, note)`` of a probe's table; a table the run did not write (a model without the
    ``Links`` code has no link probe): one row not run, saying so."""
    table = tables.get(name)
    if table is None:
        return [ClaimRow.not_run(claim, f"no {PREFIX}{name}.csv: the run did not write it", level=DEMO_ARM)]
    return rows_of(table, note)


def claims(tables: Mapping[str, pd.DataFrame | None], runs: Mapping[str, str] | None = None) -> pd.DataFrame:
    """The published claims table of study 04 from its tables (:func:`read_tables`; ``runs``: arm -> run id of
    the archived runs, for the notes). Rows come in the paper's order: codes steer (perplexity, then
    generation), source attribution, penalised sampling, secondary codes, code-mixing, link codes."""
    runs = dict(runs or {})
    run_note = "cpu run {arm}, seed 0 (results/runs/04_control_codes)"
    rows: list[ClaimRow] = []
    for arm in ARMS:
        rows += _steering_rows(tables["perplexity"], arm, run_note.format(arm=runs.get(arm, "?")))
    for arm in ARMS:
        rows += _controllability_rows(tables["controllability"], arm, run_note.format(arm=runs.get(arm, "?")))
    for arm in ARMS:
        rows += _attribution_rows(tables["attribution"], arm, run_note.format(arm=runs.get(arm, "?")))
    probe_note = ("The probes ran on the chosen arm only (models/ctrl-demo); " + run_note.format(arm=runs.get(DEMO_ARM,
                                                                                                             "?")))
    rows += _probe_rows(tables, "attribution_examples", _table6_rows, "Table 6 probes", probe_note)
    rows += _repetition_rows(tables["repetition"], tables.get("quality"), run_note, runs)
    rows += _rating_rows(tables.get("ratings"))
    rows += _probe_rows(tables, "mixing", mixing_rows, "Code-mixing (Table 5)", probe_note)
    rows += _probe_rows(tables, "links", link_rows, "Link codes (Table 3)", probe_note)
    scratch_probes = ("the probes (Table 6 statements, code-mixing, links) ran on the chosen arm only, and the "
                      "scratch arm's weights were never committed")
    rows += [ClaimRow.not_run(claim, scratch_probes, level="scratch") for claim in (
        "Table 6 probes, code-mixing (Table 5) and link codes (Table 3) in the scratch arm",)]
    return claims_table(rows)


def published_claims() -> pd.DataFrame:
    """``figures/04_control_codes_claims.csv`` (``python -m lmstudy claims 04``): :func:`claims` on the committed
    tables in figures/ and the archived runs' ids; nothing trained or loaded."""
    return claims(read_tables(), archived_runs())


__all__ = ["ARMS", "BPB", "CLAIM_COST", "CLAIM_REPEAT", "CLAIM_SAMPLE", "by_continuation", "link_rows", "mixing_rows", "NATS", "NO_COST_BPB", "PROBE_SOURCES", "PUNCTUATION_PAIRS", "SHARE", "TABLES",
           "archived_runs", "claims", "published_claims", "read_tables"]
