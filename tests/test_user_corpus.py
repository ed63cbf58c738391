"""Your own corpus: ``python -m lmstudy data add NAME PATH`` (lmstudy.data.add_corpus, lmstudy.data.user_corpus)
and the recommendation that ends notebook 01b (lmstudy.welch.recommendation).

Every corpus here is written by the test itself: 200 documents of random words (about 5,000 tokens),
registered with ``train_tokens=2000`` (valid 159, test 177; minimum 4,336 tokens)."""

from __future__ import annotations

import csv
import json
import random
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from lmstudy.claims import HOLDS, NOT_RUN, ONE_SEED, WITHIN_NOISE
from lmstudy.data import cli as data_cli
from lmstudy.data import iter_documents
from lmstudy.data.add_corpus import CorpusError, add_corpus, minimum_tokens, scaled_targets
from lmstudy.data.parts import split_documents, split_tokens
from lmstudy.data.splits import PARTS, get_domain, load_split
from lmstudy.data.user_corpus import corpus_info, is_registered, registered_corpora
from lmstudy.text import count_tokens, normalise_ptb

TRAIN_TOKENS = 2_000
WORDS = [f"w{i}" for i in range(300)]
NEAR_TWINS = 5  # pairs (document, its copy with one word changed)


@pytest.fixture
def user_data(tmp_path, monkeypatch) -> Path:
    """Registered corpora and the run cache under tmp_path; returns the user-data folder (not created)."""
    monkeypatch.setenv("LMSTUDY_USER_DATA", str(tmp_path / "user_data"))
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))
    return tmp_path / "user_data"


def make_texts(n: int = 200) -> list[str]:
    """``n`` documents of two 12-word lines (deterministic); the last ``2 * NEAR_TWINS`` are near-twin pairs
    and one more is an exact copy of document 0."""
    rng = random.Random(0)
    texts = ["\n".join(" ".join(rng.choices(WORDS, k=12)).capitalize() + "." for _ in range(2))
             for _ in range(n - 2 * NEAR_TWINS - 1)]
    for _ in range(NEAR_TWINS):
        words = rng.choices(WORDS, k=36)
        twin = list(words)
        twin[18] = "changed"  # 11 of 24 shingles shared: above the 20% link rule
        texts += [" ".join(words), " ".join(twin)]
    return texts + [texts[0].upper()]  # the same words in another case: an exact duplicate


def write_corpus(folder: Path, kind: str, texts: list[str]) -> Path:
    """``texts`` in format ``kind`` under ``folder``; returns the path to register."""
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "txt":
        for index, text in enumerate(texts):
            (folder / "docs" / f"{index % 3}").mkdir(parents=True, exist_ok=True)
            (folder / "docs" / f"{index % 3}" / f"doc{index:03d}.txt").write_text(text + "\n", encoding="utf-8")
        (folder / "docs" / "notes.md").write_text("not a document", encoding="utf-8")  # ignored: not .txt
        return folder / "docs"
    if kind == "jsonl":
        path = folder / "corpus.jsonl"
        path.write_text("".join(json.dumps({"text": text, "source": "test"}) + "\n" for text in texts),
                        encoding="utf-8")
        return path
    if kind == "csv":
        path = folder / "corpus.csv"
        with path.open("w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["id", "body"])
            writer.writerows([index, text] for index, text in enumerate(texts))  # newlines inside quoted fields
        return path
    if kind == "hf":
        datasets = pytest.importorskip("datasets")
        path = folder / "hf"
        datasets.Dataset.from_dict({"text": texts, "label": [0] * len(texts)}).save_to_disk(str(path))
        return path
    raise ValueError(kind)


COLUMN = {"txt": None, "jsonl": None, "csv": "body", "hf": "text"}


@pytest.mark.parametrize("kind", ["txt", "jsonl", "csv", "hf"])
def test_every_format_registers_and_splits_like_a_domain(user_data, tmp_path, kind):
    texts = make_texts()
    path = write_corpus(tmp_path / "source", kind, texts)
    registration = add_corpus("mine", path, text_column=COLUMN[kind], train_tokens=TRAIN_TOKENS)
    split, targets = registration.split, scaled_targets(TRAIN_TOKENS)
    assert registration.folder == user_data / "mine" and is_registered("mine") and registered_corpora() == ["mine"]
    assert registration.info.documents_read == len(texts) and corpus_info("mine") == registration.info
    assert split == load_split("mine") and get_domain("mine").sources == (("mine", {}),)
    # Every part is filled to its target and the parts are disjoint.
    assert all(split.tokens[part] >= getattr(targets, part) for part in ("valid", "test", "train"))
    assert split.tokens["pretrain"] >= targets.train
    keys = [key for part in ("train", "valid", "test") for key in split.ids[part]]
    assert len(keys) == len(set(keys))
    # The parts read back through the shared code: documents, then the token cache, counted as the split counts.
    documents = {part: list(split_documents("mine", part)) for part in PARTS}
    ids = [document.doc_id for part in PARTS for document in documents[part]]
    assert len(ids) == len(set(ids)) == len(texts) - 1  # everything but the exact duplicate, each once
    for part in PARTS:
        assert len(documents[part]) == split.documents[part] > 0
        expected = [sentence for document in documents[part] for sentence in normalise_ptb(document.text)]
        assert sorted(split_tokens("mine", part)) == sorted(expected)  # the cache is in split order
        assert count_tokens(expected) == split.tokens[part]
    assert len(list(iter_documents("mine", limit=5))) == 5
    # Near-twins land in one part, whole clusters; the exact duplicate is dropped.
    assert split.dedup["clusters_of_several"] == NEAR_TWINS
    by_text = {document.text: document.doc_id for part in PARTS for document in documents[part]}
    for first, second in zip(texts[-1 - 2 * NEAR_TWINS:-1:2], texts[-2 * NEAR_TWINS:-1:2]):
        assert split.part_of(f"mine:{by_text[first]}") == split.part_of(f"mine:{by_text[second]}")
    assert list(split.dropped.values()) == [f"duplicate of mine:{by_text[texts[0]]}"]


def wrap(line: str) -> str:
    """A line hard-wrapped after its sixth word."""
    words = line.split()
    return " ".join(words[:6]) + "\n" + " ".join(words[6:])


def test_unwrap_joins_hard_wrapped_paragraphs(user_data, tmp_path):
    texts = make_texts()
    wrapped = ["\n\n".join(wrap(line) for line in text.split("\n")) for text in texts]  # blank line between
    add_corpus("wrapped", write_corpus(tmp_path / "a", "jsonl", wrapped), train_tokens=TRAIN_TOKENS, unwrap=True)
    assert [document.text for document in iter_documents("wrapped", limit=3)] == texts[:3]
    add_corpus("kept", write_corpus(tmp_path / "b", "jsonl", wrapped), train_tokens=TRAIN_TOKENS)
    assert next(iter_documents("kept")).text.count("\n") == 2 * texts[0].count("\n") + 1  # lines kept


def test_cli_add_and_list(user_data, tmp_path, capsys):
    path = write_corpus(tmp_path / "source", "jsonl", make_texts())
    assert data_cli.main(["add", "mine", str(path), "--train-tokens", str(TRAIN_TOKENS)]) == 0
    out = capsys.readouterr().out
    assert "registered 'mine' (jsonl, 200 documents" in out and "-p domain mine" in out
    assert data_cli.main(["list", "--no-count"]) == 0
    listing = capsys.readouterr().out
    split = load_split("mine")
    assert re.search(rf"^mine +{sum(split.documents.values()):,} +{split.tokens['train']:,} +{split.tokens['valid']:,}"
                     rf" .* jsonl +{path}$", listing, re.MULTILINE)
    # An error is one line on stderr, exit 1, nothing written.
    assert data_cli.main(["add", "other", str(tmp_path / "nowhere.jsonl")]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "does not exist" in error
    assert registered_corpora() == ["mine"]


# --- errors: one line each, nothing written --------------------------------------------------------

def leftovers(user_data: Path) -> list[str]:
    """What is under the user-data folder (it must not even exist after a failure on a fresh machine)."""
    return sorted(path.name for path in user_data.iterdir()) if user_data.exists() else []


def binary_file(tmp: Path) -> Path:
    folder = tmp / "source"
    folder.mkdir()
    (folder / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    return folder


def latin1_file(tmp: Path) -> Path:
    folder = tmp / "source"
    folder.mkdir()
    (folder / "doc.txt").write_bytes("café crème\n".encode("latin-1"))
    return folder


def empty_texts(tmp: Path) -> Path:
    folder = tmp / "source"
    folder.mkdir()
    for index in range(3):
        (folder / f"{index}.txt").write_text("  \n\n", encoding="utf-8")
    return folder


def punctuation_only(tmp: Path) -> Path:
    folder = tmp / "source"
    folder.mkdir()
    (folder / "dashes.txt").write_text("--- *** ...\n", encoding="utf-8")
    return folder


@pytest.mark.parametrize("make_path, options, message", [
    (lambda tmp: tmp / "missing", {}, r"corpus path .*missing does not exist"),
    (lambda tmp: write_corpus(tmp, "jsonl", make_texts()).rename(tmp / "corpus.pdf"), {},
     "unsupported file type '.pdf'"),
    (lambda tmp: (tmp / "folder").mkdir() or tmp / "folder", {}, "holds no .txt files and is not a Hugging Face"),
    (lambda tmp: (tmp / "one.txt").write_text("a b c") and tmp / "one.txt", {}, "is a single .txt file: put the"),
    (binary_file, {}, "is not a text file"),
    (latin1_file, {}, r"is not UTF-8 text \(byte 0xe9"),
    (lambda tmp: (tmp / "bad.jsonl").write_text('{"text": "a"}\n{"text": \n') and tmp / "bad.jsonl", {},
     "line 2 is not JSON"),
    (lambda tmp: write_corpus(tmp, "jsonl", make_texts()), {"text_column": "body"},
     r"has no column 'body' \(columns: text, source\)"),
    (lambda tmp: write_corpus(tmp, "csv", make_texts()), {}, r"has no column 'text' \(columns: id, body\)"),
    (lambda tmp: write_corpus(tmp, "txt", make_texts()), {"text_column": "body"}, "--text-column applies to"),
    (lambda tmp: (tmp / "empty.jsonl").write_text("") or tmp / "empty.jsonl", {}, "is empty: 0 documents"),
    (empty_texts, {}, "is empty: 3 documents, none with text"),
    (punctuation_only, {}, "is empty: no words are left after normalisation"),
    (lambda tmp: write_corpus(tmp, "jsonl", make_texts(30)), {},
     r"too small: \d{3} tokens .* the minimum is 4,336 \(valid 159 \+ test 177 \+ train 2,000"),
    (lambda tmp: write_corpus(tmp, "jsonl", make_texts()), {"train_tokens": 10},
     "--train-tokens 10 is too small"),
])
def test_errors_write_nothing(user_data, tmp_path, make_path, options, message):
    path = make_path(tmp_path)
    with pytest.raises(CorpusError, match=message) as error:
        add_corpus("mine", path, **{"train_tokens": TRAIN_TOKENS, **options})
    assert "\n" not in str(error.value)
    assert leftovers(user_data) == [] and not is_registered("mine")


def test_the_default_minimum_is_stated_and_checked(user_data, tmp_path):
    assert minimum_tokens() == 70_390 + 78_669 + 2 * 887_521 == 1_924_101
    path = write_corpus(tmp_path, "jsonl", make_texts())
    with pytest.raises(CorpusError, match="the minimum is 1,924,101"):
        add_corpus("mine", path)  # PTB's targets: 5,000 tokens are far too few


def test_near_duplicates_too_large_for_the_parts(user_data, tmp_path):
    # Every document shares the same 40-word paragraph: one cluster, too large for any part (goes to pretrain).
    rng = random.Random(1)
    shared = " ".join(rng.choices(WORDS, k=40))
    texts = [f"{shared}\n" + " ".join(rng.choices(WORDS, k=8)) for _ in range(200)]
    with pytest.raises(CorpusError, match="cannot be split: .*parts short: valid, test, train.*near-copies"):
        add_corpus("mine", write_corpus(tmp_path, "jsonl", texts), train_tokens=TRAIN_TOKENS)
    assert leftovers(user_data) == []


@pytest.mark.parametrize("name, message", [
    ("My Corpus", "not a safe identifier"), ("a.b", "not a safe identifier"), ("../up", "not a safe identifier"),
    ("", "not a safe identifier"), ("news", "bundled domain or corpus"), ("wikipedia", "bundled domain or corpus"),
    ("gum", "bundled domain or corpus"), ("wikitext-2", "bundled domain or corpus"),
])
def test_bad_names(user_data, tmp_path, name, message):
    path = write_corpus(tmp_path, "jsonl", make_texts())
    with pytest.raises(CorpusError, match=message):
        add_corpus(name, path, train_tokens=TRAIN_TOKENS)
    assert leftovers(user_data) == []


def test_registered_name_needs_force_and_force_replaces(user_data, tmp_path):
    path = write_corpus(tmp_path / "a", "jsonl", make_texts())
    first = add_corpus("mine", path, train_tokens=TRAIN_TOKENS)
    with pytest.raises(CorpusError, match="'mine' is already registered .*--force"):
        add_corpus("mine", path, train_tokens=TRAIN_TOKENS)
    # A failed replacement keeps the registered corpus as it was, and leaves no temporary folder.
    with pytest.raises(CorpusError, match="too small"):
        add_corpus("mine", write_corpus(tmp_path / "b", "jsonl", make_texts(30)), force=True,
                   train_tokens=TRAIN_TOKENS)
    assert leftovers(user_data) == ["mine"] and load_split("mine") == first.split
    # A run cached on the old text is reported as stale when the corpus is replaced.
    run = Path(tmp_path / "runs" / "01b_embedding_init_extended" / "abc123")
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"domain": "mine", "seed": 0}))
    texts = make_texts()
    texts[5] = "a different document altogether, with its own words in it for once."
    second = add_corpus("mine", write_corpus(tmp_path / "c", "jsonl", texts), force=True, train_tokens=TRAIN_TOKENS)
    assert second.stale_runs == (run,) and leftovers(user_data) == ["mine"]
    assert second.info.documents_sha256 != first.info.documents_sha256
    assert load_split("mine").sources == [["mine", {"documents": "documents.jsonl",
                                                    "sha256": second.info.documents_sha256}]]
    # So is one left by a corpus deleted by hand and added again; a run of another name is not.
    other = run.with_name("def456")
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"domain": "mine2", "seed": 0}))
    shutil.rmtree(user_data / "mine")
    assert add_corpus("mine", path, train_tokens=TRAIN_TOKENS).stale_runs == (run,)


def test_unknown_names_list_the_registered_corpora(user_data, tmp_path):
    add_corpus("mine", write_corpus(tmp_path, "jsonl", make_texts()), train_tokens=TRAIN_TOKENS)
    with pytest.raises(KeyError, match="registered user corpora: mine"):
        get_domain("yours")
    with pytest.raises(KeyError, match="registered user corpora: mine"):
        iter_documents("yours")


# --- the Welch code path on a registered corpus -------------------------------------------------------

@pytest.mark.slow
def test_notebook_01b_base_cell_runs_on_a_user_corpus(user_data, tmp_path):
    """The smoke preset's base cell (two configurations, 8 steps) with ``domain`` = a registered corpus."""
    from lmstudy.scales import preset
    from lmstudy.welch import extended as ex
    from lmstudy.welch.recommendation import recommend

    add_corpus("mine", write_corpus(tmp_path, "jsonl", make_texts()), train_tokens=TRAIN_TOKENS)
    params = {**preset(ex.STUDY, "smoke"), "domain": "mine"}
    table = ex.run_cells(params, [{"unk_cutoff": 0}])
    assert set(table["config"]) == set(ex.CONFIG_SETS["pair"]) and set(table["domain"]) == {"mine"}
    assert table["valid_ppl"].notna().all()
    advice = recommend(table, "mine")
    assert advice.best in {"standard", "ours"} and "one seed per configuration" in str(advice)


# --- the recommendation -----------------------------------------------------------------------------

CONFIGS = {"standard": "tied/random,trainable",
           "standard + pretraining": "tied/pretrained,trainable",
           "ours": "untied/in=pretrained,frozen/out=pretrained,trainable",
           "ours, not frozen": "untied/in=pretrained,trainable/out=pretrained,trainable"}


def results(valid: dict[str, list[float]], domain: str = "mine", **cell) -> pd.DataFrame:
    """A hand-made table in notebook 01b's tidy format: one row per configuration and seed."""
    cell = {"unk_cutoff": 0, "vectors_from": domain, "train_multiple": 1, **cell}
    return pd.DataFrame([dict(config=CONFIGS[label], label=label, domain=domain, seed=seed, valid_ppl=value,
                              test_ppl=value + 2, **cell)
                         for label, values in valid.items() for seed, value in enumerate(values)])


def test_recommendation_clear_winner():
    from lmstudy.welch.recommendation import recommend

    base = results({"standard": [110, 112, 111], "ours": [95, 96, 94], "ours, not frozen": [99, 101, 98]})
    other_cells = [results({"standard": [80, 81, 82], "ours": [70, 71, 72]}, unk_cutoff=5),
                   results({"ours": [1, 1, 1]}, vectors_from="wikipedia"),
                   results({"ours": [1, 1, 1]}, domain="news")]
    advice = recommend([base, *other_cells, base], "mine")  # t3 and t6 both hold the base cell: counted once
    assert (advice.best, advice.config, advice.runner_up) == ("ours", CONFIGS["ours"], "ours, not frozen")
    assert advice.best_valid.mean == 95 and advice.best_valid.n == 3 and advice.best_test.mean == 97
    # Runner-up minus best per seed: 4, 5, 4 -> mean 4.33, paired t interval 4.33 +- 4.303 * 0.577 / sqrt(3).
    assert advice.margin.mean == pytest.approx(13 / 3) and advice.margin.n == 3 and advice.margin.method == "paired t"
    assert advice.margin.low == pytest.approx(13 / 3 - 4.3027 * (1 / 3) ** 0.5 / 3 ** 0.5, abs=1e-3)
    assert advice.verdict == HOLDS and advice.seeds == 3 and advice.ties == ()  # the interval is clear of zero
    assert list(advice.ranking["label"]) == ["ours", "ours, not frozen", "standard"]
    assert advice.ranking["behind_best_pct"].iloc[-1] == pytest.approx(100 * 16 / 95)
    text = str(advice)
    assert "use 'ours' (untied/in=pretrained,frozen/out=pretrained,trainable): 95.0 ± 1.0 (test 97.0 ± 1.0)" in text
    assert ("4.3 perplexity points (4.6% of the best), 95% interval [+2.9, +5.8] (paired t, 3 seeds), clear of "
            "zero: a clear choice") in text
    assert "standard approach (tied, random init) reaches 111.0 ± 1.0: 16.8% behind" in text


def test_recommendation_within_noise_and_single_seed():
    from lmstudy.welch.recommendation import recommend

    close = recommend(results({"standard": [100, 104, 102], "ours": [101, 99, 103],
                               "ours, not frozen": [90, 150, 120], "standard + pretraining": [130, 131, 132]}), "mine")
    assert close.best == "ours" and close.runner_up == "standard" and close.verdict == WITHIN_NOISE
    # Behind the best per seed: standard -1, 5, -1 and ours, not frozen -11, 51, 17 cover zero; standard +
    # pretraining 29, 32, 29 does not.
    assert close.ties == ("standard", "ours, not frozen")
    assert ("1.0 perplexity points (1.0% of the best), 95% interval [-7.6, +9.6] (paired t, 3 seeds), which covers "
            "zero: at these seeds 'ours' cannot be told apart from 'standard', 'ours, not frozen'; any of them will "
            "do") in str(close)
    # The same means with the seed noise cancelling in the pairs: a clear choice, though the spreads overlap.
    paired_close = recommend(results({"standard": [102, 106, 98], "ours": [101, 105, 97]}), "mine")
    assert paired_close.verdict == HOLDS and paired_close.ties == ()
    single = recommend(results({"standard": [100], "ours": [90]}), "mine")
    assert single.margin.mean == 10 and single.verdict == ONE_SEED  # no interval with one seed: no verdict
    assert "one seed per configuration" in str(single) and "single runs" in str(single)
    alone = recommend(results({"ours": [90, 91]}), "mine")
    assert alone.runner_up is None and alone.verdict == NOT_RUN and "nothing to compare" in str(alone)
    with pytest.raises(ValueError, match="no run of domain 'yours'"):
        recommend(results({"ours": [90]}), "yours")
    with pytest.raises(ValueError, match="no table with the columns"):
        recommend([pd.DataFrame({"x": [1]})], "mine")
