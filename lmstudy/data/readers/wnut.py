"""Reader of WNUT-17 emerging and rare entities NER (Derczynski et al. 2017; ``wnut17_ner/``).

Format: ``token TAB IOB-tag`` per line (types person, location, corporation, product,
creative-work, group), sentences separated by an empty line -- or, in the train file, by a line
holding only a TAB (2,394 of its 3,394 breaks). Files: ``wnut17train.conll`` (train),
``emerging.dev.conll`` (dev), ``emerging.test.annotated`` (test).

A document is one sentence (a tweet, a Reddit/StackExchange/YouTube comment): text = the tokens
joined by spaces (the source is tokenized; HTML entities were split into tokens, e.g. ``& gt ;``,
and are kept as they are), ``meta = {"split", "tokens", "tags"}``, ``doc_id =
"<split>-<sentence, 1-based, 5 digits>"``, domain ``social``, no label. ``split=`` train / dev /
test / None.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from lmstudy.data.documents import Document
from lmstudy.data.readers.common import check_choices, reader, require_file

FILES = {"train": "wnut17train.conll", "dev": "emerging.dev.conll", "test": "emerging.test.annotated"}


def _sentences(path: Path) -> Iterator[tuple[list[str], list[str]]]:
    tokens: list[str] = []
    tags: list[str] = []
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            token, _, tag = line.rstrip("\n").partition("\t")
            if token.strip():
                tokens.append(token)
                tags.append(tag.strip() or "O")
            elif tokens:
                yield tokens, tags
                tokens, tags = [], []
    if tokens:
        yield tokens, tags


@reader
def read_wnut17_ner(root: Path, split: str | Iterable[str] | None = None) -> Iterator[Document]:
    """WNUT-17 sentences, one document each, with their tokens and IOB tags in meta."""
    for part in check_choices("split", split, tuple(FILES)):
        for number, (tokens, tags) in enumerate(_sentences(require_file(root / FILES[part])), start=1):
            yield Document(f"{part}-{number:05d}", " ".join(tokens), domain="social",
                           meta={"split": part, "tokens": tokens, "tags": tags})
