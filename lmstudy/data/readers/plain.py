"""Readers of the plain-text evaluation corpora: PTB, WikiText-2 (tokenized and raw), LAMBADA.

PTB (``ptb/ptb.{train,valid,test}.txt``, Mikolov's ``simple-examples``)
    One sentence a line, already lower-cased, tokenised and UNK'd (10k vocabulary, ``N`` for numbers).
    Mikolov's files keep no document boundaries, so **a document is one line (sentence)**:
    ``doc_id = "<split>-<line number, 1-based, 5 digits>"``, e.g. ``train-00001``. Lines are stripped
    (each has a leading and a trailing space); the words are untouched, so the word counts of each
    split are the manifest's (887,521 / 70,390 / 78,669). ``split=`` one of train / valid / test, or
    None for all three in that order. Domain ``ptb``, no label.

WikiText-2 (``wikitext-2/{valid,test}.txt``; train is not available)
    The tokenized ``wiki.*.tokens`` files: `` = Title = `` headings, `` = = Section = = `` subheadings,
    ``@-@`` escapes, ``<unk>``. **A document is one article**, cut at each top-level heading; its text
    keeps the heading lines (the evaluation text is the whole file, so the documents of a split
    concatenate back to every word of it). ``doc_id = "<split>-<article number, 3 digits>"``, title =
    the heading's text (tokenized form; many are ``<unk>``-masked). ``split=`` valid / test / None.

WikiText-2 raw (``wikitext-2-raw/wiki.test.raw``: test only, CRLF line ends)
    Same articles, untokenized (Hugging Face re-export, not byte-identical to the original zip).
    Same document rule; ``doc_id = "test-<article>"``, so raw and tokenized test articles pair up by id.

LAMBADA (``lambada/``)
    One passage a line (BookCorpus novels, lower-cased and tokenized in the plain files). **A document
    is one passage**; ``meta["target"]`` is its last word, the word the task asks to predict.
    ``split=`` dev / test / None. ``detokenized=True`` reads ``lambada_test.jsonl`` instead (OpenAI's
    detokenized test set, the one GPT-2 papers report; test only): cased text with newlines inside
    passages kept. In both forms every passage ends with its target word (checked: no trailing
    punctuation), so the target is ``passage.split()[-1]``. Domain ``books``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from lmstudy.data.documents import Document
from lmstudy.data.readers.common import check_choices, join_lines, reader, require_file

PTB_SPLITS = ("train", "valid", "test")
WIKITEXT_SPLITS = ("valid", "test")
LAMBADA_SPLITS = ("dev", "test")
LAMBADA_FILES = {"dev": "lambada_development_plain_text.txt", "test": "lambada_test_plain_text.txt"}

# A top-level WikiText heading: " = Title = " (one "=" each side; subsections have "= =").
_ARTICLE_HEADING = re.compile(r"^ = ([^=].*?) = $")


@reader
def read_ptb(root: Path, split: str | None = None) -> Iterator[Document]:
    """PTB sentences, one document per line of Mikolov's files."""
    for part in check_choices("split", split, PTB_SPLITS):
        path = require_file(root / f"ptb.{part}.txt")
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                text = line.strip()
                if text:
                    yield Document(f"{part}-{number:05d}", text, domain="ptb", meta={"split": part})


def _wikitext_articles(path: Path, split: str) -> Iterator[Document]:
    """Cut a WikiText file into articles at its top-level headings."""
    lines: list[str] = []
    title: str | None = None
    number = 0

    def article() -> Document:
        return Document(f"{split}-{number:03d}", join_lines(lines), domain="wikipedia", title=title,
                        meta={"split": split})

    # newline=None: universal newlines, so the raw file's CRLF ends read as "\n".
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            heading = _ARTICLE_HEADING.match(line.rstrip("\n"))
            if heading:
                if title is not None and join_lines(lines):
                    yield article()
                number += 1
                title, lines = heading.group(1), []
            lines.append(line)
    if title is not None and join_lines(lines):
        yield article()


@reader
def read_wikitext_2(root: Path, split: str | None = None) -> Iterator[Document]:
    """WikiText-2 (tokenized) valid/test articles."""
    for part in check_choices("split", split, WIKITEXT_SPLITS):
        yield from _wikitext_articles(require_file(root / f"{part}.txt"), part)


@reader
def read_wikitext_2_raw(root: Path, split: str | None = None) -> Iterator[Document]:
    """WikiText-2 raw test articles (the only split available)."""
    check_choices("split", split, ("test",))
    yield from _wikitext_articles(require_file(root / "wiki.test.raw"), "test")


def lambada_target(passage: str) -> str:
    """The word LAMBADA asks for: the passage's last word."""
    return passage.split()[-1]


@reader
def read_lambada(root: Path, split: str | None = None, detokenized: bool = False) -> Iterator[Document]:
    """LAMBADA passages, one document each; ``meta["target"]`` is the word to predict."""
    if detokenized:
        check_choices("split", split, ("test",))
        path = require_file(root / "lambada_test.jsonl")
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                passage = json.loads(line)["text"]
                yield Document(f"openai-test-{number:05d}", join_lines(passage.split("\n")), domain="books",
                               meta={"split": "test", "target": lambada_target(passage)})
        return
    for part in check_choices("split", split, LAMBADA_SPLITS):
        path = require_file(root / LAMBADA_FILES[part])
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                passage = line.strip()
                if passage:
                    yield Document(f"{part}-{number:05d}", passage, domain="books",
                                   meta={"split": part, "target": lambada_target(passage)})
