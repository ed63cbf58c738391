"""Word-level language-modelling data of a domain: a vocabulary and three id streams.

Every word-level study (the quick start, the Welch embedding study, its n-gram and transformer
baselines) reads its data through :func:`load_word_lm`, so they share one vocabulary rule (the
UNK cutoff K of Welch et al. Table 3, ``lmstudy.text.Vocab``) and one way of cutting smaller
slices (whole sentences from the start of each part).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lmstudy.data.parts import split_tokens
from lmstudy.text import Vocab


@dataclass
class WordLMData:
    """A domain's word-level LM data: the vocabulary, train/valid/test id streams, the valid sentences as words."""

    vocab: Vocab
    train: torch.Tensor  # (L,) ids, <eos> after every sentence
    valid: torch.Tensor
    test: torch.Tensor
    valid_sentences: list[list[str]]


def first_tokens(sentences: list[list[str]], tokens: int) -> list[list[str]]:
    """The first whole sentences holding at least ``tokens`` tokens (``<eos>`` included); all for 0."""
    if not tokens:
        return sentences
    total = 0
    for index, sentence in enumerate(sentences):
        total += len(sentence) + 1
        if total >= tokens:
            return sentences[: index + 1]
    return sentences


def load_word_lm(domain: str, unk_cutoff: int, train_tokens: int = 0, eval_tokens: int = 0) -> WordLMData:
    """The domain's train/valid/test as id streams over a vocabulary with UNK cutoff ``unk_cutoff``.

    With ``train_tokens`` / ``eval_tokens`` the parts are cut to their first whole sentences first, and
    the vocabulary is that of the cut training text (it is the LM's training set), plus with K = 0 the
    word types of the cut valid and test text.
    """
    sentences = {part: first_tokens(split_tokens(domain, part), train_tokens if part == "train" else eval_tokens)
                 for part in ("train", "valid", "test")}
    counts: dict[str, int] = {}
    for sentence in sentences["train"]:
        for word in sentence:
            counts[word] = counts.get(word, 0) + 1
    extra = {w for part in ("valid", "test") for s in sentences[part] for w in s} if unk_cutoff == 0 else ()
    vocab = Vocab.build(counts, min_count=unk_cutoff, extra_words=extra)

    def stream(part: str) -> torch.Tensor:
        return torch.tensor(vocab.encode_sentences(sentences[part]), dtype=torch.long)

    return WordLMData(vocab, stream("train"), stream("valid"), stream("test"), sentences["valid"])
