"""Generation quality judged by another model, and the paper's secondary code ``Rating:``: the two
measurements of study 04 that need a model, written to committed tables that the claims read.

``python -m lmstudy ctrl quality`` (:func:`write_quality_tables`) runs both on the committed demo checkpoint
``models/ctrl-demo`` (the ``from_base`` arm; the ``scratch`` arm's weights were never committed, so it has no
such table) and writes:

- ``figures/04_control_codes_quality.csv``: **the repetition sweep again, text kept, judged by SmolLM2.**
  The published sweep (``figures/04_control_codes_repetition.csv``) kept only the mean per decoding rule and
  judged "quality" by the generator's own perplexity of its text: a model grading itself, which rewards
  whatever it already prefers (its own greedy loops most of all). Here every continuation of the sweep
  (:func:`lmstudy.ctrl.study.repetition_sweep`: the 4 neutral prompts x 21 codes x 8 decoding rules, 40 new
  tokens each, the notebook's settings) is kept with its text, and a model other than the generator,
  SmolLM2-135M (``models/smollm2``, 2T tokens of pretraining), scores it: **bits per byte** of the
  continuation given the prompt, ``-sum log2 p(continuation tokens | prompt) / UTF-8 bytes`` of the
  continuation, so that SmolLM2's tokenizer and ours compare (bytes are the same for both). The code token is
  not shown to the judge (it knows no codes); the prompt is. Lower = text a well-trained model finds more
  likely. Caveat, for reading the numbers: any language model finds a loop cheap (a repeated phrase is easy to
  predict), so a judge's bits per byte favours greedy's loops; it is a fair judge between rules of similar
  repetition (θ = 1.2 against nucleus sampling), and a biased one between greedy and θ = 1.2.
- ``figures/04_control_codes_ratings.csv``: **the secondary code ``Rating:``** (the paper's Table 2,
  ``Reviews Rating: 5.0``): every held-out IMDB review that has a rating (its ``Rating: r`` line is how the
  model was trained: ``lmstudy.ctrl.codes.format_text``) scored with its own rating line and with the opposite
  one (1.0 <-> 5.0, 2.0 <-> 4.0): the mean loss (nats a token) of the review's text under each. One row per
  review (``kind = likelihood``).
  And generation: under ``Reviews Rating: 5.0`` and ``Reviews Rating: 1.0``, each neutral prompt continued
  with nucleus sampling (p = 0.9, 40 tokens) for each of :data:`RATING_SEEDS` (the same seed under both
  ratings: common random numbers), each continuation given its probability of being positive by a
  sentiment classifier (``study.train_domain_classifier``'s TF-IDF + logistic regression, fitted on the rated
  *training* reviews, ratings 4-5 against 1-2: real text, never generated text). One row per (prompt, seed)
  (``kind = generation``).

Both commands run on the CPU in a few minutes (the demo model has 3M parameters, the judge 135M); time them alone
on the machine (two torch jobs on two cores slow each other many times over).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import torch

from lmstudy.ctrl.codes import code_documents, rating_level
from lmstudy.ctrl.data import code_id
from lmstudy.ctrl.generation import generate_codes
from lmstudy.ctrl.sampling import SamplingConfig
from lmstudy.ctrl.study import NEUTRAL_PROMPTS, continuation_loss, repetition_sweep, train_domain_classifier

DEMO_MODEL = "models/ctrl-demo"
JUDGE = "smollm2"
SWEEP_TOKENS = 40  # the published sweep's generation_tokens (cpu preset)
OPPOSITE_RATING = {1.0: 5.0, 2.0: 4.0, 4.0: 2.0, 5.0: 1.0}  # IMDB has no 3.0 (ratings 5-6 are absent)
RATING_SEEDS = tuple(range(25))
RATING_SAMPLING = SamplingConfig(top_p=0.9)
POSITIVE, NEGATIVE = "positive", "negative"


# --------------------------------------------------------------------------------------------
# the judge


def _judge_ids(tokenizer, prompt: str, continuation: str) -> tuple[list[int], list[int]]:
    """The judge's ids of the context (its bos, else eos, token when it has one, then the prompt) and of the
    continuation, tokenized apart so that the scored tokens are exactly the continuation's text."""
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    prefix = ([start] if start is not None else []) + tokenizer(prompt, add_special_tokens=False)["input_ids"]
    target = tokenizer(continuation, add_special_tokens=False)["input_ids"]
    if not prefix:  # nothing to condition the first token on: score from the second
        prefix, target = target[:1], target[1:]
    return prefix, target


@torch.no_grad()
def bits_per_byte(model, tokenizer, prompts: Sequence[str], continuations: Sequence[str],
                  batch_size: int = 16) -> list[float]:
    """Per pair: ``-sum log2 p(continuation | prompt) / bytes(continuation)`` under ``model`` (a causal LM with
    its own tokenizer; :func:`_judge_ids`), in right-padded batches (a causal model's scores of a row's real
    tokens do not depend on the padding after them). NaN for an empty continuation."""
    pairs = [_judge_ids(tokenizer, prompt, text) for prompt, text in zip(prompts, continuations)]
    sizes = [len(text.encode("utf-8")) for text in continuations]
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    results = []
    for first in range(0, len(pairs), batch_size):
        batch = pairs[first:first + batch_size]
        length = max(len(prefix) + len(target) for prefix, target in batch)
        ids = torch.full((len(batch), length), pad, dtype=torch.long, device=device)  # (B, L)
        mask = torch.zeros_like(ids)
        for row, (prefix, target) in enumerate(batch):
            ids[row, : len(prefix) + len(target)] = torch.tensor(prefix + target)
            mask[row, : len(prefix) + len(target)] = 1
        log_probs = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits.float(), dim=-1)  # (B, L, V)
        for row, (prefix, target) in enumerate(batch):
            if not target:
                results.append(math.nan)
                continue
            positions = torch.arange(len(prefix) - 1, len(prefix) + len(target) - 1, device=device)
            picked = log_probs[row, positions, torch.tensor(target, device=device)]  # (n,)
            results.append(float(-picked.sum()) / math.log(2) / sizes[first + row])
    return results


def judged_sweep(model, tokenizer, judge, judge_tokenizer, codes: Sequence[str],
                 prompts: Sequence[str] = NEUTRAL_PROMPTS, max_new_tokens: int = SWEEP_TOKENS) -> pd.DataFrame:
    """:func:`lmstudy.ctrl.study.repetition_sweep` (every decoding rule, its text kept) with the judge's
    ``judge_bpb`` of each continuation (:func:`bits_per_byte`, given the prompt) and its ``bytes``."""
    sweep = repetition_sweep(model, tokenizer, codes, prompts, max_new_tokens=max_new_tokens)
    sweep["bytes"] = [len(text.encode("utf-8")) for text in sweep["continuation"]]
    # Rules that decode alike (θ = 1 and plain greedy; the two penalties under greedy) give the same texts:
    # each distinct (prompt, text) is judged once.
    unique = sweep[["prompt", "continuation"]].drop_duplicates()
    scores = bits_per_byte(judge, judge_tokenizer, unique["prompt"].tolist(), unique["continuation"].tolist())
    judged = dict(zip(zip(unique["prompt"], unique["continuation"]), scores))
    sweep["judge_bpb"] = [judged[key] for key in zip(sweep["prompt"], sweep["continuation"])]
    return sweep


# --------------------------------------------------------------------------------------------
# the secondary code Rating:


def rated_reviews(part: str, limit: int | None = None) -> list[tuple[float, str]]:
    """``(rating level, review text)`` of the IMDB reviews of ``part`` that carry a rating (unrated ones are
    trained without a ``Rating:`` line), in the split's order; ``limit``: of the part's documents read."""
    return [(rating_level(int(document.meta["rating"])), document.text.strip())
            for document in code_documents("Reviews", part, limit) if document.meta.get("rating")]


def rating_likelihood(model, tokenizer, reviews: Sequence[tuple[float, str]]) -> pd.DataFrame:
    """One row per review: its rating, the opposite rating (:data:`OPPOSITE_RATING`), the review's token count
    and its mean loss after ``<|Reviews|>Rating: r`` with its own rating and with the opposite one."""
    reviews_id = code_id(tokenizer, "Reviews")
    rows = []
    for index, (rating, text) in enumerate(reviews):
        text_ids = tokenizer("\n" + text, add_special_tokens=False)["input_ids"]
        losses = {}
        for side, level in (("right", rating), ("opposite", OPPOSITE_RATING[rating])):
            prefix = [reviews_id] + tokenizer(f"Rating: {level:.1f}", add_special_tokens=False)["input_ids"]
            losses[side] = continuation_loss(model, prefix, text_ids)
        rows.append({"kind": "likelihood", "item": index, "rating": rating, "opposite": OPPOSITE_RATING[rating],
                     "tokens": len(text_ids), "loss_right": losses["right"], "loss_opposite": losses["opposite"]})
    return pd.DataFrame(rows)


def sentiment_classifier(reviews: Sequence[tuple[float, str]], seed: int = 0):
    """The study's TF-IDF + logistic-regression pipeline fitted on real reviews: ratings 4.0-5.0 positive,
    1.0-2.0 negative."""
    texts = {NEGATIVE: [text for rating, text in reviews if rating <= 2.0],
             POSITIVE: [text for rating, text in reviews if rating >= 4.0]}
    return train_domain_classifier(texts, seed=seed)


def rating_generations(model, tokenizer, classifier, prompts: Sequence[str] = NEUTRAL_PROMPTS,
                       seeds: Sequence[int] = RATING_SEEDS, max_new_tokens: int = SWEEP_TOKENS,
                       sampling: SamplingConfig = RATING_SAMPLING) -> pd.DataFrame:
    """One row per (prompt, seed): the continuations under ``Reviews Rating: 5.0`` and ``Reviews Rating: 1.0``
    (one batch, the same seed) and the classifier's probability that each is positive."""
    positive = list(classifier.classes_).index(POSITIVE)
    codes = ["Reviews Rating: 5.0", "Reviews Rating: 1.0"]
    rows = []
    for prompt in prompts:
        for seed in seeds:
            high, low = generate_codes(model, tokenizer, prompt, codes, sampling, max_new_tokens, seed)
            p_high, p_low = classifier.predict_proba([high.text, low.text])[:, positive]
            rows.append({"kind": "generation", "item": f"{prompt} / {seed}", "prompt": prompt, "seed": seed,
                         "text_5": high.text, "text_1": low.text,
                         "p_positive_5": float(p_high), "p_positive_1": float(p_low)})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# the command


def write_quality_tables(model_dir: str | Path = DEMO_MODEL, judge: str = JUDGE, out: str | Path | None = None,
                         prompts: Sequence[str] = NEUTRAL_PROMPTS, held_out: int | None = None,
                         train_reviews: int | None = None) -> tuple[Path, Path]:
    """Run both measurements (module docstring) on ``model_dir`` and write the two tables into ``out``
    (default: figures/). ``held_out``: the held-out IMDB documents read (None: all); ``train_reviews``: the
    training documents read for the sentiment classifier (None: all). Returns the two paths."""
    from lmstudy.ctrl.model import load_control_model
    from lmstudy.paths import REPO_ROOT, figures_dir
    from lmstudy.pretrained import load_pretrained

    out = Path(out) if out is not None else figures_dir()
    path = Path(model_dir)
    loaded = load_control_model(path if path.is_absolute() else REPO_ROOT / path, device="cpu")
    judge_model, judge_tokenizer, _ = load_pretrained(judge)
    sweep = judged_sweep(loaded.model, loaded.tokenizer, judge_model, judge_tokenizer, loaded.codes, prompts)
    quality_path = out / "04_control_codes_quality.csv"
    sweep.assign(arm="from_base")[["arm", *sweep.columns]].to_csv(quality_path, index=False)

    classifier = sentiment_classifier(rated_reviews("train", train_reviews))
    likelihood = rating_likelihood(loaded.model, loaded.tokenizer, rated_reviews("valid", held_out))
    generations = rating_generations(loaded.model, loaded.tokenizer, classifier, prompts)
    ratings_path = out / "04_control_codes_ratings.csv"
    pd.concat([likelihood, generations], ignore_index=True).assign(arm="from_base").to_csv(ratings_path, index=False)
    return quality_path, ratings_path


__all__ = ["DEMO_MODEL", "JUDGE", "OPPOSITE_RATING", "RATING_SEEDS", "bits_per_byte", "judged_sweep",
           "rated_reviews", "rating_generations", "rating_likelihood", "sentiment_classifier",
           "write_quality_tables"]
