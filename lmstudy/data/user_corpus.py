"""Registered user corpora: where ``python -m lmstudy data add`` keeps them and how they are read back.

A user corpus is registered once (:mod:`lmstudy.data.add_corpus`) and from then on is a domain like
the bundled ones: ``split_documents(NAME, part)``, the token cache, ``load_word_lm(NAME, ...)`` and
the ``domain`` parameter of the Welch notebooks accept its name (``lmstudy.data.splits.get_domain``
and ``split_path`` look here when a name is not a bundled domain; ``lmstudy.data.iter_documents``
reads it with :func:`read_user_corpus`).

Where: ``user_data_dir()/<NAME>/`` (:func:`lmstudy.paths.user_data_dir`: ``$LMSTUDY_USER_DATA``, default
``user_data/`` beside ``runs/`` in the checkout, git-ignored). Not inside ``$LMSTUDY_DATA``: that
folder is shared and read-only by convention, and holds only the catalogued corpora with their
checksums. Not inside the run cache either: the cache may be deleted at any time, while a registered
corpus's split is the fixed reference every result on it was computed on (the role the committed
``lmstudy/data/splits/*.json`` play for the bundled domains).

Layout of ``<NAME>/`` (written atomically by ``data add``: a temporary folder, then a rename):

- ``documents.jsonl``: one ``{"id": ..., "text": ...}`` per document, the text as read from the
  user's files after the readers' text convention (:mod:`lmstudy.data.readers.common`: lines
  stripped, blank lines dropped; hard-wrapped paragraphs joined with ``--unwrap``). A copy, so the
  split stays valid when the original files change or move. PTB-style normalisation
  (:func:`lmstudy.text.normalise_ptb`) is applied when the split is built and when the token cache is
  written, exactly as for the bundled domains.
- ``split.json``: the document split (:class:`lmstudy.data.splits.Split`, format 2: near-duplicate
  clusters kept in one part); ``sources`` records ``documents.jsonl`` with its sha256, so a corpus
  replaced with ``--force`` never reuses a stale token cache.
- ``corpus.json``: how it was registered (:class:`UserCorpusInfo`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from lmstudy.data.documents import Document
from lmstudy.data.readers.common import reader
from lmstudy.paths import user_data_dir

DOCUMENTS_FILE = "documents.jsonl"
SPLIT_FILE = "split.json"
INFO_FILE = "corpus.json"  # its presence marks a complete registration
# Lower-case letters, digits, "_" and "-", starting with a letter: the name becomes a folder, a part of
# cache file names ("<name>.<part>.txt", so no dots) and of document keys ("<name>:<id>", so no colons).
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_-]{0,63}")


@dataclass(frozen=True)
class UserCorpusInfo:
    """How a user corpus was registered (``corpus.json``): its source, format and what was read."""

    name: str
    source: str                # the path given to ``data add`` (absolute)
    format: str                # "txt folder" | "jsonl" | "csv" | "hf datasets"
    text_column: str | None    # jsonl / csv / hf: the column holding the text
    unwrap: bool               # hard-wrapped paragraphs joined into one line each
    documents_read: int        # documents in documents.jsonl (empty ones included)
    words_read: int            # whitespace-separated words of documents.jsonl
    documents_sha256: str      # of documents.jsonl
    registered_at: str         # UTC, ISO 8601

    def to_json(self) -> str:
        """The ``corpus.json`` text."""
        return json.dumps(asdict(self), indent=1, ensure_ascii=False) + "\n"


def user_corpus_dir(name: str) -> Path:
    """The folder of user corpus ``name`` (whether or not it is registered)."""
    return user_data_dir() / name


def is_registered(name: str) -> bool:
    """True when ``name`` is a completely registered user corpus (a safe name with a ``corpus.json``)."""
    return bool(NAME_PATTERN.fullmatch(name)) and (user_corpus_dir(name) / INFO_FILE).is_file()


def registered_corpora() -> list[str]:
    """Names of the registered user corpora, sorted (temporary folders of an add in progress excluded)."""
    root = user_data_dir()
    if not root.is_dir():
        return []
    return sorted(path.name for path in root.iterdir() if is_registered(path.name))


def corpus_info(name: str) -> UserCorpusInfo:
    """The ``corpus.json`` record of registered corpus ``name``; a KeyError naming the registered ones otherwise."""
    if not is_registered(name):
        raise KeyError(f"no registered user corpus {name!r} under {user_data_dir()}; registered: "
                       f"{', '.join(registered_corpora()) or 'none'} (add one with: python -m lmstudy data add "
                       "NAME PATH)")
    return UserCorpusInfo(**json.loads((user_corpus_dir(name) / INFO_FILE).read_text(encoding="utf-8")))


def user_split_path(name: str) -> Path:
    """The split file of user corpus ``name``."""
    return user_corpus_dir(name) / SPLIT_FILE


@reader
def read_user_corpus(root: Path) -> Iterator[Document]:
    """The documents of a registered user corpus (its folder ``root``), in registration order.

    ``domain`` is the corpus name; ``doc_id`` the id given at registration (a file's relative path, a
    row number); ``limit=`` as for every reader.
    """
    path = root / DOCUMENTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: user corpus {root.name!r} is not complete; register it "
                                f"again with: python -m lmstudy data add {root.name} PATH --force")
    yield from documents_in(path, root.name)


def documents_in(path: Path, name: str) -> Iterator[Document]:
    """The documents of a ``documents.jsonl`` file, as Documents of domain ``name``."""
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            yield Document(record["id"], record["text"], domain=name)


__all__ = ["DOCUMENTS_FILE", "INFO_FILE", "NAME_PATTERN", "SPLIT_FILE", "UserCorpusInfo", "corpus_info",
           "documents_in", "is_registered", "read_user_corpus", "registered_corpora", "user_corpus_dir",
           "user_split_path"]
