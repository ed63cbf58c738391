"""Download a corpus into the data-directory layout, checking every byte against the catalogue.

``fetch(name)`` gets each data file of ``CATALOGUE[name]`` (see :mod:`lmstudy.data.catalogue`):

- Each download streams to ``<file>.part``. If a ``.part`` is already there (an interrupted run), the
  download resumes with an HTTP ``Range: bytes=<size>-`` request; a server that ignores Range answers
  200 with the whole file, and the download restarts from zero.
- The result is checked against the sha256 that ships with the package, then moved into place with
  ``os.replace`` (atomic: a file in the layout is complete and correct, or absent). On a mismatch the
  ``.part`` is deleted and :class:`ChecksumMismatchError` names the file and both hashes.
- Files already present with a good checksum are not downloaded again.

Where files come from (``Source.packing``):

``copy``
    a public file at a fixed commit (``raw.githubusercontent.com/<owner>/<repo>/<commit>/<path>``),
    byte-identical to the shared copy.
``concat+xz`` (the Wikipedia shards)
    the public files, downloaded one by one (each resumable) into ``.<file>.parts/``, concatenated in
    order while hashing: the concatenation must have the sha256 SOURCE.txt gives for the decompressed
    shard. It is then compressed with lzma preset 9|extreme (= ``xz -9e``) into place. The xz bytes may
    differ from the shared copy's (another liblzma), which is why ``verify`` accepts an ``.xz`` whose
    *decompressed stream* has the recorded inner sha256.
``repacked``
    tars built for shared/data from a repository tree (or from several repositories): no public URL
    serves these bytes, and a GitHub archive of the repository is a different tar (other root folder,
    other files, other headers), so they cannot be rebuilt and checked from the origin. They come from
    a mirror of shared/data only (below); without one, ``fetch`` stops with an error that says so.

Mirrors: ``base_url`` (or ``$LMSTUDY_FETCH_BASE_URL``) replaces every origin: the mirror serves the
layout itself at ``<base_url>/<corpus>/<relative path>`` (e.g. a web server on a copy of shared/data).
For an ``.xz`` file a mirror may instead serve the original gzip archive, ``<name without .xz>.gz``
(e.g. ``imdb/aclImdb.tar.gz``): its decompressed tar must have the inner sha256 from SOURCE.txt, and
it is written as ``.xz`` (preset 9|extreme). From a mirror ``fetch`` also gets ``SOURCE.txt`` when the
mirror has it (optional: provenance notes).

Only ``urllib.request`` is used (no new dependency). Nothing here runs unless a user asks for a fetch.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import lzma
import os
import shutil
import urllib.error
import urllib.parse
import urllib.request
from contextlib import ExitStack
from pathlib import Path

from tqdm.auto import tqdm

from lmstudy import __version__
from lmstudy.data.catalogue import (
    CHUNK_BYTES,
    CONCAT_XZ,
    COPY,
    REPACKED,
    Corpus,
    Source,
    check_file,
    file_sha256,
    get_corpus,
    xz_stream_sha256,
)
from lmstudy.paths import data_dir

BASE_URL_ENV = "LMSTUDY_FETCH_BASE_URL"
TIMEOUT_SECONDS = 60
XZ_PRESET = 9 | lzma.PRESET_EXTREME  # the shared copies were made with xz -9e


class FetchError(RuntimeError):
    """A download that could not be completed (network, HTTP status, unusable source)."""


class ChecksumMismatchError(FetchError):
    """Downloaded bytes that are not the catalogue's: nothing was put in place."""

    def __init__(self, path: Path, expected: str, actual: str, what: str = "sha256"):
        self.path, self.expected, self.actual = path, expected, actual
        super().__init__(f"checksum mismatch for {path}: expected {what} {expected}, got {actual}; "
                         f"the download was deleted (the source changed or is corrupt: try a mirror with --base-url)")


class _NotFound(FetchError):
    """HTTP 404: lets a mirror fall back from ``<file>.xz`` to ``<file>.gz``."""


def fetch(name: str | Corpus, dest_root: Path | None = None, base_url: str | None = None) -> Path:
    """Download corpus ``name`` into ``<dest_root>/<name>/`` (default: the data directory).

    ``base_url`` (default ``$LMSTUDY_FETCH_BASE_URL``) is a mirror serving ``<corpus>/<relative path>``.
    Returns the corpus folder. Raises :class:`FetchError` (or :class:`ChecksumMismatchError`).
    """
    corpus = name if isinstance(name, Corpus) else get_corpus(name)
    base_url = base_url or os.environ.get(BASE_URL_ENV) or None
    folder = (Path(dest_root) if dest_root is not None else data_dir()) / corpus.name
    for file in corpus.files:
        target = folder / file
        source = corpus.sources[file]
        expected = corpus.sha256[file]
        if target.is_file() and check_file(target, expected, source.inner_sha256) is None:
            continue  # already there and good
        target.parent.mkdir(parents=True, exist_ok=True)
        if base_url:
            _fetch_from_mirror(base_url, corpus, file, target)
        elif source.packing == COPY:
            _download_checked(source.url, target, expected)
        elif source.packing == CONCAT_XZ:
            _fetch_concatenated_xz(source, target)
        elif source.packing == REPACKED:
            raise FetchError(
                f"{corpus.name}/{file} was packed for shared/data ({source.note}) from {corpus.origin}; "
                f"no public URL serves these bytes, so it can only come from a mirror of shared/data: "
                f"python -m lmstudy data fetch {corpus.name} --base-url URL (or set ${BASE_URL_ENV})"
            )
        else:
            raise ValueError(f"unknown packing {source.packing!r} for {corpus.name}/{file}")
    if base_url:
        for file in corpus.notes_files:  # provenance notes: optional, a mirror may not have them
            try:
                _download_checked(_mirror_url(base_url, corpus.name, file), folder / file, corpus.sha256[file])
            except _NotFound:
                pass
    return folder


# --------------------------------------------------------------------------------------------------
# Sources
# --------------------------------------------------------------------------------------------------


def _mirror_url(base_url: str, corpus_name: str, file: str) -> str:
    return f"{base_url.rstrip('/')}/{urllib.parse.quote(f'{corpus_name}/{file}')}"


def _fetch_from_mirror(base_url: str, corpus: Corpus, file: str, target: Path) -> None:
    """The layout file itself; for an ``.xz`` the mirror may serve the ``.gz`` it was made from."""
    source = corpus.sources[file]
    try:
        _download_checked(_mirror_url(base_url, corpus.name, file), target, corpus.sha256[file],
                          source.inner_sha256)
    except _NotFound:
        if not (file.endswith(".xz") and source.inner_sha256):
            raise
        gz_file = file.removesuffix(".xz") + ".gz"
        gz_part = target.with_name(target.name.removesuffix(".xz") + ".gz.part")
        _download(_mirror_url(base_url, corpus.name, gz_file), gz_part)
        try:
            with gzip.open(gz_part, "rb") as stream:
                _write_xz_checked([stream], target, source.inner_sha256)
        except (OSError, EOFError) as error:  # not gzip, or truncated
            raise ChecksumMismatchError(target, source.inner_sha256, f"unreadable gzip ({error})",
                                        "decompressed sha256") from error
        finally:
            gz_part.unlink(missing_ok=True)


def _fetch_concatenated_xz(source: Source, target: Path) -> None:
    """Download the parts (each resumable), concatenate them while hashing, write xz into place."""
    parts_dir = target.with_name(f".{target.name}.parts")
    parts_dir.mkdir(exist_ok=True)
    parts = []
    for index, url in enumerate(tqdm(source.urls, desc=f"parts of {target.name}", unit="file")):
        part = parts_dir / f"{index:04d}"
        if not part.is_file():  # a completed part was renamed from .part: only those are skipped
            _download(url, part.with_suffix(".part"), leave=False)
            os.replace(part.with_suffix(".part"), part)
        parts.append(part)
    try:
        with ExitStack() as stack:
            streams = [stack.enter_context(open(part, "rb")) for part in parts]
            _write_xz_checked(streams, target, source.inner_sha256)
    except ChecksumMismatchError:
        shutil.rmtree(parts_dir, ignore_errors=True)  # bad parts: the next run starts from scratch
        raise
    shutil.rmtree(parts_dir, ignore_errors=True)


def _write_xz_checked(streams: list, target: Path, inner_sha256: str) -> None:
    """Compress the concatenated ``streams`` into ``target`` (xz -9e) if their sha256 is ``inner_sha256``.

    One pass: hash and compress together into ``<target>.part``; replace into place only on a match.
    """
    part = target.with_name(target.name + ".part")
    digest = hashlib.sha256()
    try:
        with lzma.open(part, "wb", preset=XZ_PRESET) as out, \
                tqdm(unit="B", unit_scale=True, unit_divisor=1024, desc=f"xz {target.name}", leave=False) as bar:
            for stream in streams:
                while chunk := stream.read(CHUNK_BYTES):
                    digest.update(chunk)
                    out.write(chunk)
                    bar.update(len(chunk))
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    if digest.hexdigest() != inner_sha256:
        part.unlink()
        raise ChecksumMismatchError(target, inner_sha256, digest.hexdigest(), "decompressed sha256")
    os.replace(part, target)


# --------------------------------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------------------------------


def _download_checked(url: str, target: Path, expected_sha256: str, inner_sha256: str | None = None) -> None:
    """Download ``url`` to ``<target>.part``, check it, then ``os.replace`` it to ``target``.

    Good = the expected sha256, or (an ``.xz`` re-made by a mirror) a decompressed stream with
    ``inner_sha256``. Otherwise the ``.part`` is deleted and :class:`ChecksumMismatchError` raised.
    """
    part = target.with_name(target.name + ".part")
    _download(url, part)
    actual = file_sha256(part)
    if actual != expected_sha256 and not (inner_sha256 and xz_stream_sha256(part) == inner_sha256):
        part.unlink()
        raise ChecksumMismatchError(target, expected_sha256, actual)
    os.replace(part, target)


def _open_url(url: str, offset: int):
    headers = {"User-Agent": f"lmstudy/{__version__}"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_SECONDS)
    except urllib.error.HTTPError as error:
        if error.code == 416 and offset:  # range not satisfiable: the .part already holds the whole file
            return None
        kind = _NotFound if error.code == 404 else FetchError
        raise kind(f"download of {url} failed: HTTP {error.code} {error.reason}") from error
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise FetchError(f"cannot download {url}: {reason}") from error


def _download(url: str, part: Path, leave: bool = True) -> None:
    """Stream ``url`` into ``part``, resuming from the bytes already in ``part`` when the server allows."""
    offset = part.stat().st_size if part.is_file() else 0
    response = _open_url(url, offset)
    if response is None:
        return
    with response:
        content_range = response.headers.get("Content-Range", "")
        resumed = offset > 0 and response.status == 206 and content_range.startswith(f"bytes {offset}-")
        if not resumed:
            if response.status == 206:  # a range we did not ask for: unusable, start over without Range
                response.close()
                part.unlink(missing_ok=True)
                return _download(url, part, leave)
            offset = 0  # the server ignored Range (200 + the whole file): restart
        length = response.headers.get("Content-Length")
        total = offset + int(length) if length is not None else None
        received = offset
        with open(part, "ab" if resumed else "wb") as out, \
                tqdm(total=total, initial=offset, unit="B", unit_scale=True, unit_divisor=1024,
                     desc=part.name.removesuffix(".part"), leave=leave) as bar:
            try:
                while chunk := response.read(CHUNK_BYTES):
                    out.write(chunk)
                    received += len(chunk)
                    bar.update(len(chunk))
            except (OSError, http.client.HTTPException) as error:  # reset, timeout, IncompleteRead
                raise FetchError(f"download of {url} interrupted after {received} bytes ({error}); "
                                 f"{part} is kept: run the same command again to resume") from error
    if total is not None and received < total:
        raise FetchError(f"download of {url} ended after {received} of {total} bytes; "
                         f"{part} is kept: run the same command again to resume")


__all__ = ["BASE_URL_ENV", "ChecksumMismatchError", "FetchError", "fetch"]
