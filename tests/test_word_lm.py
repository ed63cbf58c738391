"""Word-level LM data (lmstudy.word_lm): sentence slicing and the vocabulary rule."""

from __future__ import annotations

from conftest import require_corpus
from lmstudy.text import EOS
from lmstudy.word_lm import first_tokens, load_word_lm

SENTENCES = [["a", "b"], ["c"], ["d", "e", "f"]]


def test_first_tokens_takes_whole_sentences_until_just_past_the_target():
    assert first_tokens(SENTENCES, 0) == SENTENCES  # 0 = everything
    assert first_tokens(SENTENCES, 3) == SENTENCES[:1]  # "a b <eos>" is 3 tokens
    assert first_tokens(SENTENCES, 4) == SENTENCES[:2]
    assert first_tokens(SENTENCES, 100) == SENTENCES


def test_ptb_streams_with_and_without_unk_cutoff():
    require_corpus("ptb")
    full = load_word_lm("ptb", unk_cutoff=0, train_tokens=20_000, eval_tokens=2_000)
    # K = 0: every valid/test word has its own id (no UNK replacement beyond PTB's own <unk>).
    decoded = full.vocab.decode(full.valid.tolist())
    assert [w for w in decoded if w != EOS] == [w for s in full.valid_sentences for w in s]
    cut = load_word_lm("ptb", unk_cutoff=5, train_tokens=20_000, eval_tokens=2_000)
    assert len(cut.vocab) < len(full.vocab)
    assert all(cut.vocab.counts[w] >= 5 for w in cut.vocab.itos[2:])
    assert 20_000 <= full.train.numel() < 20_000 + 100  # stops just past the target, on a sentence end
