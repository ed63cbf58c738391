"""Word-level text: PTB-style normalisation, a vocabulary with an UNK cutoff, rare-word statistics.

Welch et al. (2020) train word-level AWD-LSTMs on text preprocessed "like the Mikolov PTB": lower-cased,
numbers replaced by ``N``, punctuation removed, and (for their *Rare* data) rare words kept. Their script
(``make-non-unk-ptb.py`` at jkk.name/emnlp20lm) works on treebank tokens; we start from raw text, so we
tokenise with nltk's :class:`~nltk.tokenize.TreebankWordTokenizer` (pure regular expressions, no download)
and then apply the same token rules. Decisions, in the order they are applied to each non-empty line:

1. Typography: curly quotes/apostrophes become ``"``/``'``, an en dash ``–`` becomes ``-`` (``1990–95``
   is one token), an em dash ``—`` becomes `` -- `` (a separator, dropped as punctuation below).
2. URLs (``http(s)://...``, ``www....``) and e-mail addresses become the single word ``<url>``: they
   are one unit of meaning, and the tokeniser would otherwise shred them into many junk words.
   ``<unk>`` (Mikolov's PTB is already UNK'd) and ``<url>`` in the input stay one token each, and so
   does an isolated capital ``N`` (the number symbol): normalising normalised text changes nothing.
3. Tokenise the rest of the line with the Treebank rules: clitics split as in PTB (``does n't``,
   ``company 's``, ``they 're``), ``$ # % ; @`` and brackets split off, ``--`` and ``...`` separated.
   One change: ``&`` between letters stays inside the word (``at&t``, ``s&p`` are PTB words).
4. Lower-case.
5. Periods. The Treebank tokeniser only splits the period at the very end of the line, so a word that
   ends a sentence inside a paragraph keeps its period (``world.``). A word keeps a final period only if
   it is an abbreviation: letters joined by periods (``u.s.``, ``p.m.``, ``j.``) or one of
   :data:`ABBREVIATIONS` (``mr.``, ``inc.``, ``oct.``, ...); every other trailing period is removed.
   At the end of a line an abbreviation gets its period back (``U.S.`` -> ``u.s.``, as Mikolov's data has).
6. Punctuation is removed: a token made only of punctuation/symbol characters is dropped, except
   ``$``, ``#``, ``&`` and ``'`` which PTB keeps as words (``'`` is the possessive of plurals:
   ``investors '``), and ``%`` which becomes ``N`` (Mikolov's PTB has ``N N`` for ``5 %``); ``£``
   becomes ``#`` (the WSJ's pound sign). An opening single quote glued to a word (``'quoted``) is
   removed, but the clitics (``'s``, ``'re``, ...) and ``'80s`` stay.
   Brackets, asterisks, underscores etc. at the edges of a word are stripped (``*really*`` -> ``really``).
   Hyphens inside words stay (``snack-food``, ``30-year``: PTB words); at the edges they are stripped.
7. Numbers: a token with a digit and no letter or apostrophe becomes ``N`` (``1,000``, ``3.5``,
   ``10:30``, ``-5`` -> ``N``; ``1980s``, ``30-year``, ``'80s`` stay), the rule of ``make-non-unk-ptb.py``.

The result is one token list per non-empty line of the input (a line = a sentence; the language model
adds ``<eos>`` after each). On Mikolov's ``ptb.valid.txt`` normalisation leaves more than 99.9% of the
tokens unchanged (tests/test_text.py measures it).

:class:`Vocab` implements the UNK cutoff K of Welch et al.'s Table 3 and :func:`rare_word_stats` the
statistics of their Table 4.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lmstudy.runs import atomic_write_text

# Bump when a rule below changes: cached normalised text (lmstudy.data.splits) is rebuilt.
NORMALISATION_VERSION = 1

UNK = "<unk>"
EOS = "<eos>"
URL = "<url>"
NUMBER = "N"

# Abbreviations that keep their period (besides letter-period forms like u.s. or j.): the frequent
# abbreviations of Mikolov's PTB (titles, company suffixes, months, US states) plus common English ones.
ABBREVIATIONS = frozenset(
    """
    mr mrs ms dr jr sr st prof rep reps sen sens gov govs gen adm lt col sgt capt rev messrs mt ft
    co corp inc ltd plc bros cos cie assn dept univ no vs etc approx est
    jan feb mar apr aug sept sep oct nov dec
    ala ariz ark calif colo conn del fla ga ill ind kan ky la md mass mich minn miss mo mont neb nev
    okla ore pa tenn tex va vt wash wis wyo
    """.split()
)

# Kept although made only of punctuation/symbols: PTB has them as words.
_KEPT_SYMBOLS = frozenset({"$", "#", "&", "'"})
_SYMBOL_MAP = {"%": NUMBER}
_CLITICS = frozenset({"'s", "'re", "'ve", "'m", "'ll", "'d", "n't"})
# Characters stripped from the edges of a word (never '$', '#', '&', apostrophes or periods: see above).
_EDGE_JUNK = "*_~^=+|\\/<>{}[]()\"`-,:;!?"

_TYPOGRAPHY = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"',
                             "\u2013": "-", "\u2014": " -- ", "\u00a0": " ", "\u00a3": "#"})
# Pieces of a line that must not go through the tokeniser: URLs/e-mails, <unk>, an isolated N.
# Each is swapped for a private-use character (never in real text) while the line is tokenised.
_PROTECTED = re.compile(
    r"(?P<url>(?:https?://|www\.)\S+|\S+@\S+\.[A-Za-z]{2,}\b|<url>)"
    r"|(?P<unk><unk>)"
    r"|(?P<number>(?<!\S)N(?!\S))"
)
_PLACEHOLDERS = {"url": "\ue000", "unk": "\ue001", "number": "\ue002"}
_RESTORED = {"\ue000": URL, "\ue001": UNK, "\ue002": NUMBER}
_LETTER_ABBREVIATION = re.compile(r"(?:[\w-]*-)?(?:[^\W\d_]\.)+")  # u.s. p.m. j. non-u.s.


def _keep_inner_ampersand(rules: list) -> list:
    """nltk's Treebank punctuation rules, with ``&`` split off only when not between word characters."""
    split_symbols = r"[;@#$%&]"
    if split_symbols not in [getattr(pattern, "pattern", None) for pattern, _ in rules]:
        raise RuntimeError(f"nltk's TreebankWordTokenizer has no rule {split_symbols!r} any more: "
                           "update _keep_inner_ampersand in lmstudy/text.py")
    ampersand_rule = (re.compile(r"[;@#$%]|(?<!\w)&|&(?!\w)"), r" \g<0> ")
    return [ampersand_rule if getattr(pattern, "pattern", None) == split_symbols else (pattern, substitution)
            for pattern, substitution in rules]


@functools.cache
def _word_tokenizer():
    """nltk's Treebank tokenizer, except that ``&`` between word characters stays inside the word (at&t, s&p).
    Built on first use: importing nltk takes seconds (it imports scipy), which every ``lmstudy`` command that
    imports this module would otherwise pay, tokenising or not."""
    from nltk.tokenize import TreebankWordTokenizer

    class PTBWordTokenizer(TreebankWordTokenizer):
        PUNCTUATION = _keep_inner_ampersand(TreebankWordTokenizer.PUNCTUATION)

    return PTBWordTokenizer()


def _is_abbreviation(word: str) -> bool:
    """``word`` ends with a period that belongs to it (u.s., mr., j.)."""
    return bool(_LETTER_ABBREVIATION.fullmatch(word)) or word[:-1] in ABBREVIATIONS


def _is_symbols(token: str) -> bool:
    return all(unicodedata.category(char)[0] in "PS" for char in token)


@functools.lru_cache(maxsize=1 << 18)  # word frequencies are Zipfian: most calls are repeats
def _clean_token(token: str) -> str | None:
    """Steps 5-7 of the module docstring for one lower-cased token; None drops it."""
    if token in _SYMBOL_MAP:
        return _SYMBOL_MAP[token]
    if token in _KEPT_SYMBOLS or token in _CLITICS:
        return token
    token = token.strip(_EDGE_JUNK)
    if token.endswith(".") and not _is_abbreviation(token):
        token = token.rstrip(".")
    if token.startswith("'") and token not in _CLITICS and not token[1:2].isdigit():
        token = token.lstrip("'")  # an opening quote, not part of the word
    if not token or _is_symbols(token):
        return None
    has_digit = any(char.isdigit() for char in token)
    has_letter = any(char.isalpha() or char == "'" for char in token)
    if has_digit and not has_letter:
        return NUMBER
    return token


def normalise_line(line: str) -> list[str]:
    """One line of raw text -> its PTB-style tokens (possibly empty). See the module docstring."""
    line = line.translate(_TYPOGRAPHY)
    # Protected pieces become private-use characters the tokeniser leaves alone, so a line is
    # tokenised in one call; they are turned into their words again below.
    line = _PROTECTED.sub(lambda match: f" {_PLACEHOLDERS[match.lastgroup]} ", line)
    tokens = [token.lower() for token in _word_tokenizer().tokenize(line)]
    # The tokeniser splits the line-final period off an abbreviation: U.S. -> u.s .  -> u.s.
    if len(tokens) >= 2 and tokens[-1] == "." and _is_abbreviation(tokens[-2] + "."):
        tokens[-2:] = [tokens[-2] + "."]
    cleaned = []
    for token in tokens:
        if token in _RESTORED:
            cleaned.append(_RESTORED[token])
        elif (token := _clean_token(token)) is not None:
            cleaned.append(token)
    return cleaned


def normalise_ptb(text: str) -> list[list[str]]:
    """PTB-style normalisation of any text: one token list per non-empty line (a line = a sentence).

    Lines whose tokens are all removed (e.g. a line of punctuation) are dropped, so every returned
    sentence is non-empty. The language model adds ``<eos>`` after each sentence.
    """
    sentences = []
    for line in text.splitlines():
        if line.strip() and (tokens := normalise_line(line)):
            sentences.append(tokens)
    return sentences


def count_tokens(sentences: Iterable[list[str]], with_eos: bool = True) -> int:
    """Number of tokens of ``sentences``, plus one ``<eos>`` per sentence when ``with_eos``."""
    return sum(len(sentence) + with_eos for sentence in sentences)


@dataclass(frozen=True)
class UnkRate:
    """Share of a text replaced by ``<unk>`` (Welch et al. Table 3, bottom half), in percent."""

    token_pct: float
    type_pct: float
    tokens: int  # word tokens looked at (specials excluded)
    types: int


class Vocab:
    """Word <-> id map built from training-split counts with the UNK cutoff K of Welch et al. Table 3.

    Their definition: list the words of the training set with their counts; a word whose count in that
    list is below K becomes ``<unk>``, and a word absent from the list counts 0. So K >= 1 makes every
    word not seen in training ``<unk>``. With K = 0 nothing is replaced, and every word of the
    evaluation text must still have an id (an embedding row): pass those words as ``extra_words``
    (e.g. the types of valid and test); they get ids after the training words, with count 0. A word of
    valid/test that is neither in training nor in ``extra_words`` still maps to ``<unk>``.

    Ids: ``<unk>`` = 0, ``<eos>`` = 1, then words by decreasing training count (ties alphabetical), then
    the extra words alphabetically. A literal ``<unk>`` in the training text (Mikolov's PTB) is the
    ``<unk>`` id.
    """

    specials = (UNK, EOS)

    def __init__(self, words: Iterable[str], counts: Mapping[str, int], min_count: int):
        self.itos: list[str] = list(self.specials) + [word for word in words if word not in self.specials]
        self.stoi: dict[str, int] = {word: index for index, word in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise ValueError("Vocab words must be unique")
        self.counts: Counter[str] = Counter(counts)
        self.min_count = min_count
        self.unk_id = self.stoi[UNK]
        self.eos_id = self.stoi[EOS]

    @classmethod
    def build(cls, train_counts: Mapping[str, int], min_count: int = 0,
              extra_words: Iterable[str] = ()) -> Vocab:
        """Vocabulary of the words with ``train_counts[word] >= min_count`` (K), plus ``extra_words``
        when ``min_count == 0`` (see the class docstring)."""
        if min_count < 0:
            raise ValueError(f"min_count (the UNK cutoff K) must be >= 0, got {min_count}")
        kept = sorted((word for word, count in train_counts.items() if count >= min_count),
                      key=lambda word: (-train_counts[word], word))
        if min_count == 0:
            seen = set(kept)
            kept += sorted({word for word in extra_words if word not in seen})
        return cls(kept, train_counts, min_count)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, word: str) -> bool:
        return word in self.stoi

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """Ids of ``tokens``; unknown words -> the ``<unk>`` id."""
        return [self.stoi.get(token, self.unk_id) for token in tokens]

    def encode_sentences(self, sentences: Iterable[list[str]]) -> list[int]:
        """One id stream for many sentences, ``<eos>`` after each (the LM's input format)."""
        ids: list[int] = []
        for sentence in sentences:
            ids.extend(self.encode(sentence))
            ids.append(self.eos_id)
        return ids

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.itos[index] for index in ids]

    def unk_rate(self, tokens: Iterable[str]) -> UnkRate:
        """Percent of word tokens and word types of ``tokens`` that this vocabulary maps to ``<unk>``.

        Specials (``<unk>``, ``<eos>``) in ``tokens`` are not counted: a word already ``<unk>`` in the
        text is not *replaced*.
        """
        type_counts = Counter(token for token in tokens if token not in self.specials)
        unknown = [word for word in type_counts if word not in self.stoi]
        total = sum(type_counts.values())
        unknown_tokens = sum(type_counts[word] for word in unknown)
        return UnkRate(
            token_pct=100.0 * unknown_tokens / total if total else 0.0,
            type_pct=100.0 * len(unknown) / len(type_counts) if type_counts else 0.0,
            tokens=total,
            types=len(type_counts),
        )

    def save(self, path: str | Path) -> None:
        """Write the vocabulary as JSON (``min_count``, ``itos``, ``counts``), atomically."""
        payload = {"min_count": self.min_count, "itos": self.itos, "counts": dict(self.counts)}
        atomic_write_text(Path(path), json.dumps(payload, ensure_ascii=False))

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        payload = json.loads(Path(path).read_text(encoding="utf-8"))
        if payload.get("itos", [None])[: len(cls.specials)] != list(cls.specials):
            raise ValueError(f"{path} is not a Vocab file (expected 'itos' starting with {cls.specials})")
        return cls(payload["itos"][len(cls.specials):], payload["counts"], payload["min_count"])

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Vocab) and self.itos == other.itos and self.counts == other.counts
                and self.min_count == other.min_count)

    def __repr__(self) -> str:
        return f"Vocab({len(self)} words, min_count={self.min_count})"


@dataclass(frozen=True)
class RareWordStats:
    """Welch et al. Table 4 for one dataset, all in percent.

    ``train_*``: share of training types/tokens whose training count is <= threshold; ``pretrain_*``:
    the same within the pretraining data; ``train_in_pre_*``: share of training types/tokens whose
    count *in the pretraining data* is <= threshold (0 when absent there).
    """

    train_type_pct: float
    train_token_pct: float
    pretrain_type_pct: float
    pretrain_token_pct: float
    train_in_pre_type_pct: float
    train_in_pre_token_pct: float


def _rare_shares(counts: Mapping[str, int], rare: Iterable[str]) -> tuple[float, float]:
    """(type %, token %) of the words ``rare`` among ``counts``."""
    rare = list(rare)
    total = sum(counts.values())
    if not counts or not total:
        return 0.0, 0.0
    return 100.0 * len(rare) / len(counts), 100.0 * sum(counts[word] for word in rare) / total


def rare_word_stats(train_counts: Mapping[str, int], pretrain_counts: Mapping[str, int],
                    threshold: int = 5) -> RareWordStats:
    """Welch et al. Table 4: how rare the words are in training, in pretraining, and training words
    in pretraining ("Train in Pre"); a word is rare when it occurs ``threshold`` times or fewer.

    ``<unk>`` and ``<eos>`` are not words and are left out of both counts (Mikolov's PTB has 45k
    ``<unk>`` tokens, which would otherwise count as 5% of "rare" training tokens in pretraining).
    """
    train = {word: count for word, count in train_counts.items() if word not in Vocab.specials and count > 0}
    pretrain = {word: count for word, count in pretrain_counts.items()
                if word not in Vocab.specials and count > 0}
    train_type, train_token = _rare_shares(train, (w for w, c in train.items() if c <= threshold))
    pre_type, pre_token = _rare_shares(pretrain, (w for w, c in pretrain.items() if c <= threshold))
    in_pre_type, in_pre_token = _rare_shares(train, (w for w in train if pretrain.get(w, 0) <= threshold))
    return RareWordStats(train_type, train_token, pre_type, pre_token, in_pre_type, in_pre_token)


__all__ = ["ABBREVIATIONS", "EOS", "NORMALISATION_VERSION", "NUMBER", "RareWordStats", "UNK", "URL",
           "UnkRate", "Vocab", "count_tokens", "normalise_line", "normalise_ptb",
           "rare_word_stats"]
