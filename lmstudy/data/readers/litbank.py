"""Readers of LitBank (Bamman et al.): 100 English novels, full texts and annotated excerpts.

Full texts (``litbank/litbank_fulltexts.tar.xz``: ``original/<gutenberg id>_<slug>.txt``)
    The repository's cleaned Project Gutenberg texts (no licence header; they start at the book text,
    e.g. "CHAPTER I"), hard-wrapped at ~70 characters, paragraphs separated by blank lines. Text =
    one paragraph a line (the wrapping undone; chapter headings are their own paragraphs).
    **One document per book** by default: ``doc_id`` = Gutenberg id (``"1023"``), ``title`` /
    ``meta["author"]`` / ``meta["year"]`` from the table of LitBank's README.md (read from the
    annotations archive; the file-name slug, title-cased, when that archive is absent).
    ``chunk_words=N`` cuts each book into documents of about N words at paragraph boundaries
    (a chunk is closed at the first paragraph end at or past N words; the last chunk of a book is
    whatever is left; a paragraph longer than N is a chunk of its own): ``doc_id = "<id>-<k, 5
    digits>"`` and ``meta["book"]`` = the book's id, so a split can keep a book's chunks together.
    Domain ``books``, no label. Streams the archive one book at a time. Note: the ~2,000 annotated
    words of each book (below) are the start of that book's full text.

Coreference and entities (``litbank/litbank_annotations.tar.xz``), :func:`read_litbank_coref`
    - ``coref/conll/<id>_<slug>_brat.conll``: tokens (column 4), sentences (blank lines), and the
      coreference column (last; ``(2|(1)`` style, cluster ids per document) -> ``mentions``;
    - ``coref/tsv/<id>_<slug>_brat.ann``: ``MENTION`` rows (sentence, start, end inclusive, text,
      ACE type PER/FAC/GPE/LOC/VEH/ORG, PROP/NOM/PRON) give each mention its ``entity_type``
      (matched by span; pronouns too); a mention without a row takes its cluster's majority type;
    - ``entities/tsv/<id>_<slug>_brat.tsv``: token + up to 5 IOB columns of nested entity layers
      (proper and common noun phrases only) -> ``entities``; ``entity_iob()`` is their outermost
      layer. ``pos`` is None: LitBank has no POS tags.

    LitBank has no official split. Ours is deterministic: the 100 documents sorted by Gutenberg id
    (as numbers), position ``i`` goes to dev when ``i % 10 == 8``, test when ``i % 10 == 9``, else
    train (80 / 10 / 10, interleaved so that no id range -- roughly, digitisation date -- falls in
    one part). ``doc_id`` = Gutenberg id, the same as the full-text document of that book.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from lmstudy.data.documents import Document
from lmstudy.data.readers.common import check_choices, iter_tar, reader, require_file, unwrap_paragraphs
from lmstudy.data.readers.coref import CorefDocument, Mention, coref_spans, iob_spans, with_cluster_types

COREF_SPLITS = ("train", "dev", "test")

_FULLTEXT = re.compile(r"(?:^|/)original/(\d+)_([^/]+)\.txt$")
_ANNOTATION = re.compile(r"^(coref/conll|coref/tsv|entities/tsv)/(\d+)_[^/]+_brat\.(?:conll|ann|tsv)$")
# README table row: |Gutenberg ID|Date|Author|Title|
_BOOK_ROW = re.compile(r"^\|(\d+)\|(\d{3,4})\|([^|]*)\|([^|]*)\|\s*$")


def book_table(root: Path) -> dict[str, dict[str, str]]:
    """Gutenberg id -> {"title", "author", "year"} from LitBank's README (empty if the archive is absent)."""
    archive = root / "litbank_annotations.tar.xz"
    if not archive.is_file():
        return {}
    for name, data in iter_tar(archive, "README.md"):
        if name.strip("./") == "README.md":
            books = {}
            for line in data.decode("utf-8").splitlines():
                row = _BOOK_ROW.match(line.strip())
                if row:
                    book_id, year, author, title = row.groups()
                    books[book_id] = {"title": title.strip(), "author": author.strip(), "year": year}
            return books
    return {}


def chunk_paragraphs(paragraphs: list[str], chunk_words: int) -> list[list[str]]:
    """Group paragraphs into chunks closed at the first paragraph end at or past ``chunk_words`` words."""
    chunks: list[list[str]] = []
    current: list[str] = []
    words = 0
    for paragraph in paragraphs:
        current.append(paragraph)
        words += len(paragraph.split())
        if words >= chunk_words:
            chunks.append(current)
            current, words = [], 0
    if current:
        chunks.append(current)
    return chunks


@reader
def read_litbank(root: Path, chunk_words: int | None = None) -> Iterator[Document]:
    """LitBank full novels, one document per book (or per ~``chunk_words`` chunk)."""
    if chunk_words is not None and chunk_words < 1:
        raise ValueError(f"chunk_words={chunk_words!r} must be a positive number of words (or None)")
    books = book_table(root)
    for name, data in iter_tar(root / "litbank_fulltexts.tar.xz", ".txt"):
        match = _FULLTEXT.search(name)
        if match is None:
            continue
        book_id, slug = match.groups()
        info = books.get(book_id, {"title": slug.replace("_", " ").title(), "author": None, "year": None})
        meta = {"book": book_id, "author": info["author"], "year": info["year"], "file": f"{book_id}_{slug}"}
        text = unwrap_paragraphs(data.decode("utf-8"))
        if chunk_words is None:
            yield Document(book_id, text, domain="books", title=info["title"], meta=meta)
            continue
        for number, chunk in enumerate(chunk_paragraphs(text.split("\n"), chunk_words)):
            yield Document(f"{book_id}-{number:05d}", "\n".join(chunk), domain="books", title=info["title"],
                           meta={**meta, "chunk": number})


def litbank_split(position: int) -> str:
    """Our split of the document at ``position`` in Gutenberg-id order (see the module docstring)."""
    return {8: "dev", 9: "test"}.get(position % 10, "train")


def _parse_conll(text: str) -> tuple[list[str], list[int], list[str]]:
    """Tokens, sentence starts and the coreference column of one LitBank CoNLL file."""
    tokens, sentence_starts, column = [], [], []
    new_sentence = True
    for line in text.split("\n"):
        if line.startswith("#"):
            continue
        if not line.strip():
            new_sentence = True
            continue
        fields = line.rstrip("\n").split("\t")
        if new_sentence:
            sentence_starts.append(len(tokens))
            new_sentence = False
        tokens.append(fields[3])
        column.append(fields[-1] if len(fields) > 4 else "_")
    return tokens, sentence_starts, column


def _mention_types(text: str, sentence_starts: list[int]) -> dict[tuple[int, int], str]:
    """(start, end exclusive) -> ACE type, from the ``MENTION`` rows of a coref/tsv file."""
    types = {}
    for line in text.split("\n"):
        fields = line.split("\t")
        if fields[0] == "MENTION" and len(fields) >= 8:
            sentence, start, end_sentence, end = (int(value) for value in fields[2:6])
            types[(sentence_starts[sentence] + start, sentence_starts[end_sentence] + end + 1)] = fields[7]
    return types


def _entity_layers(text: str, n_tokens: int, doc_id: str) -> list[Mention]:
    """All typed spans of the nested IOB layers of an entities/tsv file."""
    rows = [line.split("\t") for line in text.split("\n") if line.strip()]
    if len(rows) != n_tokens:
        raise ValueError(f"LitBank {doc_id}: entities/tsv has {len(rows)} tokens, coref/conll {n_tokens}")
    layers = max(len(row) for row in rows) - 1
    spans: list[Mention] = []
    for layer in range(1, layers + 1):
        spans.extend(iob_spans([row[layer] if len(row) > layer and row[layer] else "O" for row in rows]))
    return spans


def _coref_document(doc_id: str, split: str, files: dict[str, str]) -> CorefDocument:
    tokens, sentence_starts, column = _parse_conll(files["coref/conll"])
    types = _mention_types(files.get("coref/tsv", ""), sentence_starts)
    mentions = with_cluster_types([Mention(start, end, int(label), types.get((start, end)))
                                   for start, end, label in coref_spans(column, f"LitBank {doc_id}")])
    entities = _entity_layers(files["entities/tsv"], len(tokens), doc_id)
    return CorefDocument(doc_id, split, tokens, sentence_starts, None, mentions, entities,
                         meta={"corpus": "litbank"})


def read_litbank_coref(root: str | Path, split: str | None = None) -> Iterator[CorefDocument]:
    """LitBank's 100 annotated excerpts as :class:`CorefDocument` (our 80/10/10 split; see above)."""
    wanted = set(check_choices("split", split, COREF_SPLITS))
    archive = require_file(Path(root) / "litbank_annotations.tar.xz")
    files: dict[str, dict[str, str]] = {}  # book id -> layer -> file text (~7 MB in all)
    for name, data in iter_tar(archive):
        match = _ANNOTATION.match(name.removeprefix("./"))
        if match:
            files.setdefault(match.group(2), {})[match.group(1)] = data.decode("utf-8")
    for position, doc_id in enumerate(sorted(files, key=int)):
        part = litbank_split(position)
        if part in wanted:
            missing = {"coref/conll", "entities/tsv"} - files[doc_id].keys()
            if missing:
                raise ValueError(f"LitBank {doc_id}: {', '.join(sorted(missing))} missing from {archive}")
            yield _coref_document(doc_id, part, files[doc_id])
