"""Reader of the 2014 English Wikipedia shards (``wikipedia/enwiki_{AA,AB,AC}.txt.xz``).

Format: WikiExtractor output, UTF-8, xz-compressed. Each article is

    <doc id="18228284" url="http://en.wikipedia.org/wiki?curid=18228284" title="Chen Zhili">
    Chen Zhili                      <- the title again (HTML-escaped like the attribute)
    <blank line>
    Chen Zhili (; born November 1942) is ...
    Biography.                      <- section headings are kept by WikiExtractor as short lines
    ...
    </doc>

Decisions (following Welch et al. 2020, appendix: "removed text that contained 'colspan' or
'rowspan', as wikiextractor sometimes extracts parts of tables. Also excluded titles"):

- the ``<doc>``/``</doc>`` lines are removed and the first line (the title repeated) is dropped
  from the text; the title is ``Document.title`` (HTML entities unescaped, e.g. ``&amp;``);
- every line containing ``colspan`` or ``rowspan`` is dropped (table debris);
- leftover ``<br>`` tags become line breaks; section-heading lines are kept (they are text);
- articles left with no text are skipped (599 of the 34,341 in AA: pages WikiExtractor left empty).

``doc_id`` is Wikipedia's page id (unique over the three shards), ``meta = {"shard", "url"}``,
domain ``wikipedia``, no label. ``shards=`` picks shards (default all three, in order). Streaming:
``lzma.open`` line by line, one article in memory at a time; reading all 105,769 articles takes
about 15 s. The leakage guard (WikiText-2 / LAMBADA / GAP articles) is applied by the splits,
by title; see ``shared/data/MANIFEST.md``.
"""

from __future__ import annotations

import html
import lzma
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from lmstudy.data.documents import Document
from lmstudy.data.readers.common import check_choices, join_lines, reader, require_file

SHARDS = ("AA", "AB", "AC")

_DOC_START = re.compile(r'<doc id="(\d+)" url="([^"]*)" title="([^"]*)">')
_BR_TAG = re.compile(r"<br\s*/?>", re.IGNORECASE)


def _is_table_debris(line: str) -> bool:
    return "colspan" in line or "rowspan" in line


def _article_text(lines: list[str], title: str) -> str:
    if lines and html.unescape(lines[0].strip()) == title:
        lines = lines[1:]  # the title repeated as the first line
    kept = (_BR_TAG.sub("\n", line) for line in lines if not _is_table_debris(line))
    return join_lines("\n".join(kept).split("\n"))


@reader
def read_wikipedia(root: Path, shards: str | Iterable[str] | None = None) -> Iterator[Document]:
    """Wikipedia articles of the chosen shards, one document each."""
    for shard in check_choices("shards", shards, SHARDS):
        path = require_file(root / f"enwiki_{shard}.txt.xz")
        with lzma.open(path, "rt", encoding="utf-8") as handle:
            start: re.Match | None = None
            lines: list[str] = []
            for line in handle:
                if line.startswith("<doc "):
                    start, lines = _DOC_START.match(line), []
                    if start is None:
                        raise ValueError(f"{path}: malformed <doc> line {line[:120]!r}")
                elif line.startswith("</doc>"):
                    if start is None:
                        raise ValueError(f"{path}: </doc> without <doc> (file damaged? verify it with "
                                         "python -m lmstudy data verify wikipedia)")
                    page_id, url, title = start.group(1), start.group(2), html.unescape(start.group(3))
                    text = _article_text(lines, title)
                    if text:
                        yield Document(page_id, text, domain="wikipedia", title=title,
                                       meta={"shard": shard, "url": url})
                    start, lines = None, []
                else:
                    lines.append(line)
