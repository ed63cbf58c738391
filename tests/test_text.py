"""PTB-style normalisation, Vocab with the UNK cutoff K, rare-word statistics (lmstudy.text)."""

from __future__ import annotations

from collections import Counter
from difflib import SequenceMatcher

import pytest

from lmstudy.text import UNK, Vocab, count_tokens, normalise_line, normalise_ptb, rare_word_stats
from conftest import require_corpus


# --- normalisation -------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "raw, expected",
    [
        ("Does it work? It doesn't.", "does it work it does n't"),
        ("The company's shares rose 5% to $3.50.", "the company 's shares rose N N to $ N"),
        ("In 1,000 years; 10:30 -- the 1980s' 30-year bonds.", "in N years N the 1980s ' 30-year bonds"),
        ("Mr. Smith of AT&T Inc. met J. Doe in the U.S.", "mr. smith of at&t inc. met j. doe in the u.s."),
        ("It ended. Then it began.", "it ended then it began"),
        ("He said “don’t” (twice) — *really*!", "he said do n't twice really"),
        ("See https://example.com/a?b=c or mail me@example.org", "see <url> or mail <url>"),
        ("'Quoted' words and the '80s", "quoted ' words and the '80s"),
        ("pierre <unk> N years old", "pierre <unk> N years old"),
    ],
)
def test_normalise_line_rules(raw, expected):
    assert normalise_line(raw) == expected.split()


def test_normalise_ptb_one_sentence_per_nonempty_line():
    text = "First line.\n\n  \nSecond, line!\n...\n"
    assert normalise_ptb(text) == [["first", "line"], ["second", "line"]]  # "..." line: nothing left
    assert count_tokens(normalise_ptb(text)) == 6  # 4 words + 2 <eos>
    assert count_tokens(normalise_ptb(text), with_eos=False) == 4


def test_normalisation_is_idempotent():
    text = "The U.S. company's 3.5% rise, said Mr. O'Brien -- at 10:30 -- wasn't \"big\".\nNext: www.x.org!"
    once = normalise_ptb(text)
    assert normalise_ptb("\n".join(" ".join(sentence) for sentence in once)) == once


def test_ptb_is_a_fixed_point():
    """Mikolov's PTB is already normalised: normalising it again keeps (almost) every token."""
    require_corpus("ptb")
    from lmstudy.paths import data_dir

    lines = (data_dir() / "ptb" / "ptb.valid.txt").read_text(encoding="utf-8").splitlines()
    total = unchanged = 0
    for line in lines:
        original, normalised = line.split(), normalise_line(line)
        total += len(original)
        matcher = SequenceMatcher(a=original, b=normalised, autojunk=False)
        unchanged += sum(block.size for block in matcher.get_matching_blocks())
    assert total == 70_390
    assert unchanged / total > 0.999, f"only {unchanged / total:.4%} of PTB valid tokens are unchanged"


# --- Vocab ---------------------------------------------------------------------------------------

TRAIN = "the cat sat on the mat the dog sat".split()  # the:3 sat:2 cat,on,mat,dog:1
VALID = "the cow sat on a mat".split()                # cow, a unseen in training


@pytest.mark.parametrize("min_count, in_vocab", [
    (0, {"the", "sat", "cat", "on", "mat", "dog", "cow", "a"}),
    (1, {"the", "sat", "cat", "on", "mat", "dog"}),
    (2, {"the", "sat"}),
    (5, set()),
])
def test_vocab_unk_cutoff_follows_table_3(min_count, in_vocab):
    vocab = Vocab.build(Counter(TRAIN), min_count=min_count, extra_words=VALID)
    assert set(vocab.itos[2:]) == in_vocab
    assert vocab.itos[:2] == ["<unk>", "<eos>"]
    decoded = vocab.decode(vocab.encode(VALID))
    assert decoded == [word if word in in_vocab else UNK for word in VALID]


def test_vocab_order_and_specials():
    vocab = Vocab.build(Counter(TRAIN + [UNK, UNK]), min_count=1)
    assert vocab.itos[:4] == ["<unk>", "<eos>", "the", "sat"]  # by count, ties alphabetical after
    assert vocab.itos[4:] == sorted(vocab.itos[4:])
    assert vocab.encode([UNK]) == [vocab.unk_id]  # a literal <unk> in the text is the UNK id
    assert len(vocab) == 2 + 6
    assert vocab.encode_sentences([["the", "cat"], ["zebra"]]) == [2, vocab.stoi["cat"], 1, 0, 1]
    with pytest.raises(ValueError, match="min_count"):
        Vocab.build(Counter(TRAIN), min_count=-1)


def test_unk_rate_counts_types_and_tokens():
    vocab = Vocab.build(Counter(TRAIN), min_count=2)  # keeps the, sat
    rate = vocab.unk_rate(VALID + ["<eos>", UNK])    # specials are not counted
    # tokens: the cow sat on a mat -> 4 of 6 replaced; types: cow on a mat -> 4 of 6
    assert rate.tokens == 6 and rate.types == 6
    assert rate.token_pct == pytest.approx(100 * 4 / 6)
    assert rate.type_pct == pytest.approx(100 * 4 / 6)
    train_rate = vocab.unk_rate(TRAIN)  # Table 3's "UNK Train": the words below K in training
    assert train_rate.type_pct == pytest.approx(100 * 4 / 6)
    assert train_rate.token_pct == pytest.approx(100 * 4 / 9)
    assert Vocab.build(Counter(TRAIN), min_count=1).unk_rate(TRAIN).token_pct == 0.0


def test_vocab_save_load_roundtrip(tmp_path):
    vocab = Vocab.build(Counter(TRAIN), min_count=0, extra_words=VALID)
    vocab.save(tmp_path / "vocab.json")
    loaded = Vocab.load(tmp_path / "vocab.json")
    assert loaded == vocab
    assert loaded.encode(VALID) == vocab.encode(VALID)
    assert loaded.counts["the"] == 3 and loaded.min_count == 0
    (tmp_path / "bad.json").write_text('{"itos": ["x"]}')
    with pytest.raises(ValueError, match="not a Vocab file"):
        Vocab.load(tmp_path / "bad.json")


# --- rare-word statistics (Table 4) -------------------------------------------------------------

def test_rare_word_stats_hand_checked():
    train = Counter({"a": 10, "b": 5, "c": 1, "d": 4, UNK: 100})  # UNK is ignored
    pretrain = Counter({"a": 1, "b": 50, "c": 6, "e": 2})           # d absent -> count 0
    stats = rare_word_stats(train, pretrain, threshold=5)
    # train: rare (<= 5) types b, c, d = 3 of 4; tokens 5+1+4 = 10 of 20
    assert stats.train_type_pct == pytest.approx(75.0)
    assert stats.train_token_pct == pytest.approx(50.0)
    # pretrain: rare types a, e = 2 of 4; tokens 1+2 = 3 of 59
    assert stats.pretrain_type_pct == pytest.approx(50.0)
    assert stats.pretrain_token_pct == pytest.approx(100 * 3 / 59)
    # train words rare in pretrain: a (1), d (0) = 2 of 4 types; tokens 10+4 = 14 of 20
    assert stats.train_in_pre_type_pct == pytest.approx(50.0)
    assert stats.train_in_pre_token_pct == pytest.approx(70.0)
    assert rare_word_stats(train, pretrain, threshold=0).train_in_pre_type_pct == pytest.approx(25.0)
