"""``python -m lmstudy data add NAME PATH``: register your own corpus as a domain with fixed splits.

Welch et al.'s advice is for someone with 10-100M tokens of in-domain text; this turns such text into
a domain the studies accept by name (``-p domain NAME``), split exactly as the bundled domains are
(:mod:`lmstudy.data.splits`, split format 2).

Formats of ``PATH`` (what one document is):

- a folder of ``.txt`` files (searched recursively, sorted by path): one file = one document, id = its path
  relative to the folder;
- a ``.jsonl`` file: one JSON object per line, the text in its ``--text-column`` (default ``text``); id =
  the line number;
- a ``.csv`` file with a header row, the text in its ``--text-column`` column; id = the row number;
- a Hugging Face ``datasets`` folder written by ``save_to_disk`` (a ``Dataset``, or a ``DatasetDict``
  whose splits are read in its order), the text in ``--text-column``; id = the row number (``split-row``
  for a DatasetDict). Reading it needs the ``datasets`` package (``pip install datasets``, in the dev
  extras), imported only for this format.

Every file must be UTF-8 (a byte-order mark is allowed). What happens, in order:

1. Checks before anything is written (each error is one line, :class:`CorpusError`): ``NAME`` is a safe
   identifier (:data:`~lmstudy.data.user_corpus.NAME_PATTERN`: lower-case letters, digits, ``_``, ``-``)
   and not the name of a bundled domain, corpus or reader; it is not registered yet (``--force``
   replaces it); ``PATH`` exists and has one of the formats above.
2. Read the documents and apply the readers' text convention (:mod:`lmstudy.data.readers.common`:
   every line stripped, blank lines dropped; ``--unwrap`` first joins the lines of each blank-line
   separated paragraph, for hard-wrapped prose, as the book and news readers do), writing them to
   ``documents.jsonl`` in a temporary folder beside the final one. An unreadable file, text that is not
   UTF-8, a binary file (NUL bytes), a missing text column or a malformed line stops here.
3. Split with the bundled domains' code: :func:`lmstudy.data.splits.read_domain` (PTB-style
   normalisation, token counts, 13-word shingles, exact duplicates and empty documents dropped) and
   :func:`~lmstudy.data.splits.split_table` (near-duplicate clusters kept in one part, seed 0, valid /
   test / train filled to their targets, the rest pretrain).
4. Size. The targets are PTB's (valid 70,390 / test 78,669 / train 887,521 tokens, tokens = normalised
   words plus one ``<eos>`` per line); ``--train-tokens N`` scales all three by N / 887,521. **Minimum**:
   the three targets plus a pretraining part at least as large as the train target (the embeddings'
   data; Welch et al.'s premise is that it is the larger one): 1,924,101 tokens with the default
   targets (:func:`minimum_tokens`), about 1.8M words of ordinary prose. A corpus with no text is
   *empty*, one below the minimum *too small* (the message gives both counts and the option to lower
   the targets); one whose near-duplicate clusters cannot fill the parts fails with the split's reason.
5. Write ``split.json`` and ``corpus.json`` into the temporary folder, then rename it to
   ``user_data_dir()/NAME`` (:mod:`lmstudy.data.user_corpus`); on any failure the temporary folder is
   removed (and the user-data folder too when this call created it): nothing is left behind.

``--force`` replaces a registered corpus of the same name. Runs in the run cache are keyed by the domain
*name*, so runs trained on the old text (of a replaced corpus, or of one deleted by hand and added again)
would be reused as they are: :func:`add_corpus` lists every cached run whose config names the corpus
(``Registration.stale_runs``) and the command prints them; delete them or register under a new name.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from tqdm.auto import tqdm

from lmstudy.data.readers.common import join_lines, unwrap_paragraphs
from lmstudy.data.splits import DOMAINS, Split, SplitTargets, document_key, read_domain, split_table, user_domain
from lmstudy.data.user_corpus import (
    DOCUMENTS_FILE, INFO_FILE, NAME_PATTERN, SPLIT_FILE, UserCorpusInfo, documents_in, is_registered,
    user_corpus_dir,
)
from lmstudy.paths import runs_dir, user_data_dir
from lmstudy.runs import replace_folder

TXT_FOLDER, JSONL, CSV, HF_DATASETS = "txt folder", "jsonl", "csv", "hf datasets"
FORMATS = (TXT_FOLDER, JSONL, CSV, HF_DATASETS)
DEFAULT_TEXT_COLUMN = "text"
PTB_TARGETS = SplitTargets()
MIN_TRAIN_TOKENS = 1_000  # below this a valid target is < 80 tokens: a single paragraph could not fit in it
# Files a Hugging Face ``save_to_disk`` folder has (a DatasetDict: the first; a Dataset: the other two).
HF_MARKERS = ("dataset_dict.json", "state.json", "dataset_info.json")
FORMATS_HELP = "a folder of .txt files, a .jsonl or .csv file with a text column, or a Hugging Face datasets folder"


class CorpusError(ValueError):
    """A corpus that cannot be registered; the message is one line saying what is wrong and what to do."""


@dataclass(frozen=True)
class Registration:
    """What :func:`add_corpus` registered: the record, the split, the folder and the runs it made stale."""

    info: UserCorpusInfo
    split: Split
    folder: Path
    stale_runs: tuple[Path, ...] = ()  # --force: cached runs naming the replaced corpus


# --- targets and the minimum size -----------------------------------------------------------------

def scaled_targets(train_tokens: int = PTB_TARGETS.train) -> SplitTargets:
    """PTB's split targets scaled so that train is ``train_tokens`` (valid and test keep PTB's ratios)."""
    if train_tokens < MIN_TRAIN_TOKENS:
        raise CorpusError(f"--train-tokens {train_tokens:,} is too small: at least {MIN_TRAIN_TOKENS:,} "
                          "(valid and test scale with it and must hold whole documents)")
    ratio = train_tokens / PTB_TARGETS.train
    return SplitTargets(valid=round(PTB_TARGETS.valid * ratio), test=round(PTB_TARGETS.test * ratio),
                        train=train_tokens)


def minimum_tokens(targets: SplitTargets = PTB_TARGETS) -> int:
    """The smallest corpus (tokens after normalisation, ``<eos>`` included) that ``targets`` can split:
    valid + test + train, plus a pretraining part at least as large as train."""
    return targets.valid + targets.test + 2 * targets.train


# --- checks before anything is written --------------------------------------------------------------

def _bundled_names() -> set[str]:
    from lmstudy.data.catalogue import CATALOGUE
    from lmstudy.data.readers import READERS

    return set(DOMAINS) | set(CATALOGUE) | set(READERS)


def check_name(name: str, force: bool = False) -> None:
    """Raise :class:`CorpusError` unless ``name`` is a safe, free name (``force``: a registered one is fine)."""
    if not NAME_PATTERN.fullmatch(name):
        raise CorpusError(f"corpus name {name!r} is not a safe identifier: use 1-64 lower-case letters, digits, "
                          "'_' or '-', starting with a letter (e.g. my_corpus)")
    if name in _bundled_names():
        raise CorpusError(f"corpus name {name!r} is the name of a bundled domain or corpus: choose another "
                          "(bundled names: python -m lmstudy data list)")
    if user_corpus_dir(name).exists() and not force:
        what = "is already registered" if is_registered(name) else "has a folder (an unfinished registration?)"
        raise CorpusError(f"user corpus {name!r} {what} at {user_corpus_dir(name)}: pass --force to replace it, "
                          "or choose another name")


def detect_format(path: Path) -> str:
    """The format of ``path`` (one of :data:`FORMATS`); :class:`CorpusError` when it is missing or unsupported."""
    if not path.exists():
        raise CorpusError(f"corpus path {path} does not exist: give {FORMATS_HELP}")
    if path.is_dir():
        if any((path / marker).is_file() for marker in HF_MARKERS[:2]):
            return HF_DATASETS
        if next(path.rglob("*.txt"), None) is not None:
            return TXT_FOLDER
        raise CorpusError(f"folder {path} holds no .txt files and is not a Hugging Face datasets folder "
                          f"(no {HF_MARKERS[0]} or {HF_MARKERS[1]}): give {FORMATS_HELP}")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return JSONL
    if suffix == ".csv":
        return CSV
    if suffix == ".txt":  # one file would be one document: a corpus is many
        raise CorpusError(f"{path} is a single .txt file: put the documents in a folder, one .txt file each, and "
                          "give the folder (or use a .jsonl or .csv file with one document a row)")
    raise CorpusError(f"unsupported file type {suffix or '(none)'!r} of {path}: give {FORMATS_HELP}")


# --- reading the formats: (id, raw text) pairs ---------------------------------------------------------

def _decode(data: bytes, where: str) -> str:
    """UTF-8 text of a file's bytes (a BOM dropped); CorpusError for binary or non-UTF-8 content."""
    if b"\x00" in data:
        raise CorpusError(f"{where} is not a text file (it holds NUL bytes): give {FORMATS_HELP}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise CorpusError(f"{where} is not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start}): "
                          "convert it first, e.g. iconv -f latin1 -t utf-8") from None


def _lines(path: Path) -> Iterator[str]:
    """The lines of a UTF-8 text file, streamed (a BOM dropped); CorpusError when it is unreadable,
    binary or not UTF-8."""
    number = 0
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            for number, line in enumerate(handle, start=1):
                if "\x00" in line:
                    raise CorpusError(f"{path} is not a text file (NUL bytes on line {number}): give {FORMATS_HELP}")
                yield line
    except UnicodeDecodeError:
        raise CorpusError(f"{path} is not UTF-8 text (after line {number}): convert it first, e.g. "
                          "iconv -f latin1 -t utf-8") from None
    except OSError as error:
        raise CorpusError(f"cannot read {path}: {error.strerror or error}") from None


def _text_value(value, where: str, column: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise CorpusError(f"{where}: column {column!r} holds a {type(value).__name__}, not text: choose the text "
                          "column with --text-column")
    return value


def _missing_column(column: str, columns, where: str) -> CorpusError:
    return CorpusError(f"{where} has no column {column!r} (columns: {', '.join(map(str, columns)) or 'none'}): "
                       "choose one with --text-column")


def _txt_folder(path: Path) -> Iterator[tuple[str, str]]:
    for file in sorted(path.rglob("*.txt")):
        if file.is_file():
            try:
                data = file.read_bytes()
            except OSError as error:
                raise CorpusError(f"cannot read {file}: {error.strerror or error}") from None
            yield file.relative_to(path).as_posix(), _decode(data, str(file))


def _jsonl(path: Path, column: str) -> Iterator[tuple[str, str]]:
    for number, line in enumerate(_lines(path), start=1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise CorpusError(f"{where} is not JSON ({error.msg}): a .jsonl file holds one JSON object per line") \
                from None
        if not isinstance(record, dict):
            raise CorpusError(f"{where} is a JSON {type(record).__name__}, not an object with a {column!r} field")
        if column not in record:
            raise _missing_column(column, record, where)
        yield str(number), _text_value(record[column], where, column)


def _csv(path: Path, column: str) -> Iterator[tuple[str, str]]:
    csv.field_size_limit(sys.maxsize)  # a document can be longer than csv's 128 KiB default field
    rows = csv.DictReader(_lines(path))
    try:
        if rows.fieldnames is None:
            return  # no header, no rows: an empty corpus
        if column not in rows.fieldnames:
            raise _missing_column(column, rows.fieldnames, str(path))
        for number, row in enumerate(rows, start=1):
            yield str(number), _text_value(row[column], f"{path} row {number}", column)
    except csv.Error as error:
        raise CorpusError(f"{path} line {rows.line_num} is not valid CSV ({error})") from None


def _hf_datasets(path: Path, column: str) -> Iterator[tuple[str, str]]:
    try:
        import datasets
    except ImportError:
        raise CorpusError("reading a Hugging Face datasets folder needs the datasets package: pip install datasets") \
            from None
    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as error:  # datasets raises several types for a damaged folder; all mean "unreadable"
        raise CorpusError(f"cannot load the datasets folder {path}: {str(error).splitlines()[0]}") from None
    parts = loaded.items() if isinstance(loaded, datasets.DatasetDict) else [(None, loaded)]
    for part, dataset in parts:
        where = f"{path}" + (f" split {part!r}" if part else "")
        if column not in dataset.column_names:
            raise _missing_column(column, dataset.column_names, where)
        number = 0
        for batch in dataset.select_columns([column]).iter(batch_size=1_000):
            for value in batch[column]:
                number += 1
                yield (f"{part}-{number}" if part else str(number)), _text_value(value, f"{where} row {number}", column)


def read_source(path: Path, source_format: str, text_column: str | None = None) -> Iterator[tuple[str, str]]:
    """(document id, raw text) of every document of ``path`` in ``source_format`` (see the module docstring)."""
    if source_format == TXT_FOLDER:
        if text_column is not None:
            raise CorpusError("--text-column applies to .jsonl, .csv and datasets folders, not to a folder of "
                              ".txt files")
        return _txt_folder(path)
    column = text_column or DEFAULT_TEXT_COLUMN
    readers = {JSONL: _jsonl, CSV: _csv, HF_DATASETS: _hf_datasets}
    if source_format not in readers:
        raise CorpusError(f"unknown format {source_format!r}; formats: {', '.join(FORMATS)}")
    return readers[source_format](path, column)


def as_text(raw: str, unwrap: bool = False) -> str:
    """The readers' text convention: lines stripped, blank lines dropped; ``unwrap``: one line per paragraph."""
    return unwrap_paragraphs(raw) if unwrap else join_lines(raw.splitlines())


# --- registering -------------------------------------------------------------------------------------

def _write_documents(documents: Iterator[tuple[str, str]], path: Path, unwrap: bool) -> tuple[int, int, int, str]:
    """Write ``documents.jsonl``; returns (documents, non-empty documents, words, sha256 of the file)."""
    digest, count, non_empty, words = hashlib.sha256(), 0, 0, 0
    with path.open("wb") as handle:
        for doc_id, raw in tqdm(documents, desc="reading", unit=" docs"):
            text = as_text(raw, unwrap)
            line = (json.dumps({"id": doc_id, "text": text}, ensure_ascii=False) + "\n").encode("utf-8")
            handle.write(line)
            digest.update(line)
            count, non_empty, words = count + 1, non_empty + bool(text), words + len(text.split())
    return count, non_empty, words, digest.hexdigest()


def _split(name: str, documents_path: Path, targets: SplitTargets, source: str) -> Split:
    """Steps 3-4 of the module docstring on the written documents; CorpusError when the corpus is too small."""
    spec = user_domain(name)
    keyed = ((document_key(name, document), document) for document in documents_in(documents_path, name))
    table = read_domain(name, keyed, spec=spec)
    total, needed = sum(table.tokens.values()), minimum_tokens(targets)
    if total == 0:
        raise CorpusError(f"corpus {source} is empty: no words are left after normalisation")
    if total < needed:
        raise CorpusError(
            f"corpus {source} is too small: {total:,} tokens after normalisation (words + one <eos> per line), the "
            f"minimum is {needed:,} (valid {targets.valid:,} + test {targets.test:,} + train {targets.train:,} + a "
            f"pretraining part of at least {targets.train:,}); lower the targets with --train-tokens (minimum "
            f"{MIN_TRAIN_TOKENS:,}; valid and test scale with it)")
    try:
        split = split_table(name, table, seed=0, targets=targets, spec=spec)
    except ValueError as error:  # enough tokens, but near-duplicate clusters too large to fill a part
        raise CorpusError(f"corpus {source} cannot be split: {error} (near-duplicate documents stay together and a "
                          "cluster over half a part's target goes to pretrain, so near-copies cannot fill the parts)") \
            from None
    if split.tokens["pretrain"] < targets.train:
        raise CorpusError(
            f"corpus {source} is too small: after near-duplicates are kept together only {split.tokens['pretrain']:,} "
            f"tokens are left for the pretraining part, the minimum is {targets.train:,} (the train target); lower "
            "the targets with --train-tokens")
    return split


def stale_runs(name: str) -> list[Path]:
    """Run folders of the run cache whose config names ``name`` as a value (a domain, a vector source)."""
    needle = json.dumps(name)  # the quoted string: "mine" matches the value "mine", not "mine2"
    return sorted(path.parent for path in runs_dir().glob("*/*/config.json")
                  if needle in path.read_text(encoding="utf-8", errors="replace"))


def add_corpus(name: str, path: str | os.PathLike, text_column: str | None = None, force: bool = False,
               train_tokens: int = PTB_TARGETS.train, unwrap: bool = False) -> Registration:
    """Register ``path`` as user corpus ``name`` (see the module docstring); returns the :class:`Registration`.

    Raises :class:`CorpusError` (nothing written) for a bad or taken name, a missing or unsupported path,
    unreadable content, an empty or too small corpus.
    """
    check_name(name, force)
    targets = scaled_targets(train_tokens)
    path = Path(path).expanduser().resolve()
    source_format = detect_format(path)
    documents = read_source(path, source_format, text_column)  # checks the option before anything is written
    root = user_data_dir()
    created_root = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}.adding-"))
    try:
        count, non_empty, words, digest = _write_documents(documents, folder / DOCUMENTS_FILE, unwrap)
        if non_empty == 0:
            raise CorpusError(f"corpus {path} is empty: {count:,} documents, none with text ({FORMATS_HELP})")
        split = _split(name, folder / DOCUMENTS_FILE, targets, str(path))
        split.sources = [[name, {"documents": DOCUMENTS_FILE, "sha256": digest}]]  # the token cache's stamp
        info = UserCorpusInfo(
            name=name, source=str(path), format=source_format,
            text_column=None if source_format == TXT_FOLDER else text_column or DEFAULT_TEXT_COLUMN, unwrap=unwrap,
            documents_read=count, words_read=words, documents_sha256=digest,
            registered_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        (folder / SPLIT_FILE).write_text(split.to_json(), encoding="utf-8")
        (folder / INFO_FILE).write_text(info.to_json(), encoding="utf-8")
        os.chmod(folder, 0o755)  # mkdtemp makes it private; a corpus is an ordinary shared folder
        replace_folder(folder, user_corpus_dir(name))  # --force: the old corpus is put back on failure
    except BaseException:  # KeyboardInterrupt included: leave nothing behind
        shutil.rmtree(folder, ignore_errors=True)
        if created_root and not any(root.iterdir()):
            root.rmdir()
        raise
    # Runs cached before this registration were trained on other text (a replaced or deleted corpus of this name).
    return Registration(info, split, user_corpus_dir(name), tuple(stale_runs(name)))


__all__ = ["CSV", "FORMATS", "HF_DATASETS", "JSONL", "MIN_TRAIN_TOKENS", "TXT_FOLDER", "CorpusError", "Registration",
           "add_corpus", "as_text", "check_name", "detect_format", "minimum_tokens", "read_source", "scaled_targets",
           "stale_runs"]
