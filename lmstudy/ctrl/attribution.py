"""Source attribution (Keskar et al. 2019, section 5): which domain is a text most likely from?

A CTRL model gives ``log p(x | c)`` for every domain code ``c``: the text's ids scored after the
code token. With a prior ``p(c)`` Bayes' rule gives ``p(c | x) = softmax_c(log p(x | c) + log p(c))``.
The paper uses a uniform prior ("we use uniform priors", their p(c) in eq. 3) and notes that the
model's ranking reflects the training data, not the truth of a text; we offer the uniform prior
(default) and the empirical training mixture (``prior="mixture"``, the weights saved with the
model) or any dict of weights.

All K codes are scored in one forward pass: K rows ``[code_k] + ids(x)``, equally long, no padding.
A text longer than the model's context is cut to its first ``n_positions - 1`` tokens (we say so in
the result: ``tokens``). Besides the posterior we report each code's log-likelihood (nats) and
perplexity ``exp(-log p(x | c) / n)``, and the rank (1 = most likely source).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd
import torch

from lmstudy.ctrl.codes import code_name
from lmstudy.ctrl.data import code_id
from lmstudy.ctrl.generation import context_length, tokenizer_codes


def posterior(log_likelihoods: Sequence[float], prior: Sequence[float] | None = None) -> list[float]:
    """``softmax(log p(x | c) + log p(c))`` over the codes; uniform prior when ``prior`` is None."""
    scores = torch.tensor(log_likelihoods, dtype=torch.float64)
    if prior is not None:
        weights = torch.tensor(prior, dtype=torch.float64)
        if weights.shape != scores.shape or (weights < 0).any() or weights.sum() <= 0:
            raise ValueError(f"the prior needs one non-negative weight per code, got {list(prior)}")
        scores = scores + torch.log(weights / weights.sum())
    return torch.softmax(scores, dim=0).tolist()


@torch.no_grad()
def prefixed_log_likelihoods(model, ids: Sequence[int], prefixes: Sequence[int]) -> list[float]:
    """``log p(ids | prefix)`` (nats) for each one-token prefix (a code's id, or eos for "no code"), in one batched
    forward pass: K rows ``[prefix_k] + ids[:-1]`` scoring ``ids``, equally long, no padding."""
    device = next(model.parameters()).device
    target = torch.tensor(list(ids), dtype=torch.long, device=device)  # (n,)
    x = torch.tensor([[prefix] + list(ids[:-1]) for prefix in prefixes], dtype=torch.long, device=device)  # (K, n)
    was_training = model.training
    model.eval()
    logits = model(input_ids=x).logits.float()  # (K, n, V)
    model.train(was_training)
    log_probs = torch.log_softmax(logits, dim=-1)  # (K, n, V)
    picked = log_probs.gather(2, target.expand(len(prefixes), -1).unsqueeze(-1)).squeeze(-1)  # (K, n)
    return picked.sum(dim=1).tolist()


def context_ids(model, tokenizer, text: str) -> list[int]:
    """``text``'s ids, cut to what fits the model's context after a one-token prefix."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("the text to attribute is empty")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    limit = context_length(model)
    return ids[: limit - 1] if limit is not None else ids


def code_log_likelihoods(model, tokenizer, text: str, codes: Sequence[str]) -> tuple[list[float], int]:
    """``log p(text | code)`` (nats) for each code, in one batched forward pass; and the tokens scored."""
    ids = context_ids(model, tokenizer, text)
    code_ids = [code_id(tokenizer, code_name(code)) for code in codes]
    return prefixed_log_likelihoods(model, ids, code_ids), len(ids)


def attribute(
    model,
    tokenizer,
    text: str,
    codes: Sequence[str] | None = None,
    prior: str | Mapping[str, float] | None = None,
    mixture: Mapping[str, float] | None = None,
) -> pd.DataFrame:
    """Rank ``codes`` (default: every code the tokenizer knows) as the source of ``text``.

    ``prior``: None or ``"uniform"``; ``"mixture"`` (needs ``mixture``, the training weights saved
    with the model); or a mapping code -> weight. Returns one row per code, most likely first:
    ``code, rank, probability, log_likelihood, prior, perplexity, tokens``.
    """
    known = tokenizer_codes(tokenizer)
    codes = list(known if codes is None else [code_name(code) for code in codes])
    if not codes:
        raise ValueError("no control codes to attribute to")
    unknown = [code for code in codes if code not in known]
    if unknown:
        raise ValueError(f"unknown control code(s) {', '.join(map(repr, unknown))}; "
                         f"this model knows: {', '.join(known)}")
    if prior is None or prior == "uniform":
        weights = [1.0] * len(codes)
    elif prior == "mixture":
        if mixture is None:
            raise ValueError("prior='mixture' needs the training mixture (saved with the model as control_codes.json)")
        weights = [float(mixture.get(code, 0.0)) for code in codes]
    elif isinstance(prior, Mapping):
        weights = [float(prior.get(code, 0.0)) for code in codes]
    else:
        raise ValueError(f"prior must be 'uniform', 'mixture' or a mapping code -> weight, got {prior!r}")
    log_likelihoods, n = code_log_likelihoods(model, tokenizer, text, codes)
    probabilities = posterior(log_likelihoods, weights)
    total = sum(weights)
    table = pd.DataFrame({
        "code": codes,
        "probability": probabilities,
        "log_likelihood": log_likelihoods,
        "prior": [w / total for w in weights],
        "perplexity": [math.exp(-ll / n) for ll in log_likelihoods],
        "tokens": n,
    })
    table = table.sort_values("probability", ascending=False, kind="stable").reset_index(drop=True)
    table.insert(1, "rank", range(1, len(table) + 1))
    return table


def attribution_table(
    model,
    tokenizer,
    texts: Mapping[str, Sequence[str]],
    max_chars: int = 0,
    prior: str | Mapping[str, float] | None = None,
    mixture: Mapping[str, float] | None = None,
) -> pd.DataFrame:
    """Attribute every held-out text of every code; one row per text: ``true_code, predicted,
    probability`` (of the prediction), ``true_probability``, ``true_rank``, ``correct``.
    ``max_chars``: score only the start of each text (0: as much as fits the context)."""
    codes = list(texts)
    rows = []
    for true_code, documents in texts.items():
        for index, text in enumerate(documents):
            table = attribute(model, tokenizer, text[:max_chars] if max_chars else text, codes, prior, mixture)
            mine = table[table["code"] == true_code].iloc[0]
            rows.append({"true_code": true_code, "document": index, "predicted": table.loc[0, "code"],
                         "probability": float(table.loc[0, "probability"]),
                         "true_probability": float(mine["probability"]), "true_rank": int(mine["rank"]),
                         "correct": bool(table.loc[0, "code"] == true_code)})
    return pd.DataFrame(rows)


__all__ = ["attribute", "attribution_table", "code_log_likelihoods", "context_ids", "posterior",
           "prefixed_log_likelihoods"]
