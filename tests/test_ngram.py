"""The n-gram baseline (lmstudy.welch.ngram): our ARPA scorer against a hand-computed value and against
KenLM's own ``query``; lmplz estimation end to end (skipped where KenLM is not installed)."""

from __future__ import annotations

import pytest

from lmstudy.welch.ngram import (
    UNK_WORD,
    ArpaModel,
    kenlm_query_perplexity,
    kenlm_sentences,
    ngram_perplexity,
    score,
    train_arpa,
)
from lmstudy.text import Vocab
from tests.conftest import require_kenlm

# A hand-written bigram model (log10 probabilities, back-off weights).
TINY_ARPA = """\\data\\
ngram 1=4
ngram 2=2

\\1-grams:
-1.0\t<unk>\t0
-99\t<s>\t-0.5
-0.5\ta\t-0.3
-0.4\t</s>\t0

\\2-grams:
-0.2\t<s> a
-0.1\ta </s>

\\end\\
"""
TINY_TEXT = [["a"], ["a", "a"], ["b"]]
# By hand: "a" = p(a|<s>) -0.2 + p(</s>|a) -0.1 = -0.3; "a a" = -0.2 + (bo(a) -0.3 + p(a) -0.5) + -0.1 = -1.1;
# "b" (OOV -> <unk>) = (bo(<s>) -0.5 + p(<unk>) -1.0) + (bo(<unk>) 0 + p(</s>) -0.4) = -1.9.
# Total -3.3 over 7 predicted tokens (4 words + 3 </s>).
TINY_LOG10 = -3.3
TINY_PPL = 10 ** (3.3 / 7)



@pytest.fixture
def needs_kenlm():
    require_kenlm()


@pytest.fixture
def tiny_arpa(tmp_path):
    path = tmp_path / "tiny.arpa"
    path.write_text(TINY_ARPA)
    return path


def test_arpa_scorer_matches_hand_computed_value(tiny_arpa):
    model = ArpaModel.load(tiny_arpa)
    assert model.order == 2
    assert model.sentence_logprobs(["a", "a"]) == pytest.approx([-0.2, -0.8, -0.1])
    result = score(model, TINY_TEXT)
    assert result.tokens == 7 and result.oov_tokens == 1
    assert result.log10_total == pytest.approx(TINY_LOG10)
    assert result.ppl == pytest.approx(TINY_PPL)


def test_unk_word_mapping():
    vocab = Vocab.build({"a": 3, "b": 1}, min_count=2)
    assert list(kenlm_sentences([["a", "b", "<unk>", "c"]], vocab)) == [["a", UNK_WORD, UNK_WORD, UNK_WORD]]
    assert list(kenlm_sentences([["a", "<unk>"]])) == [["a", UNK_WORD]]


@pytest.mark.usefixtures("needs_kenlm")
def test_kenlm_query_agrees_on_hand_written_model(tiny_arpa):
    assert kenlm_query_perplexity(tiny_arpa, TINY_TEXT) == pytest.approx(TINY_PPL, rel=1e-5)


CORPUS = [s.split() for s in (
    "the cat sat on the mat", "the dog sat on the log", "a cat and a dog", "the cat saw the dog",
    "a dog sat on a mat", "the mat was red", "the log was old", "a cat sat", "the dog ran", "a red mat",
) * 3]
EVAL = [s.split() for s in ("the cat sat on the log", "a dog saw the red mat", "the bird sat on the mat")]


@pytest.mark.usefixtures("needs_kenlm")
def test_lmplz_model_scored_like_kenlm_query(tmp_path):
    arpa = train_arpa(CORPUS, tmp_path / "m.arpa")
    model = ArpaModel.load(arpa)
    assert model.order == 5
    ours = score(model, EVAL)
    assert ours.oov_tokens == 1  # "bird"
    assert ours.ppl == pytest.approx(kenlm_query_perplexity(arpa, EVAL), rel=1e-5)


@pytest.mark.usefixtures("needs_kenlm")
def test_ngram_perplexity_with_lstm_vocabulary(tmp_path):
    # K = 0 vocabulary holding an evaluation-only word ("bird"), as load_word_lm builds it.
    counts = {}
    for sentence in CORPUS:
        for word in sentence:
            counts[word] = counts.get(word, 0) + 1
    vocab = Vocab.build(counts, 0, extra_words={"bird", "fish"})
    result = ngram_perplexity(CORPUS, {"valid": EVAL}, vocab, tmp_path / "v.arpa")["valid"]
    model = ArpaModel.load(tmp_path / "v.arpa")
    assert result.oov_tokens == 1 and result.tokens == 21
    assert result.ppl == pytest.approx(kenlm_query_perplexity(tmp_path / "v.arpa", EVAL), rel=1e-5)
    # Padding to the LSTM vocabulary: the uniform share of <unk> is one unseen word's, smaller than
    # without padding; the unigram distribution then sums to 1 over seen words + </s> + 2 unseen words.
    unpadded = ArpaModel.load(train_arpa(CORPUS, tmp_path / "u.arpa"))
    assert model.logprob[("<unk>",)] < unpadded.logprob[("<unk>",)]
    unigrams = sum(10 ** p for (w, *rest), p in model.logprob.items() if not rest and w not in ("<s>", "<unk>"))
    assert unigrams + 2 * 10 ** model.logprob[("<unk>",)] == pytest.approx(1.0, abs=1e-4)
