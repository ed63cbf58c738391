"""Reader of Multi30k task 1 (Elliott et al. 2016; ``multi30k/data/task1/raw/<split>.<lang>.gz``).

Format: gzip plain text, one untokenized image caption a line; the files of one split are
line-aligned across languages (line n of ``train.en`` translates line n of ``train.de``). Splits:
``train`` (29,000), ``val`` (1,014), ``test_2016_flickr``, ``test_2017_flickr``, ``test_2017_mscoco``
(no cs), ``test_2018_flickr``; languages en, de, fr, cs.

A document is one caption: ``doc_id = "<split>.<lang>-<line, 1-based, 5 digits>"``, ``label`` = the
language, ``meta = {"split", "language", "line"}`` (``line`` pairs translations: same split and
line = same image and meaning), domain ``captions``. ``split=`` and ``languages=`` choose (default
all, in the orders above); a split/language file that does not exist (cs for the 2017 tests) is
skipped. For translation pairs, read two languages and join on ``(split, line)``.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Iterator
from pathlib import Path

from lmstudy.data.documents import Document
from lmstudy.data.readers.common import check_choices, reader

SPLITS = ("train", "val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco", "test_2018_flickr")
LANGUAGES = ("en", "de", "fr", "cs")


@reader
def read_multi30k(
    root: Path,
    split: str | Iterable[str] | None = None,
    languages: str | Iterable[str] | None = None,
) -> Iterator[Document]:
    """Multi30k captions, one document each; label = language."""
    chosen_languages = check_choices("languages", languages, LANGUAGES)
    folder = root / "data" / "task1" / "raw"
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is missing: corpus 'multi30k' is not complete "
                                "(fetch it with: python -m lmstudy data fetch multi30k)")
    for part in check_choices("split", split, SPLITS):
        for language in chosen_languages:
            path = folder / f"{part}.{language}.gz"
            if not path.is_file():
                continue  # no Czech for the 2017 test sets
            with gzip.open(path, "rt", encoding="utf-8") as lines:
                for number, line in enumerate(lines, start=1):
                    caption = line.strip()
                    if caption:
                        yield Document(f"{part}.{language}-{number:05d}", caption, domain="captions",
                                       label=language, meta={"split": part, "language": language, "line": number})
