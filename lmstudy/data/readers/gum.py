"""Readers of GUM / OntoGUM (Georgetown University Multilayer corpus; ``gum/gum.tar.xz``).

The archive holds the repository's layout: ``dep/<doc>.conllu`` (tokens, sentences, POS, metadata
such as ``# meta::title`` and ``# meta::genre``), ``coref/gum/conll/<doc>.conll`` (GUM-scheme
coreference: every entity mention incl. singletons, labels ``type-id[-identity]``, e.g.
``(person-10-Charles_Bolden``), ``coref/ontogum/conll/<doc>.conll`` (the OntoNotes-scheme
conversion: no singletons, OntoNotes rules for appositions, copulas, etc.; bare ids), ``xml/``
(TT-SGML: paragraphs, sentences, tokens, POS -- no entity layer in this release) and
``splits.md`` (train / dev / test of GUM, ``test2`` = the 26 GENTLE documents of challenging
genres). 281 documents, 268,089 tokens; the 18 ``GUM_reddit_*`` documents have every word form
masked with underscores (the text needs the repository's ``get_text.py`` and network access to
restore).

:func:`read_gum` -- plain documents
    One document per ``dep`` file, text = its sentences (``# text =`` lines), one a line.
    ``doc_id`` = the document name (``GUM_news_nasa``), ``title`` = ``meta::title``, ``label`` =
    genre (``news``, ``fiction``, ...), ``meta = {"split", "corpus": "GUM"|"GENTLE"}``, domain ``gum``.
    ``split=`` train / dev / test / test2 / None. Reddit documents are left out unless
    ``include_reddit=True`` (their text is underscores).

:func:`read_gum_coref` -- :class:`~lmstudy.data.readers.coref.CorefDocument`
    Tokens and sentence starts from ``dep`` (integer token ids; multi-word token lines and empty
    nodes skipped), ``pos`` = Universal POS (NOUN, PROPN, PRON, ...: what the E.T. mention-similarity
    table groups by). Clusters from ``scheme="ontogum"`` (default) or ``"gum"``:

    - OntoGUM by default because GPT2E (Stylianou & Vlahavas 2020) is trained on CoNLL-2012, i.e.
      OntoNotes-scheme coreference, and OntoGUM is GUM converted to exactly that scheme (no
      singletons, the entity memory only holds entities that recur). ``scheme="gum"`` gives GUM's
      own annotation (singletons included).
    - Entity types come from the GUM-scheme file's labels: in this GUM release the xml files carry
      no entity layer (the types live in ``coref/gum/conll`` and in the ``Entity=`` field of the
      conllu MISC column; the conll labels are the simpler of the two to read). An OntoGUM mention
      gets the type of the GUM mention with the same span (96% of them), else its cluster's majority
      type (the OntoNotes conversion changes some spans).
    - ``entities`` = every typed GUM-scheme mention (GUM annotates all entity mentions, named or not,
      with 10 types: person, place, organization, object, event, time, abstract, substance, animal,
      plant); ``entity_iob()`` is their outermost layer.

    The conll files' token counts are checked against ``dep``; the tokens themselves always come
    from ``dep`` (OntoGUM's conll lost the form of one ``|`` token in GUM_news_iodine). One OntoGUM
    file (GENTLE_poetry_road) has two brackets that do not pair up; they are dropped with a
    warning. ``split=`` as above; ``include_reddit=False`` by default (masked text).
    ``meta = {"genre", "title", "scheme"}``.

Both readers stream the archive once (72 MB decompressed; 1-4 s with the parsing), keeping the
files of the layers they need (at most ~35 MB of text) until ``splits.md``, the last member, says
which split each document is in: nothing is yielded before the end of the archive.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from lmstudy.data.documents import Document
from lmstudy.data.readers.common import check_choice, check_choices, iter_tar, join_lines, reader, require_file
from lmstudy.data.readers.coref import CorefDocument, Mention, coref_spans, with_cluster_types

SPLITS = ("train", "dev", "test", "test2")
SCHEMES = ("ontogum", "gum")

_MEMBER = re.compile(r"^(dep|coref/gum/conll|coref/ontogum/conll)/([^/]+)\.(?:conllu|conll)$")
_GUM_LABEL = re.compile(r"^([a-z]+)-(\d+)(?:-.*)?$")


@dataclass
class _ParsedDep:
    """What we keep of a dep/*.conllu file."""

    tokens: list[str] = field(default_factory=list)
    pos: list[str] = field(default_factory=list)
    sentence_starts: list[int] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)  # the "# text =" lines
    meta: dict[str, str] = field(default_factory=dict)  # "# meta::key = value"


def parse_conllu(text: str) -> _ParsedDep:
    """Tokens, UPOS tags, sentences and ``meta::`` comments of one CoNLL-U document."""
    parsed = _ParsedDep()
    for line in text.split("\n"):
        if line.startswith("# text = "):
            parsed.sentences.append(line[len("# text = "):])
            parsed.sentence_starts.append(len(parsed.tokens))
        elif line.startswith("# meta::"):
            key, _, value = line[len("# meta::"):].partition(" = ")
            parsed.meta[key.strip()] = value.strip()
        elif line and line[0].isdigit():
            columns = line.split("\t")
            if columns[0].isdigit():  # skip "1-2" multi-word tokens and "3.1" empty nodes
                parsed.tokens.append(columns[1])
                parsed.pos.append(columns[3])
    return parsed


def parse_splits(text: str) -> dict[str, str]:
    """Document name -> split, from GUM's splits.md ("## dev" headings, "  * GUM_..." items)."""
    split_of, current = {}, None
    for line in text.split("\n"):
        if line.startswith("## "):
            current = line[3:].strip()
        elif line.strip().startswith("* ") and current is not None:
            split_of[line.strip()[2:].strip()] = current
    return split_of


def _conll_columns(text: str) -> tuple[list[str], list[str]]:
    """Token and coreference columns of a GUM/OntoGUM conll file (``index TAB token TAB coref``)."""
    tokens, column = [], []
    for line in text.split("\n"):
        if line and line[0].isdigit():
            fields = line.split("\t")
            tokens.append(fields[1])
            column.append(fields[-1] if len(fields) > 2 else "_")
    return tokens, column


def _is_masked(name: str) -> bool:
    return name.startswith("GUM_reddit_")


def _gum_archive(
    root: Path, layers: tuple[str, ...], split: str | None, include_reddit: bool
) -> Iterator[tuple[str, str, dict[str, str]]]:
    """Stream gum.tar.xz once: (name, split, {layer: text}) of the wanted documents, sorted by name."""
    wanted = set(check_choices("split", split, SPLITS))
    archive = require_file(root / "gum.tar.xz")
    files: dict[str, dict[str, str]] = {}
    split_of: dict[str, str] | None = None
    for member, data in iter_tar(archive):
        member = member.removeprefix("./")
        if member == "splits.md":
            split_of = parse_splits(data.decode("utf-8"))
            continue
        match = _MEMBER.match(member)
        if match is None or match.group(1) not in layers:
            continue
        layer, name = match.groups()
        if include_reddit or not _is_masked(name):
            files.setdefault(name, {})[layer] = data.decode("utf-8")
    if split_of is None:
        raise ValueError(f"{archive} has no splits.md (damaged? verify it with: python -m lmstudy data verify gum)")
    for name in sorted(files):
        part = split_of.get(name)
        if part is None:
            raise ValueError(f"GUM document {name} is in no split of splits.md")
        if part in wanted:
            missing = set(layers) - files[name].keys()
            if missing:
                raise ValueError(f"GUM document {name}: {', '.join(sorted(missing))} missing from {archive}")
            yield name, part, files[name]


@reader
def read_gum(root: Path, split: str | None = None, include_reddit: bool = False) -> Iterator[Document]:
    """GUM documents as plain text (one sentence a line); label = genre."""
    for name, part, files in _gum_archive(root, ("dep",), split, include_reddit):
        parsed = parse_conllu(files["dep"])
        text = join_lines(parsed.sentences)
        if text:
            yield Document(name, text, domain="gum", label=parsed.meta.get("genre", name.split("_")[1]),
                           title=parsed.meta.get("title"),
                           meta={"split": part, "corpus": name.split("_")[0]})


def _gum_mentions(column: list[str], source: str) -> list[Mention]:
    """Typed mentions of a GUM-scheme coreference column (labels ``type-id[-identity]``)."""
    mentions = []
    for start, end, label in coref_spans(column, source):
        parsed = _GUM_LABEL.match(label)
        if parsed is None:
            raise ValueError(f"GUM coreference label {label!r} is not type-id[-identity]")
        mentions.append(Mention(start, end, int(parsed.group(2)), parsed.group(1)))
    return mentions


def _check_tokens(name: str, layer: str, tokens: list[str], reference: list[str]) -> None:
    if len(tokens) != len(reference):
        raise ValueError(f"GUM {name}: {layer} has {len(tokens)} tokens, dep/{name}.conllu {len(reference)}")


def read_gum_coref(
    root: str | Path,
    split: str | None = None,
    scheme: str = "ontogum",
    include_reddit: bool = False,
) -> Iterator[CorefDocument]:
    """GUM documents with coreference (OntoGUM clusters by default) and GUM entity types."""
    check_choice("scheme", scheme, SCHEMES)
    layers = ("dep", "coref/gum/conll") + (("coref/ontogum/conll",) if scheme == "ontogum" else ())
    for name, part, files in _gum_archive(Path(root), layers, split, include_reddit):
        dep = parse_conllu(files["dep"])
        gum_tokens, gum_column = _conll_columns(files["coref/gum/conll"])
        _check_tokens(name, "coref/gum/conll", gum_tokens, dep.tokens)
        typed = _gum_mentions(gum_column, f"GUM {name}")
        if scheme == "gum":
            mentions = typed
        else:
            onto_tokens, onto_column = _conll_columns(files["coref/ontogum/conll"])
            _check_tokens(name, "coref/ontogum/conll", onto_tokens, dep.tokens)
            type_of = {(m.start, m.end): m.entity_type for m in typed}
            mentions = with_cluster_types([Mention(start, end, int(label), type_of.get((start, end)))
                                           for start, end, label in coref_spans(onto_column, f"OntoGUM {name}")])
        yield CorefDocument(
            name, part, dep.tokens, dep.sentence_starts, dep.pos, mentions,
            entities=[Mention(m.start, m.end, None, m.entity_type) for m in typed],
            meta={"genre": dep.meta.get("genre"), "title": dep.meta.get("title"), "scheme": scheme},
        )
