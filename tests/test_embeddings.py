"""In-domain embeddings (gensim, GloVe I/O, alignment, coverage) and the embedding_init study's smoke run."""

from __future__ import annotations

import shutil
from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import require_corpus
from lmstudy.welch.embeddings import (Coverage, align_to_vocab, coverage, load_glove, save_glove,
                                train_word_vectors)
from lmstudy.runs import get_run
from lmstudy.scales import preset
from lmstudy.text import Vocab

CORPUS = [["the", "cat", "sat", "on", "the", "mat"], ["the", "dog", "sat", "on", "a", "log"]] * 10 + [["rare", "once"]]


def test_glove_round_trip_is_exact(tmp_path):
    words = ["the", "cat", "N", "<unk>", "don't"]
    vectors = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    vectors[0, 0] = 1e-8  # tiny and large values survive the text format
    vectors[1, 1] = -12345.678
    save_glove(tmp_path / "v.txt", words, vectors)
    first = (tmp_path / "v.txt").read_text().splitlines()[0].split(" ")
    assert first[0] == "the" and len(first) == 8  # GloVe: word then values, no header
    loaded_words, loaded = load_glove(tmp_path / "v.txt")
    assert loaded_words == words
    assert loaded.dtype == np.float32 and np.array_equal(loaded, vectors)
    with pytest.raises(ValueError, match="whitespace"):
        save_glove(tmp_path / "bad.txt", ["a b"], vectors[:1])


def test_load_glove_skips_a_word2vec_header_and_rejects_ragged_rows(tmp_path):
    (tmp_path / "w2v.txt").write_text("2 3\nx 1 2 3\ny 4 5 6\n")
    words, vectors = load_glove(tmp_path / "w2v.txt")
    assert words == ["x", "y"] and vectors.tolist() == [[1, 2, 3], [4, 5, 6]]
    (tmp_path / "ragged.txt").write_text("x 1 2 3\ny 4 5\n")
    with pytest.raises(ValueError, match="expected 3"):
        load_glove(tmp_path / "ragged.txt")


def test_train_word_vectors_respects_size_and_min_count():
    words, vectors = train_word_vectors(CORPUS, vector_size=12, min_count=5, epochs=2)
    assert vectors.shape == (len(words), 12)
    assert {"the", "sat", "on"} <= set(words)
    assert "rare" not in words and "once" not in words  # seen once < min count 5
    again_words, again = train_word_vectors(CORPUS, vector_size=12, min_count=5, epochs=2)
    assert again_words == words and np.array_equal(again, vectors)  # workers=1: reproducible
    ft_words, ft_vectors = train_word_vectors(CORPUS, vector_size=8, method="fasttext", min_count=5, epochs=1)
    assert ft_vectors.shape == (len(ft_words), 8)
    with pytest.raises(ValueError):
        train_word_vectors(CORPUS, vector_size=8, method="glove")


def test_align_to_vocab_marks_found_rows():
    vocab = Vocab.build({"the": 3, "cat": 2, "zebra": 1})
    words, vectors = ["cat", "the", "dog"], np.arange(6, dtype=np.float32).reshape(3, 2)
    matrix, found = align_to_vocab(vocab, words, vectors)
    assert matrix.shape == (len(vocab), 2) and found.dtype == torch.bool
    assert found.tolist() == [False, False, True, True, False]  # <unk>, <eos>, the, cat, zebra
    assert matrix[vocab.stoi["the"]].tolist() == [2.0, 3.0]
    assert matrix[vocab.stoi["cat"]].tolist() == [0.0, 1.0]
    assert matrix[~found].abs().sum() == 0


def test_coverage_of_types_and_tokens_on_a_fixture():
    valid = [["the", "cat", "sat", "<unk>"], ["the", "zebra", "sat"], ["the"]]
    result = coverage(valid, ["the", "sat", "dog"])
    # Word tokens (specials excluded): the x3, cat, sat x2, zebra = 7; covered: the x3 + sat x2 = 5.
    assert result == Coverage(type_pct=50.0, token_pct=pytest.approx(500 / 7), types=4, tokens=7)
    assert coverage([], ["the"]).token_pct == 0.0


def test_smoke_study_runs_on_a_slice_of_ptb(tmp_path, monkeypatch):
    require_corpus("ptb")
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path / "runs"))
    torch.set_num_threads(1)
    from lmstudy.welch import study

    # Fixture vectors instead of word2vec on the news pretraining split (that needs its token cache).
    glove = tmp_path / "vectors.txt"
    rng = np.random.default_rng(0)
    fixture_words = ["the", "of", "N", "a", "in", "to", "stock"]
    save_glove(glove, fixture_words, rng.standard_normal((7, 16)).astype(np.float32))
    monkeypatch.setattr(study, "pretrained_vectors", lambda config: glove)

    config = study.make_config("untied/in=pretrained,frozen/out=random,trainable", "smoke")
    assert (config.emb_size, config.domain) == (16, "ptb")
    metrics = study.run(config)
    assert metrics["steps"] == preset(study.STUDY, "smoke")["max_steps"]
    assert 1 < metrics["val_ppl"] < 2 * metrics["vocab_size"] and 1 < metrics["test_ppl"] < 2 * metrics["vocab_size"]
    assert metrics["vocab_rows_pretrained"] == 7 and 0 < metrics["valid_token_coverage_pct"] < 100
    # Frozen input embedding: trainable = all - encoder.
    assert metrics["parameters"] - metrics["trainable_parameters"] == metrics["vocab_size"] * 16
    assert study.run(config) == metrics  # the run cache answers the second call

    # The rare-word buckets are cached too: they are read back once the weights are gone (an archive
    # made with --weights none).
    from lmstudy.welch import tables

    rare = tables.rare_word_table([config])
    assert rare["tokens"].sum() > 0 and set(rare["bucket"]) == {b[2] for b in tables.BUCKETS}
    shutil.rmtree(get_run(study.STUDY, asdict(config)).best_dir)
    pd.testing.assert_frame_equal(tables.rare_word_table([config]), rare)
