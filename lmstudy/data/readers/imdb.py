"""Reader of the IMDB movie reviews (Maas et al. 2011; ``imdb/aclImdb.tar.xz``).

Format: the ``aclImdb/`` tree in one tar.xz: ``{train,test}/{pos,neg}/<id>_<rating>.txt`` (12,500
reviews each) and ``train/unsup/<id>_0.txt`` (50,000 unrated reviews); one review per file, one
line, with ``<br />`` tags where the author broke lines.

Decisions:

- a document is one review; ``<br />`` (any case or spacing) becomes a line break, nothing else is
  changed (the few other tags, e.g. ``<i>``, are left: they are rare and sometimes part of the text);
- ``doc_id = "<split dir>/<polarity dir>/<id>"``, e.g. ``train/pos/10591`` or ``train/unsup/17``: the
  ids restart in every folder, so the folder is part of the id;
- ``label`` is the rating from the file name as a string, ``"1"``..``"10"`` (``"0"`` for unsup:
  unrated); ``meta = {"split": "train"|"test"|"unsup", "sentiment": "pos"|"neg"|"unsup",
  "rating": int}``. Unsup reviews live under ``train/`` in the archive but are their own split here;
- ``split=`` train / test / unsup, several, or None for all; documents come in archive order (test
  first in this archive), a fixed order for a given archive.

Streaming: ``tarfile`` streaming mode, one review in memory at a time; the whole archive is 206 MiB
decompressed and takes 15-20 s to read; asking for one split still decompresses the archive
up to that split's last file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from lmstudy.data.documents import Document
from lmstudy.data.readers.common import check_choices, decode_text, iter_tar, join_lines, reader

SPLITS = ("train", "test", "unsup")

# aclImdb/<split dir>/<polarity dir>/<id>_<rating>.txt
_REVIEW = re.compile(r"^aclImdb/(train|test)/(pos|neg|unsup)/(\d+)_(\d+)\.txt$")
_BR_TAG = re.compile(r"<br\s*/?>", re.IGNORECASE)


def review_text(raw: str) -> str:
    """A review with its ``<br />`` tags turned into line breaks."""
    return join_lines(_BR_TAG.sub("\n", raw).split("\n"))


@reader
def read_imdb(root: Path, split: str | Iterable[str] | None = None) -> Iterator[Document]:
    """IMDB reviews, one document each; label = rating ("0" for unsup)."""
    wanted = set(check_choices("split", split, SPLITS))
    for name, data in iter_tar(root / "aclImdb.tar.xz", ".txt"):
        review = _REVIEW.match(name)
        if review is None:
            continue  # README, vocabulary and url lists
        split_dir, sentiment, review_id, rating = review.groups()
        part = "unsup" if sentiment == "unsup" else split_dir
        if part not in wanted:
            continue
        text = review_text(decode_text(data))
        if text:
            yield Document(f"{split_dir}/{sentiment}/{review_id}", text, domain="imdb", label=rating,
                           meta={"split": part, "sentiment": sentiment, "rating": int(rating)})
