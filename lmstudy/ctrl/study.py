"""Held-out evaluation tables and figures of the control-code study (notebook ``04_control_codes``).

What the notebook measures, and our decisions:

- **Side-by-side generations** (:func:`side_by_side`): one prompt, every code, common random
  numbers (``generation.generate_codes``), one row per code.
- **Perplexity per domain with the right code, a wrong code, no code** (:func:`code_perplexity_table`):
  each domain's held-out stream scored in non-overlapping chunks (``data.code_stream_loss``, the
  shared protocol) with (a) its own code, (b) every other code (we report the mean loss over the
  wrong codes and the best wrong code), (c) no code. "No code" is our reading: the model never saw
  a sequence without a code, so we put ``<|endoftext|>`` (the document separator it does know) in
  the code's position. Perplexity = ``exp(mean loss)``.
- **Source attribution accuracy** (:func:`attribution_summary`, :func:`confusion_matrix`): on the
  rows of ``attribution.attribution_table`` (uniform prior, as in the paper): top-1 and top-3
  accuracy per true code and overall, chance ``1/K`` and ``3/K``.
- **Table 6 style probes** (:func:`attribution_examples`): short statements of our own (the paper's
  Table 6 probes Reddit opinions we have no codes for), each with its three most likely sources
  under a uniform prior, as a descriptive check of what the model associates with each code.
- **Controllability** (:func:`train_domain_classifier`, :func:`controllability`): a scikit-learn
  TF-IDF (word 1-2-grams + character 2-4-grams) + logistic-regression classifier is trained on
  *real* held-out text of each domain and applied to continuations of neutral prompts generated
  under each code (the continuation alone; the prompt is shared); accuracy per code vs chance
  ``1/K``. The classifier never sees generated text in training.
- **Repetition vs quality** (:func:`repetition_stats`, :func:`repetition_sweep`): distinct-1/2
  (unique n-grams / n-grams) and the repeated-4-gram rate (share of 4-grams that occurred earlier
  in the same continuation) of continuations from greedy decoding, greedy + the paper's penalty
  (θ over a grid), greedy + HF's penalty and nucleus sampling. "Quality" is the model's own
  perplexity of the continuation given its code, *without* any penalty: how far the penalty pushes
  the text away from what the model finds likely (a proxy; the paper judged quality by eye). A model grading
  its own text is circular: the claims judge it with another model (``lmstudy.ctrl.quality``, SmolLM2).
- **Two arms** (``lmstudy.ctrl.model.arm_config``: fine-tuned from the shared base vs the base's
  architecture and tokenizer trained from random weights with the same steps, batch, schedule and
  data). Every table above is computed for each arm and stacked with an ``arm`` column
  (:func:`by_arm`); :func:`arms_table` sums each arm up in one row (mean over domains of the
  right-code / wrong-code / no-code perplexity, attribution top-1 / top-3 over all documents,
  controllability over all generations, repeated 4-grams under greedy decoding and under the
  paper's θ = 1.2). :func:`better_arm` picks the demo checkpoint by a rule fixed before the run:
  the lower mean right-code perplexity (what the model is trained for, and comparable because the
  arms share the tokenizer); within 1% of each other, the higher attribution top-1 (the codes'
  use); still tied, the first arm given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
import torch

from lmstudy.ctrl.attribution import attribute
from lmstudy.ctrl.data import code_id, code_stream_loss, encode_stream
from lmstudy.ctrl.generation import generate_codes
from lmstudy.ctrl.model import control_run
from lmstudy.ctrl.sampling import SamplingConfig
from lmstudy.plots import loss_frame


NEUTRAL_PROMPTS = ("The", "I think that", "Yesterday", "This is")
# Table 6 style probes: one statement in the manner of several of our domains, and pairs that differ
# only in punctuation (the paper notes the ranking is sensitive to such changes).
PROBE_STATEMENTS = (
    "The film was a waste of two hours.",
    "The film was a waste of two hours",
    "Shares of the company fell 5 percent after the report.",
    "how do i mount a usb drive in ubuntu?",
    "What is the capital of Australia?",
    "What is the capital of Australia ?",  # the TREC questions are tokenised: a space before "?"
    "A man in a blue shirt is riding a bike.",
    "Global warming is a lie.",
    "Global warming is a lie",
)
EMPTY = "(empty)"  # the prediction recorded for an empty continuation
PAPER_THETA = 1.2  # the paper's penalty, the decoding of the arms table's second repetition number


def side_by_side(model, tokenizer, prompt: str, codes: Sequence[str], sampling: SamplingConfig = SamplingConfig(),
                 max_new_tokens: int = 40, seed: int = 0) -> pd.DataFrame:
    """One row per code: ``code, prompt, continuation`` (same prompt, same seed for every code)."""
    generations = generate_codes(model, tokenizer, prompt, codes, sampling, max_new_tokens, seed)
    return pd.DataFrame({"code": [g.code for g in generations], "prompt": prompt,
                         "continuation": [g.text for g in generations]})


# --------------------------------------------------------------------------------------------
# perplexity with the right code, a wrong code, no code


@torch.no_grad()
def code_perplexity_table(model, tokenizer, valid: Mapping[str, Sequence[str]], seq_len: int,
                          batch_size: int = 16) -> pd.DataFrame:
    """Per domain: held-out perplexity with its own code, the wrong codes (mean loss over all of
    them, and the best one), and no code (eos in the code's position). One row per domain."""
    codes = list(valid)
    ids_of = {name: code_id(tokenizer, name) for name in codes}
    rows = []
    for domain in codes:
        stream = encode_stream(tokenizer, valid[domain])
        losses = {name: code_stream_loss(model, ids_of[name], stream, seq_len, batch_size) for name in codes}
        wrong = {name: loss for name, loss in losses.items() if name != domain}
        none = code_stream_loss(model, tokenizer.eos_token_id, stream, seq_len, batch_size)
        best_wrong = min(wrong, key=wrong.get) if wrong else None
        rows.append({
            "domain": domain, "tokens": int(stream.numel()),
            "right_code": math.exp(losses[domain]),
            "wrong_code_mean": math.exp(sum(wrong.values()) / len(wrong)) if wrong else float("nan"),
            "best_wrong_code": best_wrong,
            "best_wrong_code_ppl": math.exp(wrong[best_wrong]) if wrong else float("nan"),
            "no_code": math.exp(none),
        })
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# source attribution


def attribution_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Top-1 / top-3 accuracy per true code and overall (last row, ``all``) from the rows of
    ``attribution.attribution_table``; with chance levels ``1/K`` and ``min(3, K)/K``."""
    k = table["true_code"].nunique()
    per_code = table.groupby("true_code", sort=False).agg(
        documents=("correct", "size"), top1=("correct", "mean"),
        top3=("true_rank", lambda ranks: float((ranks <= 3).mean())),
    ).reset_index()
    overall = pd.DataFrame([{"true_code": "all", "documents": len(table), "top1": table["correct"].mean(),
                             "top3": float((table["true_rank"] <= 3).mean())}])
    summary = pd.concat([per_code, overall], ignore_index=True)
    return summary.assign(chance_top1=1 / k, chance_top3=min(3, k) / k)


def attribution_examples(model, tokenizer, statements: Sequence[str] = PROBE_STATEMENTS, top: int = 3,
                         codes: Sequence[str] | None = None) -> pd.DataFrame:
    """The paper's Table 6 on our model: one row per statement with its ``top`` most likely codes
    (uniform prior) and their posterior probabilities, ``statement, source_1, p_1, source_2, ...``."""
    rows = []
    for statement in statements:
        ranking = attribute(model, tokenizer, statement, codes).head(top)
        row = {"statement": statement}
        for rank, (code, probability) in enumerate(zip(ranking["code"], ranking["probability"]), start=1):
            row[f"source_{rank}"], row[f"p_{rank}"] = code, float(probability)
        rows.append(row)
    return pd.DataFrame(rows)


def confusion_matrix(table: pd.DataFrame, codes: Sequence[str] | None = None) -> pd.DataFrame:
    """Rows: true code, columns: predicted code, cells: share of the row's documents (rows sum to 1)."""
    codes = list(codes) if codes is not None else list(dict.fromkeys(table["true_code"]))
    counts = pd.crosstab(pd.Categorical(table["true_code"], categories=codes),
                         pd.Categorical(table["predicted"], categories=codes), dropna=False)
    counts.index.name, counts.columns.name = "true code", "predicted code"
    return counts.div(counts.sum(axis=1).replace(0, 1), axis=0)


def confusion_heatmap(matrix: pd.DataFrame, title: str = "") -> plt.Figure:
    """A heat map of :func:`confusion_matrix` (shares, 0..1)."""
    sns.set_theme(style="white")
    size = 2.5 + 0.45 * len(matrix)
    figure, axis = plt.subplots(figsize=(size + 1, size))
    sns.heatmap(matrix, vmin=0, vmax=1, cmap="Blues", annot=len(matrix) <= 12, fmt=".2f", square=True, ax=axis)
    axis.set(title=title)
    figure.tight_layout()
    return figure


# --------------------------------------------------------------------------------------------
# controllability


def train_domain_classifier(texts: Mapping[str, Sequence[str]], seed: int = 0):
    """A TF-IDF (word 1-2-grams and character 2-4-grams) + logistic-regression pipeline fitted on
    real texts per domain."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline, make_union

    documents = [text for name in texts for text in texts[name]]
    labels = [name for name in texts for _ in texts[name]]
    if len(set(labels)) < 2:
        raise ValueError("the domain classifier needs texts of at least two domains")
    # Word 1-2-grams for real text, plus character 2-4-grams within words: a small model's
    # generations are full of misspelt words that share no word feature with real text.
    features = make_union(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True),
                          TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), sublinear_tf=True))
    classifier = make_pipeline(features, LogisticRegression(max_iter=1000, random_state=seed))
    return classifier.fit(documents, labels)


def controllability(model, tokenizer, classifier, codes: Sequence[str], prompts: Sequence[str] = NEUTRAL_PROMPTS,
                    sampling: SamplingConfig = SamplingConfig(top_p=0.9), max_new_tokens: int = 40,
                    seeds: Sequence[int] = (0,)) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Generate from each neutral prompt under each code (and each seed), classify the continuation.

    Returns (generations: ``code, prompt, seed, continuation, predicted, correct``, where
    ``predicted`` is ``EMPTY`` for an empty continuation;
    summary per code: ``code, generations, accuracy, chance``)."""
    rows = []
    for prompt in prompts:
        for seed in seeds:
            for g in generate_codes(model, tokenizer, prompt, codes, sampling, max_new_tokens, seed):
                rows.append({"code": g.code, "prompt": prompt, "seed": seed, "continuation": g.text})
    generations = pd.DataFrame(rows)
    # The continuation alone is classified (the prompt is shared by every code); an empty one (eos at
    # once) shows no control and counts as wrong.
    texts = generations["continuation"].str.strip()
    predicted = classifier.predict(texts.tolist())
    generations["predicted"] = [label if text else EMPTY for label, text in zip(predicted, texts)]
    generations["correct"] = generations["predicted"] == generations["code"]
    summary = generations.groupby("code", sort=False).agg(generations=("correct", "size"),
                                                          accuracy=("correct", "mean")).reset_index()
    return generations, summary.assign(chance=1 / len(codes))


# --------------------------------------------------------------------------------------------
# repetition vs quality


def repetition_stats(token_ids: Sequence[int]) -> dict[str, float]:
    """distinct-1, distinct-2 (unique / all n-grams) and the repeated-4-gram rate (share of 4-grams
    already seen earlier in the same sequence). NaN where the sequence has no such n-gram."""
    def ngrams(n: int) -> list[tuple[int, ...]]:
        return [tuple(token_ids[i : i + n]) for i in range(len(token_ids) - n + 1)]

    def distinct(n: int) -> float:
        grams = ngrams(n)
        return len(set(grams)) / len(grams) if grams else float("nan")

    fours, seen, repeated = ngrams(4), set(), 0
    for gram in fours:
        repeated += gram in seen
        seen.add(gram)
    return {"distinct_1": distinct(1), "distinct_2": distinct(2),
            "repeated_4gram": repeated / len(fours) if fours else float("nan")}


def decoding_settings(thetas: Sequence[float] = (1.0, 1.1, 1.2, 1.3, 1.5), hf_theta: float = 1.2,
                      top_p: float = 0.9) -> dict[str, SamplingConfig]:
    """The decoding rules of the repetition study, by name."""
    settings = {"greedy": SamplingConfig(greedy=True)}
    for theta in thetas:
        settings[f"greedy + ctrl θ={theta:g}"] = SamplingConfig(greedy=True, penalty="ctrl", theta=theta)
    settings[f"greedy + hf θ={hf_theta:g}"] = SamplingConfig(greedy=True, penalty="hf", theta=hf_theta)
    settings[f"nucleus p={top_p:g}"] = SamplingConfig(top_p=top_p)
    return settings


@torch.no_grad()
def continuation_loss(model, prefix: Sequence[int], continuation: Sequence[int]) -> float:
    """Mean -log p(continuation | prefix) in nats a token under the model, no penalty; the continuation cut to the
    model's context (GPT-2's ``n_positions``); NaN when it is empty."""
    limit = getattr(model.config, "n_positions", None) or len(prefix) + len(continuation)
    continuation = list(continuation)[: limit - len(prefix)]
    if not continuation:
        return float("nan")
    device = next(model.parameters()).device
    ids = torch.tensor([list(prefix) + continuation], device=device)  # (1, L)
    log_probs = torch.log_softmax(model(input_ids=ids[:, :-1]).logits.float(), dim=-1)  # (1, L-1, V)
    targets = ids[:, len(prefix):]  # (1, n)
    picked = log_probs[:, len(prefix) - 1:, :].gather(2, targets.unsqueeze(-1)).squeeze(-1)  # (1, n)
    return float(-picked.mean())



def neutral_prompts(count: int = 0) -> tuple[str, ...]:
    """The first ``count`` of :data:`NEUTRAL_PROMPTS` (0: all), for a repetition sweep cut short (a dry run)."""
    if not 0 <= count <= len(NEUTRAL_PROMPTS):
        raise ValueError(f"sweep_prompts must be between 0 (all) and {len(NEUTRAL_PROMPTS)}; got {count}")
    return NEUTRAL_PROMPTS[:count or None]


def repetition_sweep(model, tokenizer, codes: Sequence[str], prompts: Sequence[str] = NEUTRAL_PROMPTS,
                     settings: Mapping[str, SamplingConfig] | None = None, max_new_tokens: int = 60,
                     seed: int = 0) -> pd.DataFrame:
    """One row per (setting, prompt, code): the continuation's text, its repetition stats and the model's
    perplexity of the continuation. Generation runs to ``max_new_tokens`` (eos does not stop it) so lengths
    match."""
    settings = decoding_settings() if settings is None else settings
    rows = []
    for name, sampling in settings.items():
        for prompt in prompts:
            prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
            for g in generate_codes(model, tokenizer, prompt, codes, sampling, max_new_tokens, seed,
                                    stop_at_eos=False):
                prefix = [code_id(tokenizer, g.code)] + prompt_ids
                rows.append({"setting": name, "prompt": prompt, "code": g.code, "continuation": g.text,
                             "tokens": len(g.token_ids), **repetition_stats(g.token_ids),
                             "perplexity": math.exp(continuation_loss(model, prefix, g.token_ids))})
    return pd.DataFrame(rows)


def repetition_summary(sweep: pd.DataFrame) -> pd.DataFrame:
    """Mean of each statistic per decoding setting (in the sweep's order)."""
    columns = ["distinct_1", "distinct_2", "repeated_4gram", "perplexity"]
    return sweep.groupby("setting", sort=False)[columns].mean().reset_index()


def repetition_plot(summary: pd.DataFrame, title: str = "") -> plt.Figure:
    """Repeated-4-gram rate (x) against the model's perplexity of its own continuation (y, log
    scale: sampling lands far above greedy), one point per decoding setting, named in the legend
    (settings with the same outcome, e.g. θ = 1 and plain greedy, share a point); with an ``arm``
    column (:func:`by_arm`) the marker says the arm."""
    sns.set_theme(style="whitegrid")
    figure, axis = plt.subplots(figsize=(8, 4))
    style = "arm" if "arm" in summary else "setting"
    sns.scatterplot(data=summary, x="repeated_4gram", y="perplexity", hue="setting", style=style, s=70, ax=axis)
    axis.set_yscale("log")
    axis.set(xlabel="repeated 4-grams (share)", ylabel="model perplexity of the continuation", title=title)
    axis.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8, title="decoding")
    figure.tight_layout()
    return figure


# --------------------------------------------------------------------------------------------
# two arms side by side


def by_arm(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """One table per arm stacked into one, with the arm's name in a first column ``arm``."""
    if not tables:
        raise ValueError("no arms to stack")
    return pd.concat([table.assign(arm=arm)[["arm", *table.columns]] for arm, table in tables.items()],
                     ignore_index=True)


def _one_row(table: pd.DataFrame, arm: str, column: str, value: str, measure: str) -> pd.Series:
    rows = table[(table["arm"] == arm) & (table[column] == value)]
    if len(rows) != 1:
        raise ValueError(f"the {measure} table has {len(rows)} rows for arm {arm!r} and {column} {value!r}, "
                         "expected 1")
    return rows.iloc[0]


def arms_table(perplexity: pd.DataFrame, attribution: pd.DataFrame, control: pd.DataFrame,
               repetition: pd.DataFrame) -> pd.DataFrame:
    """One row per arm summing up the per-arm tables (:func:`by_arm` of :func:`code_perplexity_table`,
    :func:`attribution_summary`, the summary of :func:`controllability` and :func:`repetition_summary`).

    Columns: ``right_code_ppl``, ``wrong_code_ppl``, ``no_code_ppl`` (means over the domains, each domain
    counting the same), ``attribution_top1`` / ``attribution_top3`` (the ``all`` row), ``controllability``
    (share of all generations classified as their code), ``repeated_4gram_greedy`` and
    ``repeated_4gram_theta`` (θ = :data:`PAPER_THETA`; NaN where the sweep lacks that setting)."""
    arms = list(dict.fromkeys(perplexity["arm"]))
    paper = f"greedy + ctrl θ={PAPER_THETA:g}"
    rows = []
    for arm in arms:
        domains = perplexity[perplexity["arm"] == arm]
        overall = _one_row(attribution, arm, "true_code", "all", "attribution")
        controlled = control[control["arm"] == arm]
        if controlled.empty:
            raise ValueError(f"the controllability table has no rows for arm {arm!r}")
        sweep = repetition[repetition["arm"] == arm].set_index("setting")["repeated_4gram"]
        rows.append({
            "arm": arm, "right_code_ppl": domains["right_code"].mean(),
            "wrong_code_ppl": domains["wrong_code_mean"].mean(), "no_code_ppl": domains["no_code"].mean(),
            "attribution_top1": float(overall["top1"]), "attribution_top3": float(overall["top3"]),
            "controllability": float((controlled["accuracy"] * controlled["generations"]).sum()
                                     / controlled["generations"].sum()),
            "repeated_4gram_greedy": float(sweep.get("greedy", float("nan"))),
            "repeated_4gram_theta": float(sweep.get(paper, float("nan"))),
        })
    return pd.DataFrame(rows)


def better_arm(table: pd.DataFrame, tolerance: float = 0.01) -> tuple[str, str]:
    """``(arm, reason)``: the arm of :func:`arms_table` with the lower mean right-code perplexity; when the
    best two are within ``tolerance`` (relative) of each other, the one with the higher attribution top-1;
    still tied, the first (module docstring)."""
    if table.empty:
        raise ValueError("no arms to choose from")
    if len(table) == 1:
        return table["arm"].iloc[0], "the only arm evaluated"
    ranked = table.sort_values("right_code_ppl", kind="stable")
    best, second = ranked.iloc[0], ranked.iloc[1]
    gap = (second["right_code_ppl"] - best["right_code_ppl"]) / best["right_code_ppl"]
    if gap >= tolerance:
        return best["arm"], (f"lower mean right-code perplexity: {best['right_code_ppl']:.2f} vs "
                             f"{second['right_code_ppl']:.2f} ({second['arm']}), {gap:.1%} apart")
    tied = (f"mean right-code perplexities within {tolerance:.0%} ({best['right_code_ppl']:.2f} vs "
            f"{second['right_code_ppl']:.2f})")
    if best["attribution_top1"] == second["attribution_top1"]:
        first = table[table["arm"].isin([best["arm"], second["arm"]])].iloc[0]
        return first["arm"], f"{tied} and equal attribution top-1: the first arm"
    winner = best if best["attribution_top1"] > second["attribution_top1"] else second
    loser = second if winner is best else best
    return winner["arm"], (f"{tied}; higher attribution top-1: {winner['attribution_top1']:.3f} vs "
                           f"{loser['attribution_top1']:.3f} ({loser['arm']})")


def arms_loss_plot(logs: Mapping[str, Sequence[dict]], title: str = "") -> plt.Figure:
    """Training loss (per logged step) and validation loss (per evaluation) of each arm against steps."""
    frames = [loss_frame(pd.DataFrame(list(log))).assign(arm=arm) for arm, log in logs.items()]
    sns.set_theme(style="whitegrid")
    figure, axis = plt.subplots(figsize=(7, 3.8))
    sns.lineplot(data=pd.concat(frames, ignore_index=True), x="step", y="loss", hue="arm", style="split",
                 markers=True, markersize=3, dashes=True, ax=axis)
    axis.set(xlabel="training step", ylabel="loss (nats / token)", title=title)
    figure.tight_layout()
    return figure


__all__ = ["EMPTY", "NEUTRAL_PROMPTS", "PAPER_THETA", "PROBE_STATEMENTS", "arms_loss_plot", "arms_table",
           "attribution_examples", "attribution_summary", "better_arm", "by_arm", "code_perplexity_table",
           "confusion_heatmap", "confusion_matrix", "continuation_loss", "control_run", "controllability", "decoding_settings",
           "repetition_plot", "repetition_stats", "repetition_summary", "repetition_sweep", "side_by_side",
           "train_domain_classifier"]
