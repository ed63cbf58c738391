"""The one record every corpus reader yields."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Document:
    """A document of a corpus: its text and what we know about it.

    ``doc_id`` is unique within its corpus and stable across runs (split id lists refer to it).
    ``domain`` is the corpus-level domain (e.g. ``"wikipedia"``, ``"imdb"``, ``"reddit"``);
    ``label`` the sub-domain where the corpus has one (subreddit, IMDB rating, news topic, ...).
    """

    doc_id: str
    text: str
    domain: str
    label: str | None = None
    title: str | None = None
    meta: dict = field(default_factory=dict)
