"""The corpus catalogue: coverage of the data folder and SHA256SUMS, verify, word counts, the data CLI."""

from __future__ import annotations

import dataclasses
import hashlib
import lzma
import shutil
from pathlib import Path

import pytest
from conftest import require_corpus

from lmstudy.data import catalogue
from lmstudy.data import cli as data_cli
from lmstudy.data.catalogue import (
    CATALOGUE,
    CHECKSUMS,
    CONCAT_XZ,
    COPY,
    REPACKED,
    Corpus,
    CorpusMissingError,
    Source,
    UnknownCorpusError,
    corpus_path,
    corpus_present,
    count_words,
    count_words_by_part,
    get_corpus,
    verify,
    verify_corpus,
)
from lmstudy.paths import data_dir

EXPECTED_NAMES = {
    "ptb", "wikitext-2", "wikitext-2-raw", "lambada", "gpt2_bpe", "nltk_data", "gum", "litbank", "wikipedia",
    "imdb", "reddit", "irc", "reuters21578", "bbc_news", "multi30k", "gap_coreference", "wnut17_ner",
}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(autouse=True)
def private_run_cache(tmp_path, monkeypatch):
    """Word counts go to a fresh cache: every test really counts, and the user's runs/ stays untouched."""
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))


# --- the records -----------------------------------------------------------------------------------


def test_catalogue_names_every_corpus_once():
    assert set(CATALOGUE) == EXPECTED_NAMES
    assert all(name == corpus.name for name, corpus in CATALOGUE.items())


def test_every_checksum_line_belongs_to_exactly_one_catalogue_file():
    claimed = [f"{corpus.name}/{file}" for corpus in CATALOGUE.values() for file in corpus.files + corpus.notes_files]
    claimed += list(catalogue.TOP_LEVEL_FILES)
    assert len(claimed) == len(set(claimed))
    assert set(claimed) == set(CHECKSUMS)
    for corpus in CATALOGUE.values():
        assert corpus.notes_files == ("SOURCE.txt",)
        for file in corpus.files:
            assert corpus.sha256[file] == CHECKSUMS[f"{corpus.name}/{file}"]


def test_every_file_has_a_pinned_public_source():
    for corpus in CATALOGUE.values():
        assert set(corpus.sources) == set(corpus.files)
        assert corpus.licence and corpus.description and corpus.origin
        assert corpus.manifest_words > 0 and corpus.word_unit and corpus.word_rule
        for file, source in corpus.sources.items():
            assert source.packing in {COPY, CONCAT_XZ, REPACKED}
            for url in source.urls:
                assert url.startswith(("https://raw.githubusercontent.com/", "https://github.com/")), url
                assert any(len(part) == 40 for part in url.replace(".tar.gz", "").split("/")), f"no commit in {url}"
            if source.packing == COPY:
                assert len(source.urls) == 1
            else:  # re-made files are checked by the sha256 of their decompressed stream
                assert file.endswith(".xz") and len(source.inner_sha256) == 64
    assert len(get_corpus("wikipedia").sources["enwiki_AB.txt.xz"].urls) == 100


def test_get_corpus_unknown_name_lists_valid_names():
    with pytest.raises(UnknownCorpusError) as error:
        get_corpus("penn")
    message = str(error.value)
    assert "'penn'" in message and "ptb" in message and "wnut17_ner" in message


def test_corpus_path_names_missing_file_and_fetch_command(tmp_path):
    (tmp_path / "ptb").mkdir()
    (tmp_path / "ptb" / "ptb.train.txt").write_text("a b\n")
    assert not corpus_present("ptb", root=tmp_path)
    with pytest.raises(CorpusMissingError) as error:
        corpus_path("ptb", root=tmp_path)
    message = str(error.value)
    assert str(tmp_path / "ptb" / "ptb.valid.txt") in message
    assert "ptb.train.txt" not in message
    assert "python -m lmstudy data fetch ptb" in message


# --- against the real data -------------------------------------------------------------------------


def test_catalogue_covers_every_folder_of_the_data_dir():
    for name in CATALOGUE:
        require_corpus(name)
    folders = {path.name for path in data_dir().iterdir() if path.is_dir()}
    assert folders == set(CATALOGUE)
    # The packaged copy is the data dir's SHA256SUMS, byte for byte.
    assert catalogue.CHECKSUMS_FILE.read_bytes() == (data_dir() / "SHA256SUMS").read_bytes()


def test_verify_passes_on_the_real_data():
    for name in CATALOGUE:
        require_corpus(name)
    assert verify() == []


def test_verify_reports_missing_and_corrupted_files(tmp_path):
    require_corpus("ptb")
    folder = tmp_path / "ptb"
    folder.mkdir()
    for file in ("ptb.valid.txt", "ptb.test.txt"):  # train stays missing
        shutil.copyfile(data_dir() / "ptb" / file, folder / file)  # copyfile: writable, unlike the source
    damaged = bytearray((folder / "ptb.test.txt").read_bytes())
    damaged[100] ^= 1
    (folder / "ptb.test.txt").write_bytes(bytes(damaged))

    problems = {problem.path.name: problem for problem in verify(["ptb"], root=tmp_path)}
    assert set(problems) == {"ptb.train.txt", "ptb.test.txt"}
    assert problems["ptb.train.txt"].kind == "missing"
    assert problems["ptb.train.txt"].expected_sha256 == CHECKSUMS["ptb/ptb.train.txt"]
    assert problems["ptb.test.txt"].kind == "checksum mismatch"
    assert problems["ptb.test.txt"].actual_sha256 == sha256(bytes(damaged))
    assert "python -m lmstudy data fetch ptb" in str(problems["ptb.test.txt"])


def test_data_verify_command(tmp_path, monkeypatch, capsys):
    require_corpus("ptb")
    assert data_cli.main(["verify", "ptb"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("ok:")

    folder = tmp_path / "ptb"
    folder.mkdir()
    for file in ("ptb.train.txt", "ptb.valid.txt"):  # test stays missing
        shutil.copyfile(data_dir() / "ptb" / file, folder / file)
    folder.joinpath("ptb.valid.txt").write_text("not ptb\n")
    monkeypatch.setenv("LMSTUDY_DATA", str(tmp_path))
    assert data_cli.main(["verify", "ptb"]) == 1
    out = capsys.readouterr().out
    for file in ("ptb.valid.txt", "ptb.test.txt"):
        assert str(folder / file) in out and CHECKSUMS[f"ptb/{file}"] in out
    assert "python -m lmstudy data fetch ptb" in out
    assert data_cli.main(["verify", "nope"]) == 2


@pytest.mark.parametrize("name", ["ptb", "wikitext-2", "gap_coreference", "wnut17_ner", "bbc_news", "multi30k"])
def test_word_count_reproduces_manifest(name):
    require_corpus(name)
    assert count_words(name) == get_corpus(name).manifest_words


def test_word_count_parts_reproduce_manifest_splits():
    require_corpus("ptb")
    require_corpus("bbc_news")
    assert count_words_by_part("ptb") == {"ptb.train.txt": 887_521, "ptb.valid.txt": 70_390, "ptb.test.txt": 78_669}
    assert count_words_by_part("bbc_news") == {
        "business": 167_729, "entertainment": 127_620, "politics": 189_307, "sport": 168_253, "tech": 201_581,
    }


def test_data_list_shows_counted_and_manifest_figures(capsys):
    require_corpus("ptb")
    assert data_cli.main(["list", "--no-count"]) == 0  # nothing counted yet: no figure for ptb
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("ptb "))
    assert "1,036,580" in row and row.count("1,036,580") == 1 and "present" in row
    count_words("ptb")
    assert data_cli.main(["list", "--no-count"]) == 0  # now cached: both figures, and they agree
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("ptb "))
    assert row.count("1,036,580") == 2 and " = " in row


# --- on a synthetic corpus (no data needed) --------------------------------------------------------

CALLS: list[Path] = []


def counting_words(root: Path) -> dict[str, int]:
    """A counter that records its calls (module level: the cache key names it by its qualified name)."""
    CALLS.append(root)
    return {"a.txt": len((root / "a.txt").read_text().split())}


def make_corpus(files: dict[str, bytes], sources: dict[str, Source] | None = None, **changes) -> Corpus:
    record = Corpus(
        name="tiny", description="test corpus", files=tuple(files), licence="CC0", origin="here @ 0",
        sources=sources or {file: Source(("https://example.invalid/" + file,)) for file in files},
        manifest_words=3, word_unit="words", word_rule="split a.txt", word_counter=counting_words,
        sha256={file: sha256(data) for file, data in files.items()},
    )
    return dataclasses.replace(record, **changes)


def test_word_counts_are_cached_by_content(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "a.txt").write_text("one two three\n")
    corpus = make_corpus({"a.txt": b"one two three\n"})
    CALLS.clear()
    assert count_words(corpus, root=tmp_path) == 3
    assert count_words(corpus, root=tmp_path) == 3
    assert len(CALLS) == 1  # the second time came from runs/cache/word_counts.json
    assert catalogue.cached_word_count(corpus, root=tmp_path) == 3
    (folder / "a.txt").write_text("one two three four five\n")  # new content, new sha256: counted again
    assert count_words(corpus, root=tmp_path) == 5
    assert len(CALLS) == 2


def test_verify_accepts_a_recompressed_xz_by_its_inner_stream(tmp_path):
    inner = b"a tar, say\n" * 100
    shared_copy = lzma.compress(inner, preset=9 | lzma.PRESET_EXTREME)
    corpus = make_corpus({"t.tar.xz": shared_copy},
                         sources={"t.tar.xz": Source(("https://example.invalid/t",), REPACKED, sha256(inner))})
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "t.tar.xz").write_bytes(lzma.compress(inner, preset=0))  # other xz bytes, same content
    assert sha256((folder / "t.tar.xz").read_bytes()) != corpus.sha256["t.tar.xz"]
    assert verify_corpus(corpus, root=tmp_path) == []

    (folder / "t.tar.xz").write_bytes(lzma.compress(inner + b"x", preset=0))
    [problem] = verify_corpus(corpus, root=tmp_path)
    assert problem.kind == "checksum mismatch" and problem.expected_sha256 == corpus.sha256["t.tar.xz"]
