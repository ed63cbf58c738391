"""Sampling rules as ``transformers`` ``LogitsProcessor``s: temperature, top-k, nucleus, greedy, and
two repetition penalties, named for what they are.

- :class:`CTRLRepetitionPenalty` -- the paper's penalised sampling (Keskar et al. 2019, eq. 2):
  ``p_i = exp(x_i / (T * I(i in g))) / sum_j exp(x_j / (T * I(j in g)))`` with ``I(c) = theta`` if
  ``c`` else 1, ``g`` the tokens generated so far. The logit of every token already in the
  sequence is *divided* by ``theta`` whatever its sign, so a negative logit moves towards 0 and
  such a token becomes *more* likely (a quirk of the formula that we keep, and test). Division
  by ``theta`` commutes with the division by ``T``, so this processor and temperature may run in
  either order; it must run before top-k/top-p (they look at the penalised logits). Optional:
  ``exempt_ids`` (e.g. the newline tokens) are never penalised, as in the Salesforce code's
  option to let line breaks repeat.
  ``g``: our reading, like the Salesforce generation script, is every token of the sequence so
  far, prompt included (``prompt_length`` restricts it to the tokens after the prompt).
- :class:`HFRepetitionPenalty` -- Hugging Face's ``repetition_penalty`` (``generate(...,
  repetition_penalty=θ)``): positive logits are divided by θ, *negative ones multiplied* by θ, so a
  repeated token always loses probability; HF applies it before temperature. Here it is HF's own
  ``RepetitionPenaltyLogitsProcessor`` under an honest name.

:func:`build_processors` turns a :class:`SamplingConfig` into the ``LogitsProcessorList`` in the
order HF's ``generate`` uses (penalties, temperature, top-k, top-p); ``greedy`` is argmax of the
processed logits. The list works with ``model.generate(logits_processor=..., do_sample=...)`` and
with our batched multi-code loop (``generation.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from transformers import LogitsProcessor, LogitsProcessorList
from transformers.generation.logits_process import (
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

PENALTIES = ("none", "ctrl", "hf")


class CTRLRepetitionPenalty(LogitsProcessor):
    """Divide the logit of every token already in the sequence by ``penalty`` (θ), whatever its sign."""

    def __init__(self, penalty: float, exempt_ids: Iterable[int] = (), prompt_length: int = 0) -> None:
        if not penalty > 0:
            raise ValueError(f"the CTRL penalty θ must be > 0 (the paper uses 1.2), got {penalty}")
        self.penalty = float(penalty)
        self.exempt_ids = sorted(set(int(i) for i in exempt_ids))
        self.prompt_length = int(prompt_length)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        # input_ids (B, L), scores (B, V)
        seen = torch.zeros_like(scores, dtype=torch.bool)
        seen.scatter_(1, input_ids[:, self.prompt_length:], True)
        if self.exempt_ids:
            seen[:, self.exempt_ids] = False
        return torch.where(seen, scores / self.penalty, scores)


class HFRepetitionPenalty(RepetitionPenaltyLogitsProcessor):
    """Hugging Face's ``repetition_penalty``: positive logits / θ, negative logits * θ."""


@dataclass(frozen=True)
class SamplingConfig:
    """How to pick the next token. The paper's recipe: ``penalty="ctrl", theta=1.2, greedy=True``
    (or temperature sampling with the penalty)."""

    temperature: float = 1.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # nucleus; 1.0: off
    greedy: bool = False  # argmax of the processed logits
    penalty: str = "none"  # "none" | "ctrl" (the paper's) | "hf" (transformers' repetition_penalty)
    theta: float = 1.2  # the penalty's θ
    exempt_newlines: bool = False  # ctrl penalty: never penalise tokens that contain a newline

    def __post_init__(self) -> None:
        if self.penalty not in PENALTIES:
            raise ValueError(f"penalty {self.penalty!r} is not one of {PENALTIES}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if self.top_k < 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"top_k must be >= 0 and 0 < top_p <= 1, got {self.top_k}, {self.top_p}")


def newline_ids(tokenizer) -> list[int]:
    """Ids of the tokens whose text contains a line break."""
    return [i for token, i in tokenizer.get_vocab().items() if "\n" in tokenizer.convert_tokens_to_string([token])]


def build_processors(config: SamplingConfig, tokenizer=None, prompt_length: int = 0) -> LogitsProcessorList:
    """The processors of ``config``, in application order (``tokenizer``: for ``exempt_newlines``)."""
    processors = LogitsProcessorList()
    if config.penalty == "ctrl":
        exempt = newline_ids(tokenizer) if config.exempt_newlines and tokenizer is not None else ()
        processors.append(CTRLRepetitionPenalty(config.theta, exempt, prompt_length))
    elif config.penalty == "hf":
        processors.append(HFRepetitionPenalty(config.theta))
    if config.temperature != 1.0:
        processors.append(TemperatureLogitsWarper(config.temperature))
    if config.top_k:
        processors.append(TopKLogitsWarper(config.top_k))
    if config.top_p < 1.0:
        processors.append(TopPLogitsWarper(config.top_p))
    return processors


def next_token(scores: torch.Tensor, config: SamplingConfig, generator: torch.Generator | None = None) -> torch.Tensor:
    """Greedy or sampled next token from processed ``scores`` (B, V) -> (B,)."""
    if config.greedy:
        return scores.argmax(dim=-1)
    probs = torch.softmax(scores.float(), dim=-1)
    if generator is not None:  # a generator draws on its own device (CPU ones for reproducibility)
        return torch.multinomial(probs.to(generator.device), 1, generator=generator).squeeze(1).to(scores.device)
    return torch.multinomial(probs, 1).squeeze(1)


__all__ = ["CTRLRepetitionPenalty", "HFRepetitionPenalty", "PENALTIES", "SamplingConfig", "build_processors",
           "newline_ids", "next_token"]
