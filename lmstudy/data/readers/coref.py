"""Coreference documents: tokens, sentences, POS, mentions with clusters and entity types.

The record the Entity-Transformer study (GPT2E) and its NER probe read; filled by
:func:`lmstudy.data.readers.gum.read_gum_coref` and :func:`lmstudy.data.readers.litbank.read_litbank_coref`.

Spans are token offsets into ``CorefDocument.tokens``, ``start`` inclusive and ``end`` exclusive
(Python slice convention: ``tokens[m.start:m.end]`` is the mention's text).

Two span lists, because the coreference and the entity (NER) layers are annotated differently:

- ``mentions``: coreference mentions, each with the ``cluster_id`` of the entity it refers to
  (pronouns included). Mentions nest (``[[her] sister]``); :meth:`CorefDocument.token_clusters`
  resolves a token inside several mentions by a rule.
- ``entities``: the typed entity spans the NER probe is trained on (nested too); their outermost
  layer is :meth:`CorefDocument.entity_iob`.

CoNLL coreference column (``coref_spans``): per token ``_`` or brackets ``(id``, ``id)``, ``(id)``,
several per token, optionally separated by ``|`` (LitBank). The label between the brackets is the
cluster id (OntoGUM, LitBank) or ``type-id[-identity]`` (GUM, e.g. ``(person-10-Charles_Bolden``);
an opening is closed by the next closing with the same label.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

log = logging.getLogger(__name__)

CLUSTER_RULES = ("innermost", "outermost")

# One bracket item of a CoNLL coreference cell: "(label)", "(label" or "label)".
_BRACKET = re.compile(r"\(([^()|]+)\)|\(([^()|]+)|([^()|]+)\)")


@dataclass(frozen=True)
class Mention:
    """A span of tokens ``[start, end)``: a coreference mention (with ``cluster_id``) or an entity."""

    start: int
    end: int  # exclusive
    cluster_id: int | None = None
    entity_type: str | None = None

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass
class CorefDocument:
    """One coreference-annotated document (see the module docstring for the span conventions)."""

    doc_id: str
    split: str | None
    tokens: list[str]
    sentence_starts: list[int]  # token index where each sentence starts; [0, ...]
    pos: list[str] | None  # one tag per token (Universal POS for GUM); None when the corpus has none
    mentions: list[Mention]
    entities: list[Mention] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def sentences(self) -> list[list[str]]:
        """The tokens cut at ``sentence_starts``."""
        bounds = [*self.sentence_starts, len(self.tokens)]
        return [self.tokens[start:end] for start, end in zip(bounds, bounds[1:])]

    def first_sentences(self, n_tokens: int) -> CorefDocument:
        """The document cut after its last sentence that ends within its first ``n_tokens`` tokens (the first
        sentence at least), with the POS tags, mentions and entities inside the cut."""
        ends = [*self.sentence_starts[1:], len(self.tokens)]
        end = max((e for e in ends if e <= n_tokens), default=ends[0])
        return replace(self, tokens=self.tokens[:end], sentence_starts=[s for s in self.sentence_starts if s < end],
                       pos=None if self.pos is None else self.pos[:end],
                       mentions=[m for m in self.mentions if m.end <= end],
                       entities=[m for m in self.entities if m.end <= end])

    def clusters(self) -> dict[int, list[Mention]]:
        """Cluster id -> its mentions in text order."""
        by_cluster: dict[int, list[Mention]] = {}
        for mention in sorted(self.mentions, key=lambda m: (m.start, m.end)):
            by_cluster.setdefault(mention.cluster_id, []).append(mention)
        return by_cluster

    def token_clusters(self, rule: str = "innermost") -> list[int | None]:
        """The cluster id of every token (None outside all mentions).

        A token inside nested mentions takes the cluster of the shortest one (``"innermost"``:
        "her" in "[[her] sister]" is her, not the sister) or of the longest (``"outermost"``).
        Mentions of equal length over the same token: the one listed first wins.
        """
        return token_labels(self.mentions, len(self.tokens), rule, lambda m: m.cluster_id)

    def entity_iob(self) -> list[str]:
        """IOB tags (``B-PER``, ``I-PER``, ``O``) of the outermost layer of ``entities``."""
        return iob_tags(outermost_spans(self.entities), len(self.tokens))


def token_labels(spans: Sequence[Mention], n_tokens: int, rule: str, label_of) -> list:
    """Per-token ``label_of(span)`` of the innermost or outermost span covering each token."""
    if rule not in CLUSTER_RULES:
        raise ValueError(f"rule={rule!r} is not valid; choose one of: {', '.join(CLUSTER_RULES)}")
    labels: list = [None] * n_tokens
    # Paint spans so that the winner is painted last: innermost = longest first, shortest last.
    # sorted() is stable, so among equal lengths the first listed is painted last only if we
    # reverse the list first.
    order = sorted(reversed(spans), key=lambda m: m.length, reverse=(rule == "innermost"))
    for span in order:
        for index in range(max(span.start, 0), min(span.end, n_tokens)):
            labels[index] = label_of(span)
    return labels


def outermost_spans(spans: Sequence[Mention]) -> list[Mention]:
    """The spans not inside another one, left to right.

    Greedy over spans sorted by start, longest first: a span is kept when it starts at or after
    the end of the last kept one. Nested spans are dropped; of two identical spans the first listed
    is kept; a span crossing a kept one (rare annotation noise) is dropped too.
    """
    kept: list[Mention] = []
    order = sorted(enumerate(spans), key=lambda item: (item[1].start, -item[1].length, item[0]))
    for _, span in order:
        if span.length > 0 and (not kept or span.start >= kept[-1].end):
            kept.append(span)
    return kept


def iob_tags(spans: Sequence[Mention], n_tokens: int) -> list[str]:
    """IOB tags of non-overlapping typed spans."""
    tags = ["O"] * n_tokens
    for span in spans:
        kind = span.entity_type or "ENTITY"
        tags[span.start] = f"B-{kind}"
        for index in range(span.start + 1, span.end):
            tags[index] = f"I-{kind}"
    return tags


def iob_spans(tags: Sequence[str]) -> list[Mention]:
    """Typed spans of one IOB column (an ``I-X`` without its ``B-X`` starts a span, as conlleval does)."""
    spans: list[Mention] = []
    start, kind = None, None
    for index, tag in enumerate([*tags, "O"]):
        if tag.startswith("I-") and start is not None and tag[2:] == kind:
            continue
        if start is not None:
            spans.append(Mention(start, index, None, kind))
            start, kind = None, None
        if tag.startswith(("B-", "I-")):
            start, kind = index, tag[2:]
    return spans


def coref_spans(column: Sequence[str], source: str = "") -> list[tuple[int, int, str]]:
    """``(start, end exclusive, label)`` of every bracketed span of a CoNLL coreference column.

    A bracket that is never matched (OntoGUM's GENTLE_poetry_road has an opening and a closing that
    do not pair up) is dropped with a warning naming ``source``, rather than failing the corpus.
    """
    spans: list[tuple[int, int, str]] = []
    open_at: dict[str, list[int]] = {}
    unmatched: list[str] = []
    for index, cell in enumerate(column):
        if cell in ("_", "-", ""):
            continue
        for item in _BRACKET.finditer(cell):
            single, opening, closing = item.groups()
            if single is not None:
                spans.append((index, index + 1, single))
            elif opening is not None:
                open_at.setdefault(opening, []).append(index)
            elif open_at.get(closing):
                spans.append((open_at[closing].pop(), index + 1, closing))
            else:
                unmatched.append(f"{closing}) at token {index}")
    unmatched += [f"({label} at token {start}" for label, starts in open_at.items() for start in starts]
    if unmatched:
        log.warning("%s: dropped unmatched coreference brackets: %s", source or "coreference column",
                    ", ".join(unmatched[:5]))
    return sorted(spans)


def with_cluster_types(mentions: Sequence[Mention]) -> list[Mention]:
    """The mentions, an untyped one given the most frequent type among the typed mentions of its cluster."""
    counts: dict[int, Counter] = {}
    for mention in mentions:
        if mention.entity_type is not None and mention.cluster_id is not None:
            counts.setdefault(mention.cluster_id, Counter())[mention.entity_type] += 1
    majority = {cluster: count.most_common(1)[0][0] for cluster, count in counts.items()}
    return [m if m.entity_type is not None or m.cluster_id not in majority
            else Mention(m.start, m.end, m.cluster_id, majority[m.cluster_id]) for m in mentions]
