"""Corpora: the catalogue (what exists, where it comes from, checksums) and the readers.

The one entry point studies use is :func:`iter_documents`::

    from lmstudy.data import iter_documents
    for doc in iter_documents("imdb", split="train", limit=10):
        print(doc.label, doc.text[:80])
"""

from __future__ import annotations

from collections.abc import Iterator

from lmstudy.data.documents import Document


def iter_documents(name: str, **options) -> Iterator[Document]:
    """Stream the documents of corpus ``name`` (a folder name of the data directory).

    Raises a clear error naming the missing file and the fetch command when the corpus is absent.
    ``options`` go to the corpus reader (e.g. ``split=``, ``limit=``); see ``lmstudy.data.readers``.
    """
    from lmstudy.data.catalogue import corpus_path
    from lmstudy.data.readers import READERS

    if name not in READERS:
        raise KeyError(f"no reader for corpus {name!r}; readers exist for: {', '.join(sorted(READERS))}")
    return READERS[name](corpus_path(name), **options)


__all__ = ["Document", "iter_documents"]
