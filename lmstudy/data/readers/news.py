"""Readers of the news corpora: Reuters-21578 and BBC News.

Reuters-21578 (``reuters21578/reuters21578_sgm.tar.xz``: ``reut2-000.sgm`` .. ``reut2-021.sgm``)
    SGML, latin-1/ASCII, 1,000 ``<REUTERS ... NEWID="n">`` records a file (21,578 in all)::

        <REUTERS TOPICS="YES" LEWISSPLIT="TRAIN" CGISPLIT="TRAINING-SET" OLDID="5544" NEWID="1">
        <DATE>26-FEB-1987 15:01:01.79</DATE> <TOPICS><D>cocoa</D></TOPICS> <PLACES>...</PLACES> ...
        <TEXT>&#2; <TITLE>BAHIA COCOA REVIEW</TITLE> <DATELINE>SALVADOR, Feb 26 - </DATELINE>
        <BODY>Showers continued throughout the week in
        the Bahia cocoa zone, ...
            The dry period means ...          <- an indented line starts a paragraph
         Reuter
        &#3;</BODY></TEXT></REUTERS>

    Decisions: ``doc_id`` = NEWID; ``title`` = TITLE; ``label`` = the first TOPICS entry (None when
    the record has no topic, 47% of them); ``meta = {"topics", "places", "split" (LEWISSPLIT,
    lower-cased: train / test / not-used), "date", "text_type" (norm / brief / unproc)}``. The text
    is the BODY: SGML entities unescaped (``&lt;`` -> ``<``), control characters (``&#2;``,
    ``&#3;``...) removed, the hard wrapping undone (a line that starts with white space starts a
    paragraph or a table row, any other line continues the previous one), and the closing
    "Reuter"/"REUTER" signature dropped. Records without BODY: ``TYPE="UNPROC"`` ones (737, mostly
    tables and corrections) use their whole TEXT the same way; ``TYPE="BRIEF"`` ones (1,798) are a
    headline only (their TEXT holds a "Blah blah blah." placeholder), and that headline is their
    text. So every record is a document (21,577) except one empty UNPROC record (NEWID 12793),
    which is skipped. ``split=`` selects LEWISSPLIT values (train / test / not-used; the ModApte
    split is LEWISSPLIT with TOPICS="YES").

BBC News (``bbc_news/bbc_fulltext.tar.xz``: ``bbc/<topic>/<nnn>.txt``, 2,225 articles)
    Each file: the headline, a blank line, then one paragraph a line (not hard-wrapped), mostly with
    blank lines between paragraphs (19 files have none, e.g. around bullet lists). UTF-8 except
    one file in a Windows code page (``sport/199.txt``, a pound sign), decoded as cp1252.
    ``doc_id = "<topic>/<nnn>"``, ``label`` = topic folder (business, entertainment, politics,
    sport, tech), ``title`` = the headline (not repeated in the text), text = the paragraphs.

Both: domain ``news``, documents in archive order.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from lmstudy.data.documents import Document
from lmstudy.data.readers.common import check_choices, decode_text, iter_tar, join_lines, reader

REUTERS_SPLITS = ("train", "test", "not-used")
BBC_TOPICS = ("business", "entertainment", "politics", "sport", "tech")

_RECORD = re.compile(r"<REUTERS([^>]*)>(.*?)</REUTERS>", re.DOTALL)
_ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SIGNATURE = re.compile(r"^\s*reuter\s*$", re.IGNORECASE)
_BBC_FILE = re.compile(r"^bbc/([a-z]+)/(\d+)\.txt$")


def _element(record: str, tag: str) -> str | None:
    match = re.search(rf"<{tag}(?:\s[^>]*)?>(.*?)</{tag}>", record, re.DOTALL)  # <TEXT TYPE="UNPROC"> too
    return match.group(1) if match else None


def _entries(record: str, tag: str) -> list[str]:
    """The ``<D>`` entries of a category element such as TOPICS or PLACES."""
    return re.findall(r"<D>(.*?)</D>", _element(record, tag) or "")


def reuters_text(sgml: str) -> str:
    """Body SGML -> text: entities unescaped, control characters gone, hard wrapping undone."""
    text = _CONTROL.sub("", html.unescape(re.sub(r"<[^>]+>", "", sgml)))
    paragraphs: list[str] = []
    for line in text.split("\n"):
        if not line.strip() or _SIGNATURE.match(line):
            continue
        if line[0].isspace() or not paragraphs:
            paragraphs.append(line)
        else:
            paragraphs[-1] += " " + line
    return join_lines(" ".join(paragraph.split()) for paragraph in paragraphs)


@reader
def read_reuters21578(root: Path, split: str | Iterable[str] | None = None) -> Iterator[Document]:
    """Reuters-21578 newswire records, one document each; label = first topic."""
    wanted = set(check_choices("split", split, REUTERS_SPLITS))
    for _, data in iter_tar(root / "reuters21578_sgm.tar.xz", ".sgm"):
        for record in _RECORD.finditer(data.decode("latin-1")):
            attributes = dict(_ATTRIBUTE.findall(record.group(1)))
            body = record.group(2)
            part = attributes.get("LEWISSPLIT", "").lower()
            if part not in wanted:
                continue
            title = _element(body, "TITLE")
            title = " ".join(_CONTROL.sub("", html.unescape(title)).split()) if title else None
            text_type = re.search(r'<TEXT(?:\s+TYPE="(\w+)")?', body)
            text_type = (text_type.group(1) or "NORM").lower() if text_type else "none"
            content = _element(body, "BODY")
            if text_type == "brief":
                content = ""  # a headline only; the rest of its TEXT is a "Blah blah blah." placeholder
            elif content is None:
                content = re.sub(r"<TITLE>.*?</TITLE>|<DATELINE>.*?</DATELINE>", "", _element(body, "TEXT") or "",
                                 flags=re.DOTALL)
            text = reuters_text(content) or (title or "")
            if not text:
                continue
            topics = _entries(body, "TOPICS")
            yield Document(attributes["NEWID"], text, domain="news", label=topics[0] if topics else None,
                           title=title,
                           meta={"topics": topics, "places": _entries(body, "PLACES"), "split": part,
                                 "date": (_element(body, "DATE") or "").strip(), "text_type": text_type})


@reader
def read_bbc_news(root: Path, topics: str | Iterable[str] | None = None) -> Iterator[Document]:
    """BBC News articles, one document each; label = topic folder, title = headline."""
    wanted = set(check_choices("topics", topics, BBC_TOPICS))
    for name, data in iter_tar(root / "bbc_fulltext.tar.xz", ".txt"):
        match = _BBC_FILE.match(name)
        if match is None or match.group(1) not in wanted:
            continue  # README.TXT, or a topic not asked for
        headline, _, body = decode_text(data).strip().partition("\n")
        text = join_lines(body.split("\n"))
        if text:
            yield Document(f"{match.group(1)}/{match.group(2)}", text, domain="news", label=match.group(1),
                           title=headline.strip(), meta={"topic": match.group(1)})
