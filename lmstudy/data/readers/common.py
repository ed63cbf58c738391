"""What every corpus reader shares: the text convention, archive streaming, option checks, ``limit=``.

Text convention (every reader)
    ``Document.text`` is plain text with its line structure kept: one paragraph, sentence, message
    or caption per line (whichever unit the corpus has), lines stripped, no blank lines, no leading or
    trailing newline. Readers do not lowercase, tokenise or normalise (that is ``lmstudy.text``); they
    only remove markup that is not text (HTML line breaks, SGML entities, extractor tags, log
    timestamps). Hard-wrapped prose (Gutenberg books, Reuters, BBC) is unwrapped: the lines of one
    paragraph are joined with a space, because the wrapping is typesetting, not text.

Streaming
    Large archives are read with ``tarfile.open(path, "r|xz")`` (streaming mode: one pass, members in
    archive order, never the whole decompressed archive in memory) or ``lzma.open`` line by line.
    A reader is a generator, so stopping early (``limit=``, ``break``) stops decompressing too.
"""

from __future__ import annotations

import functools
import itertools
import re
import tarfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from lmstudy.data.documents import Document

_BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n")


def join_lines(lines: Iterable[str]) -> str:
    """The text convention: strip every line, drop empty ones, join with newlines."""
    return "\n".join(stripped for line in lines if (stripped := line.strip()))


def unwrap_paragraphs(text: str) -> str:
    """Hard-wrapped text (paragraphs separated by blank lines) -> one paragraph per line."""
    paragraphs = _BLANK_LINE.split(text.replace("\r\n", "\n"))
    return join_lines(" ".join(paragraph.split()) for paragraph in paragraphs)


def decode_text(data: bytes) -> str:
    """UTF-8, falling back to cp1252 for the odd file written in a Windows code page (BBC has one)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def iter_tar(path: Path, suffix: str | tuple[str, ...] = "") -> Iterator[tuple[str, bytes]]:
    """Stream ``(member name, bytes)`` of the regular files of a tar(.xz/.gz) archive, in archive order.

    Streaming mode (``r|*``): one forward pass, one member in memory at a time. Names ending with
    ``suffix`` only, when given.
    """
    require_file(path)
    with tarfile.open(path, "r|*") as archive:
        for member in archive:
            if member.isfile() and member.name.endswith(suffix):
                handle = archive.extractfile(member)
                assert handle is not None  # a regular file always has contents
                yield member.name, handle.read()


def require_file(path: Path) -> Path:
    """``path`` if it is a file, else a FileNotFoundError that says what is missing and how to fix it."""
    if not path.is_file():
        corpus = path.parent.name
        raise FileNotFoundError(
            f"{path} is missing: corpus {corpus!r} is not complete (fetch it with: "
            f"python -m lmstudy data fetch {corpus}, or point $LMSTUDY_DATA at a copy of shared/data)"
        )
    return path


def check_choice(option: str, value: str, allowed: Sequence[str]) -> str:
    """``value`` if it is one of ``allowed``, else a ValueError naming the option and the choices."""
    if value not in allowed:
        raise ValueError(f"{option}={value!r} is not valid; choose one of: {', '.join(map(str, allowed))}")
    return value


def check_choices(option: str, values: str | Iterable[str] | None, allowed: Sequence[str]) -> tuple[str, ...]:
    """Normalise a one-or-many option (None = all of ``allowed``) and check each value."""
    if values is None:
        return tuple(allowed)
    if isinstance(values, str):
        values = (values,)
    return tuple(check_choice(option, value, allowed) for value in values)


def reader(function: Callable[..., Iterator[Document]]) -> Callable[..., Iterator[Document]]:
    """Decorate a ``read_<corpus>(root, **options)`` generator with what every reader offers.

    - ``root`` may be a str or a Path and must be a folder;
    - ``limit=N`` yields the first N documents only, and closes the generator at once so that the
      archive being streamed stops decompressing (a cheap slice of any corpus).
    """

    @functools.wraps(function)
    def wrapper(root: str | Path, *, limit: int | None = None, **options) -> Iterator[Document]:
        # Checked here, before the first document is asked for, so a bad call fails where it is made.
        root = Path(root)
        if not root.is_dir():
            raise FileNotFoundError(
                f"corpus folder {root} does not exist (fetch it with: python -m lmstudy data fetch "
                f"{root.name}, or point $LMSTUDY_DATA at a copy of shared/data)"
            )
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise ValueError(f"limit={limit!r} must be a non-negative integer (or None for all documents)")
        return _first(function(root, **options), limit)

    return wrapper


def _first(documents: Iterator[Document], limit: int | None) -> Iterator[Document]:
    """The first ``limit`` documents (all when None), closing the source as soon as we stop."""
    try:
        yield from documents if limit is None else itertools.islice(documents, limit)
    finally:
        documents.close()
