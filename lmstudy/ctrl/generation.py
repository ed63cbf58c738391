"""Batched multi-code generation: one prompt, K control codes, one batch, one KV cache.

Row k of the batch is ``[code_k] + ids(prompt)``, left-padded to a common length (attention mask 0
on the padding, position ids counted from each row's first real token, so a row's output does not
depend on the other rows). One forward pass over the whole batch per new token, reusing the KV
cache of the previous steps.

Why a loop of our own rather than ``model.generate``: a side-by-side comparison should be
reproducible per column and fair across columns. ``generate`` draws every row's sample from one
global RNG stream, so the text of column k changes when columns are added, removed or reordered.
Here column k samples with its own ``torch.Generator`` (CPU, seeded with ``seeds[k]``; by default
every column gets the same ``seed``: common random numbers, so two columns differ because of
their codes, not their luck). The sampling rules are the same ``LogitsProcessor``s that
``generate`` takes (``sampling.build_processors``), applied to each row's own unpadded tokens, so
the repetition penalties never see padding. With ``greedy`` this loop gives ``generate``'s greedy
output (tested).

One loop, two consumers: :func:`stream_rows` is a generator that yields every row's new token (and
its log-probability under the model, for the app's perplexity) after each step;
:func:`generate_rows` runs it to the end, and the app (``lmstudy.ctrl.serving``) shows the text
of each column as it grows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from lmstudy.ctrl.codes import check_secondary, code_name, get_code
from lmstudy.ctrl.data import code_id
from lmstudy.ctrl.sampling import SamplingConfig, build_processors, next_token


@dataclass
class Generation:
    """One column of :func:`generate_codes`: its code, the prompt, the continuation (text and ids), the seed."""

    code: str
    prompt: str
    text: str  # the continuation only
    token_ids: list[int]  # the continuation's ids
    seed: int


def tokenizer_codes(tokenizer) -> list[str]:
    """The control codes a tokenizer knows (its ``<|NAME|>`` special tokens, eos excluded)."""
    added = sorted(tokenizer.get_added_vocab().items(), key=lambda item: item[1])  # (token, id), by id
    return [code_name(token) for token, _ in added
            if token.startswith("<|") and token.endswith("|>") and token != tokenizer.eos_token]


@dataclass
class CodePrefix:
    """What a (possibly composite) code puts before the prompt: the code's name as typed, the ids of the
    code token and its secondary code, and the glue between them and the prompt ("" or " ")."""

    code: str
    ids: list[int]
    glue: str = ""


def code_prefix(tokenizer, code: str, known: Sequence[str] | None = None) -> CodePrefix:
    """``Reviews`` -> ``<|Reviews|>``; a composite ``DOMAIN SECONDARY`` (``Reviews Rating: 5.0``, or code-mixed
    ``r/Sports English:``, see ``codes``) -> the code token + the secondary code's ids, then a line break, or
    a space when the secondary code ends with ``:`` (``Q:``, ``English:``: the prompt follows on its line)."""
    known = tokenizer_codes(tokenizer) if known is None else list(known)
    name, _, secondary = code.strip().partition(" ")
    name, secondary = get_code(name, known), secondary.strip()
    ids = [code_id(tokenizer, name)]
    if not secondary:
        return CodePrefix(name, ids)
    check_secondary(name, secondary)
    if secondary.endswith(":"):
        return CodePrefix(f"{name} {secondary}", ids + tokenizer(secondary, add_special_tokens=False)["input_ids"], " ")
    return CodePrefix(f"{name} {secondary}", ids + tokenizer(secondary + "\n", add_special_tokens=False)["input_ids"])


def _check_inputs(tokenizer, prompt: str, codes: Sequence[str]) -> list[CodePrefix]:
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("the prompt is empty: give some text for the model to continue")
    if not codes:
        raise ValueError("no control codes given: name at least one")
    known = tokenizer_codes(tokenizer)
    unknown = [code for code in codes if code_name(code.strip().partition(" ")[0]) not in known]
    if unknown:
        raise ValueError(f"unknown control code(s) {', '.join(map(repr, unknown))}; "
                         f"this model knows: {', '.join(known)}")
    return [code_prefix(tokenizer, code, known) for code in codes]


@dataclass
class Step:
    """One decoding step of :func:`stream_rows`: what each row produced."""

    tokens: list[int | None]  # the new token of each row; None: the row had already finished (eos)
    log_probs: list[float | None]  # log p(token | row so far) under the model itself, before the sampling rules


@torch.no_grad()
def stream_rows(
    model,
    rows: Sequence[Sequence[int]],
    sampling: SamplingConfig,
    max_new_tokens: int,
    seeds: Sequence[int],
    eos_token_id: int,
    tokenizer=None,
    stop_at_eos: bool = True,
) -> Iterator[Step]:
    """THE decoding loop: continue each row of token ids (rows may differ in length) in one
    left-padded batch with a KV cache, yielding a :class:`Step` (every row's new token) after each
    forward pass. Row k samples with a CPU generator seeded ``seeds[k]``. A row stops after its eos
    (when ``stop_at_eos``); the loop stops when every row has stopped or after ``max_new_tokens``
    (fewer when the model's context is reached). ``tokenizer``: only for ``sampling.exempt_newlines``.
    :func:`generate_rows` consumes it whole; the app streams it column by column."""
    if not rows or any(len(row) == 0 for row in rows):
        raise ValueError("every row needs at least one token")
    if len(seeds) != len(rows):
        raise ValueError(f"{len(seeds)} seeds for {len(rows)} rows")
    longest = max(len(row) for row in rows)
    limit = context_length(model)
    if limit is not None:
        if longest >= limit:
            raise ValueError(f"the input is {longest} tokens (code included); this model reads at most {limit - 1}")
        max_new_tokens = min(max_new_tokens, limit - longest)

    device = next(model.parameters()).device
    batch = len(rows)
    # Left padding: every row ends at the same position, so one new column per step serves all.
    # (The padding token is never attended to; eos is as good as any.)
    input_ids = torch.tensor([[eos_token_id] * (longest - len(row)) + list(row) for row in rows], device=device)
    attention_mask = torch.tensor([[0] * (longest - len(row)) + [1] * len(row) for row in rows], device=device)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (K, L): 0 at each row's first real token
    processors = build_processors(sampling, tokenizer, prompt_length=0)
    generators = [torch.Generator().manual_seed(int(s)) for s in seeds]

    was_training = model.training
    model.eval()
    try:  # a consumer may stop early (a closed browser tab): restore the training flag anyway
        sequences = [list(row) for row in rows]  # each row's real tokens so far
        finished = [False] * batch
        out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1, :]  # (K, V)
        for index in range(max_new_tokens):
            log_softmax = torch.log_softmax(logits.float(), dim=-1)  # (K, V): the model's own distribution
            step = Step([], [])
            for k in range(batch):
                if finished[k]:
                    step.tokens.append(None)
                    step.log_probs.append(None)
                    continue
                seen = torch.tensor([sequences[k]], dtype=torch.long, device=device)  # (1, t): no padding
                scores = processors(seen, logits[k : k + 1].float())  # (1, V)
                token = int(next_token(scores, sampling, None if sampling.greedy else generators[k]))
                sequences[k].append(token)
                step.tokens.append(token)
                step.log_probs.append(float(log_softmax[k, token]))
                finished[k] = stop_at_eos and token == eos_token_id
            yield step
            if all(finished) or index == max_new_tokens - 1:
                break  # (no forward pass for a token nobody will read)
            new = [eos_token_id if token is None else token for token in step.tokens]
            new_ids = torch.tensor(new, dtype=torch.long, device=device).unsqueeze(1)  # (K, 1)
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones(batch, 1)], dim=1)  # (K, L+t)
            position_ids = position_ids[:, -1:] + 1  # (K, 1)
            out = model(input_ids=new_ids, attention_mask=attention_mask, position_ids=position_ids,
                        past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[:, -1, :]
    finally:
        model.train(was_training)


def generate_rows(
    model,
    rows: Sequence[Sequence[int]],
    sampling: SamplingConfig,
    max_new_tokens: int,
    seeds: Sequence[int],
    eos_token_id: int,
    tokenizer=None,
    stop_at_eos: bool = True,
) -> list[list[int]]:
    """:func:`stream_rows` run to the end: the new ids of each row (without the final eos)."""
    continuations: list[list[int]] = [[] for _ in rows]
    for step in stream_rows(model, rows, sampling, max_new_tokens, seeds, eos_token_id, tokenizer, stop_at_eos):
        for k, token in enumerate(step.tokens):
            if token is not None:
                continuations[k].append(token)
    if stop_at_eos:
        continuations = [ids[:-1] if ids and ids[-1] == eos_token_id else ids for ids in continuations]
    return continuations


def context_length(model) -> int | None:
    """The most positions ``model`` reads (GPT-2's ``n_positions``, else ``max_position_embeddings``)."""
    config = model.config
    return getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)


def generate_codes(
    model,
    tokenizer,
    prompt: str,
    codes: Sequence[str],
    sampling: SamplingConfig = SamplingConfig(),
    max_new_tokens: int = 50,
    seed: int = 0,
    seeds: Sequence[int] | None = None,
    stop_at_eos: bool = True,
) -> list[Generation]:
    """Continue ``prompt`` under each of ``codes`` in one batch; one :class:`Generation` per code.
    A code may be composite (``Reviews Rating: 5.0``, code-mixed ``r/Sports English:``: :func:`code_prefix`)."""
    prefixes = _check_inputs(tokenizer, prompt, codes)
    seeds = [seed] * len(codes) if seeds is None else list(seeds)
    if len(seeds) != len(codes):
        raise ValueError(f"{len(seeds)} seeds for {len(codes)} codes")
    # Plain codes are one token each, so their rows are equally long; composite codes add their
    # secondary code's tokens, and generate_rows left-pads the rows to a common length.
    rows = [prefix.ids + tokenizer(prefix.glue + prompt, add_special_tokens=False)["input_ids"] for prefix in prefixes]
    continuations = generate_rows(model, rows, sampling, max_new_tokens, seeds, tokenizer.eos_token_id,
                                  tokenizer, stop_at_eos)
    return [Generation(prefix.code, prompt, tokenizer.decode(ids), ids, seeds[k])
            for k, (prefix, ids) in enumerate(zip(prefixes, continuations))]


__all__ = ["CodePrefix", "Generation", "Step", "code_prefix", "context_length", "generate_codes", "generate_rows",
           "stream_rows",
           "tokenizer_codes"]
