"""GPT-2's BPE from the data directory; byte-level BPEs trained with `tokenizers` (lmstudy.tokenization)."""

from __future__ import annotations

import pytest

from conftest import require_corpus
from lmstudy.tokenization import END_OF_TEXT, load_tokenizer, train_bpe

CODES = ("<|endoftext|>", "<|wikipedia|>", "<|reviews|>")  # CTRL-style control codes as special tokens
TEXTS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Language models predict the next token; tokenisers decide what a token is.",
    "Wikipedia is a free online encyclopedia, written collaboratively by volunteers.",
    "This movie was wonderful, the acting superb and the story touching!",
    "Numbers like 3.14159 and 2,718 appear too, and so do names: Ada Lovelace, Alan Turing.",
] * 20


@pytest.fixture(scope="module")
def bpe():
    return train_bpe(TEXTS, vocab_size=400, special_tokens=CODES)


def test_gpt2_tokenizer_is_the_real_one():
    require_corpus("gpt2_bpe")
    from lmstudy.tokenization import gpt2_tokenizer

    tokenizer = gpt2_tokenizer()
    assert tokenizer("Hello world")["input_ids"] == [15496, 995]
    assert len(tokenizer) == 50_257
    assert tokenizer.eos_token == END_OF_TEXT and tokenizer.eos_token_id == 50_256


@pytest.mark.parametrize("text", [
    "The quick brown fox.",
    "  leading spaces, tabs\tand\nnewlines  ",
    "unseen words: zyxwvut, naïve café, emoji 😀, 日本語",
    "",
])
def test_round_trip(bpe, text):
    ids = bpe.encode(text)
    assert bpe.decode(ids) == text
    assert all(0 <= index < len(bpe) for index in ids)


def test_special_tokens_are_single_ids(bpe):
    assert [bpe.convert_tokens_to_ids(code) for code in CODES] == [0, 1, 2]
    ids = bpe.encode("<|reviews|> This movie was wonderful<|endoftext|><|wikipedia|> Ada")
    assert ids[0] == 2
    assert ids.count(0) == 1 and ids.count(1) == 1
    assert bpe.eos_token == END_OF_TEXT and bpe.eos_token_id == 0
    assert bpe.decode(ids, skip_special_tokens=True) == " This movie was wonderful Ada"


def test_vocab_size_respected():
    assert len(train_bpe(TEXTS, vocab_size=300, special_tokens=CODES)) == 300
    small = train_bpe(["ab ab ab"], vocab_size=5_000)  # too little text to reach the size
    assert 257 <= len(small) < 5_000
    with pytest.raises(ValueError, match="vocab_size"):
        train_bpe(TEXTS, vocab_size=100)


def test_merges_compress_training_text(bpe):
    text = TEXTS[0]
    assert len(bpe.encode(text)) < len(text.encode("utf-8")) / 2


def test_save_load_gives_identical_ids(bpe, tmp_path):
    bpe.save_pretrained(tmp_path / "bpe")
    loaded = load_tokenizer(tmp_path / "bpe")
    for text in TEXTS[:5] + ["<|wikipedia|> 😀 unseen<|endoftext|>"]:
        assert loaded.encode(text) == bpe.encode(text)
    assert loaded.eos_token_id == bpe.eos_token_id and len(loaded) == len(bpe)
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        load_tokenizer(tmp_path / "missing")
