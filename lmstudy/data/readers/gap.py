"""Reader of GAP, gendered ambiguous pronouns (Webster et al. 2018; ``gap_coreference/gap-*.tsv``).

Format: TSV with a header: ``ID, Text, Pronoun, Pronoun-offset, A, A-offset, A-coref, B,
B-offset, B-coref, URL``; offsets are character offsets into Text; A-coref / B-coref are
``TRUE``/``FALSE``. Files: development (2,000), test (2,000), validation (454).

A document is one example: ``doc_id`` = ID (``development-1``), text = the Wikipedia snippet
exactly as in the file (one line, no surrounding space: the offsets index into it), ``title`` =
the Wikipedia page from the URL (unquoted, underscores as spaces; the splits use it to keep these
pages out of Wikipedia training data),
``meta`` = the other columns with offsets as int and corefs as bool, plus ``split``. Domain
``wikipedia``, no label. ``split=`` development / test / validation / None.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from pathlib import Path
from urllib.parse import unquote

from lmstudy.data.documents import Document
from lmstudy.data.readers.common import check_choices, reader, require_file

SPLITS = ("development", "test", "validation")


def page_title(url: str) -> str | None:
    """``http://en.wikipedia.org/wiki/Big_Brother_(UK)`` -> ``Big Brother (UK)``."""
    if "/wiki/" not in url:
        return None
    return unquote(url.rsplit("/wiki/", 1)[1]).replace("_", " ")


@reader
def read_gap_coreference(root: Path, split: str | Iterable[str] | None = None) -> Iterator[Document]:
    """GAP examples, one document each."""
    for part in check_choices("split", split, SPLITS):
        path = require_file(root / f"gap-{part}.tsv")
        with path.open(encoding="utf-8", newline="") as handle:
            # QUOTE_NONE: the texts contain bare double quotes, and no field is quoted.
            for row in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
                meta = {
                    "split": part,
                    "pronoun": row["Pronoun"], "pronoun_offset": int(row["Pronoun-offset"]),
                    "a": row["A"], "a_offset": int(row["A-offset"]), "a_coref": row["A-coref"].upper() == "TRUE",
                    "b": row["B"], "b_offset": int(row["B-offset"]), "b_coref": row["B-coref"].upper() == "TRUE",
                    "url": row["URL"],
                }
                yield Document(row["ID"], row["Text"], domain="wikipedia", title=page_title(row["URL"]),
                               meta=meta)
