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
    """Stream the documents of corpus ``name`` (a folder name of the data directory, or a user corpus
    registered with ``python -m lmstudy data add``: :mod:`lmstudy.data.user_corpus`).

    Raises a clear error naming the missing file and the fetch command when the corpus is absent.
    ``options`` go to the corpus reader (e.g. ``split=``, ``limit=``); see ``lmstudy.data.readers``.
    """
    from lmstudy.data.catalogue import corpus_path
    from lmstudy.data.readers import READERS
    from lmstudy.data.user_corpus import is_registered, read_user_corpus, registered_corpora, user_corpus_dir

    if name in READERS:
        return READERS[name](corpus_path(name), **options)
    if is_registered(name):
        return read_user_corpus(user_corpus_dir(name), **options)
    raise KeyError(f"no reader for corpus {name!r}; readers exist for: {', '.join(sorted(READERS))}; registered "
                   f"user corpora: {', '.join(registered_corpora()) or 'none'}")


__all__ = ["Document", "iter_documents"]
