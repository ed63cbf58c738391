"""lmstudy.evaluation: the detokeniser, the denominators (a uniform byte model scores exactly 8 bits per
byte), windowing (every token once; strided windows give more context), LAMBADA scoring and its interval,
the benchmark loaders on the real files, and ``python -m lmstudy eval`` on a tiny saved GPT-2."""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from lmstudy.__main__ import main
from lmstudy.evaluation import (
    LambadaExample, encode_documents, eval_windows, lambada_examples, lambada_passages, lambada_scores, lm_loss,
    score_documents, score_lambada, score_texts, sliding_windows, split_lambada_passage, stream_loss,
    wikitext2_test_articles, wikitext_detokenize, wilson_interval,
)
from lmstudy.tokenization import train_bpe
from tests.conftest import require_corpus

# ---------------------------------------------------------------------------------------------------
# The detokeniser: each pair follows from one or more of lm-eval's rules
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tokenised, expected", [
    ("a guest @-@ starring role", "a guest-starring role"),  # number/word separators
    ("1 @,@ 000 people", "1,000 people"),
    ("3 @.@ 5 metres", "3.5 metres"),
    ("film , television and theatre actor . He had", "film, television and theatre actor. He had"),
    ("a : b ; c ! d ? e", "a: b; c! d? e"),
    ("the dog 's bone", "the dog's bone"),
    ("the players ' union", "the players' union"),  # "s '" -> "s'"
    ("born ( 1970 ) in", "born (1970) in"),
    ("see [ 1 ] and { x }", "see [1] and {x}"),
    ('as " Craig " in', 'as "Craig" in'),
    ("30 ° C", "30°C"),
    ("costs N dollars", "costs 1 dollars"),  # WikiText's "N": replaced with 1, as lm-eval does
    (" = = = 2000 – 2005 = = = \n", " === 2000 – 2005 ===\n"),  # headings; " \n" -> "\n"
    (" = = = = Deep = = = = ", " ==== Deep ==== "),
    (" line one \n line two ", " line one\nline two "),  # spaces around line breaks
    # rule order: punctuation first, then quotes; a final " ." not followed by a space stays
    ('He said " hello , world " .', 'He said "hello, world" .'),
    # the original's slash-delimited pattern is kept verbatim, so it matches only this literal text
    ("/' 5/", "/'[0-9]/"),
])
def test_wikitext_detokenize_known_strings(tokenised, expected):
    assert wikitext_detokenize(tokenised) == expected


def test_wikitext_detokenize_a_real_line():
    line = (" Robert Boulter is an English film , television and theatre actor . He had a guest @-@ starring "
            "role on the television series The Bill in 2000 . \n")
    assert wikitext_detokenize(line) == (" Robert Boulter is an English film, television and theatre actor. He had "
                                         "a guest-starring role on the television series The Bill in 2000.\n")


# ---------------------------------------------------------------------------------------------------
# Denominators and windows
# ---------------------------------------------------------------------------------------------------


class UniformOver(torch.nn.Module):
    """Logits 0 on ``ids`` and -inf elsewhere (float64): the uniform distribution over those ids."""

    def __init__(self, vocab: int, ids: list[int]) -> None:
        super().__init__()
        self.vocab, self.ids = vocab, ids
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids):
        logits = torch.full((*input_ids.shape, self.vocab), -math.inf, dtype=torch.float64)
        logits[..., self.ids] = 0.0
        return logits


@pytest.fixture(scope="module")
def byte_tokenizer():
    """A byte-level BPE with no merges: the 256 bytes plus <|endoftext|> (id 0), one token per byte."""
    tokenizer = train_bpe(["no merges fit in 257 ids"], vocab_size=257)
    assert len(tokenizer) == 257 and tokenizer.eos_token_id == 0 and tokenizer.bos_token_id is None
    return tokenizer


@pytest.mark.parametrize("stride", [None, 5, 1])
def test_uniform_model_over_256_bytes_scores_exactly_8_bits_per_byte(byte_tokenizer, stride):
    texts = ["Hello, wörld! Ünïcode → bytes.", "A second document,\nwith two lines."]
    model = UniformOver(257, list(range(1, 257)))  # every byte id; never the eos prefix
    score = score_texts(model, byte_tokenizer, texts, seq_len=8, stride=stride)
    n_bytes = sum(len(text.encode("utf-8")) for text in texts)
    assert score.tokens == score.bytes == n_bytes  # one token per byte, the prefixes not counted
    n_words = sum(len(text.split()) for text in texts)
    assert score.words == n_words == 11 and score.documents == 2
    assert score.bits_per_byte == pytest.approx(8.0, rel=1e-12)
    assert score.ppl_token == pytest.approx(256.0, rel=1e-12)
    assert score.ppl_word == pytest.approx(256.0 ** (n_bytes / n_words), rel=1e-9)


def test_max_tokens_cuts_the_last_document_and_its_denominators(byte_tokenizer):
    encoded = encode_documents(byte_tokenizer, ["abc def", "ghi jkl"], max_tokens=10)
    assert encoded.tokens == 10 and encoded.bytes == 10  # "abc def" + "ghi": bytes of the text scored
    assert encoded.words == 3 and len(encoded.sequences) == 2
    assert encoded.sequences[1][0] == byte_tokenizer.eos_token_id  # every document starts from the prefix


@pytest.mark.parametrize("n_targets, seq_len, stride", [(1, 4, 4), (10, 4, 4), (10, 4, 1), (11, 5, 2), (7, 8, 3)])
def test_sliding_windows_score_every_target_exactly_once(n_targets, seq_len, stride):
    scored = []
    for begin, end, new in sliding_windows(n_targets, seq_len, stride):
        assert 0 < end - begin <= seq_len and 0 < new <= end - begin
        scored.extend(range(end - new + 1, end + 1))  # target indices of the sequence (prefix = 0)
    assert scored == list(range(1, n_targets + 1))
    with pytest.raises(ValueError, match="stride"):
        sliding_windows(10, 4, 5)


class Periodic(torch.nn.Module):
    """Predicts token ``t + 1`` as the token ``period`` places before it, when it is in the window (else
    uniform): more context, lower loss."""

    def __init__(self, vocab: int, period: int) -> None:
        super().__init__()
        self.vocab, self.period = vocab, period
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids):
        B, T = input_ids.shape
        logits = torch.zeros(B, T, self.vocab)
        source = torch.arange(T) - self.period + 1  # position t predicts x[t + 1] = x[t + 1 - period]
        seen = source >= 0
        logits[:, seen] = 10.0 * torch.nn.functional.one_hot(input_ids[:, source[seen]], self.vocab).float()
        return type("Output", (), {"logits": logits})


def test_stride_equal_to_seq_len_is_the_non_overlapping_stream_loss(byte_tokenizer):
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=257, n_positions=16, n_embd=16, n_layer=1, n_head=2,
                                       bos_token_id=0, eos_token_id=0))
    encoded = encode_documents(byte_tokenizer, ["The same text, scored two ways: windows of eight."])
    stream = torch.tensor(encoded.sequences[0])  # [eos] + bytes
    score = score_documents(model, encoded, seq_len=8, stride=8, batch_size=3)
    assert score.nll / score.tokens == pytest.approx(stream_loss(model, stream, seq_len=8, batch_size=2), rel=1e-6)
    # lm_batches re-exports the low-level pieces from here (no import circle)
    from lmstudy import lm_batches

    assert lm_batches.lm_loss is lm_loss and lm_batches.eval_windows is eval_windows


def test_a_small_stride_gives_context_and_a_lower_loss(byte_tokenizer):
    model = Periodic(257, period=5)
    encoded = encode_documents(byte_tokenizer, ["abcde" * 12])
    apart = score_documents(model, encoded, seq_len=8, stride=8)
    sliding = score_documents(model, encoded, seq_len=8, stride=2)
    assert sliding.tokens == apart.tokens == 60
    assert sliding.nll < apart.nll / 3  # the first 4 tokens of every window are guesses without a stride


# ---------------------------------------------------------------------------------------------------
# LAMBADA
# ---------------------------------------------------------------------------------------------------


class NextId(torch.nn.Module):
    """Predicts ``x[t] + 1`` (mod V) with certainty: checks the target alignment."""

    def __init__(self, vocab: int = 50) -> None:
        super().__init__()
        self.vocab = vocab
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids):
        logits = torch.full((*input_ids.shape, self.vocab), -30.0)
        logits.scatter_(-1, ((input_ids + 1) % self.vocab)[..., None], 30.0)
        return type("Output", (), {"logits": logits})


def test_lambada_accuracy_needs_every_target_token_greedy():
    right = LambadaExample([1, 2, 3], [4, 5], " word")  # the model predicts 4 after 3 and 5 after 4
    wrong = LambadaExample([1, 2, 3], [4, 9], " other")
    short = LambadaExample([7], [8], " x")
    scores = lambada_scores(NextId(), [right], max_positions=8)
    assert scores["lambada_acc"] == 1.0 and scores["lambada_ppl"] == pytest.approx(1.0, abs=1e-6)
    # context truncated on the left (3 positions: input [2, 3, 4]), target kept; batched with right padding
    for batch_size in (1, 3):
        score = score_lambada(NextId(), [right, wrong, short], max_positions=3, batch_size=batch_size)
        assert (score.correct, score.examples, score.tokens, score.bytes) == (2, 3, 5, 13)
        assert score.nll == pytest.approx(60.0, abs=1e-3)  # only 9 after 4 is wrong: logit gap 60
    assert score.metrics()["lambada_ppl_word"] == pytest.approx(math.exp(60.0 / 3), rel=1e-4)
    with pytest.raises(ValueError, match="does not fit"):
        score_lambada(NextId(), [right], max_positions=1)


def test_split_lambada_passage_at_the_last_whitespace():
    assert split_lambada_passage("He opened the door. It was Harry") == ("He opened the door. It was", " Harry")
    assert split_lambada_passage("some kind of\n\nPower") == ("some kind of\n", "\nPower")


@pytest.mark.parametrize("k, n, expected", [(5, 10, (0.2366, 0.7634)), (0, 10, (0.0, 0.2775)),
                                            (50, 100, (0.4038, 0.5962))])
def test_wilson_interval_known_values(k, n, expected):
    low, high = wilson_interval(k, n)
    assert (low, high) == pytest.approx(expected, abs=1e-4)
    # the closed form: (p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)
    z, p = 1.959963984540054, k / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert (low, high) == pytest.approx(((centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)))


# ---------------------------------------------------------------------------------------------------
# The benchmark texts (real files)
# ---------------------------------------------------------------------------------------------------


def test_wikitext2_test_articles_are_detokenised_articles():
    require_corpus("wikitext-2-raw")
    raw = wikitext2_test_articles(detokenize=False)
    articles = wikitext2_test_articles()
    assert len(raw) == len(articles) == 62
    assert sum(len(text.split()) for text in raw) == 241_211  # every word of the file (MANIFEST.md)
    assert articles[0].startswith(" = Robert Boulter =\nRobert Boulter is an English film, television")
    assert "\r" not in "".join(articles) and " @-@ " not in "".join(articles)
    assert all(text.endswith("\n") for text in articles)


def test_lambada_passages_split_into_context_and_last_word():
    require_corpus("lambada")
    passages = lambada_passages()
    assert len(passages) == 5153
    pairs = [split_lambada_passage(passage) for passage in passages]
    assert all(context + continuation == passage for (context, continuation), passage in zip(pairs, passages))
    assert all(len(continuation.split()) == 1 for _, continuation in pairs)
    assert sum(continuation.startswith(" ") for _, continuation in pairs) == 5146  # 7 follow a newline
    assert "\n\n" in passages[0]  # the file's text, blank lines kept
    tokenizer = train_bpe(passages[:50], vocab_size=300)
    examples = lambada_examples(tokenizer, limit=3)
    assert len(examples) == 3 and tokenizer.decode(examples[0].target) == pairs[0][1]


# ---------------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------------


def test_eval_command_prints_the_table_of_a_saved_model(tmp_path, capsys):
    for corpus in ("wikitext-2-raw", "lambada", "reuters21578", "bbc_news"):
        require_corpus(corpus)
    tokenizer = train_bpe(wikitext2_test_articles()[:2], vocab_size=300)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=32, n_embd=16, n_layer=1, n_head=2,
                                       bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id))
    folder = tmp_path / "tiny-gpt2"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    out = tmp_path / "eval.json"
    code = main(["eval", str(folder), "--wikitext-tokens", "300", "--lambada", "8", "--domains", "news",
                 "--domain-docs", "2", "--stride", "16", "--device", "cpu", "--json", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "wikitext2" in printed and "lambada" in printed and "news" in printed
    result = json.loads(out.read_text())
    rows = {row["benchmark"]: row for row in result["rows"]}
    assert result["settings"]["seq_len"] == 32 and result["settings"]["stride"] == 16
    assert rows["wikitext2"]["tokens"] == 300 and rows["lambada"]["documents"] == 8
    assert rows["news"]["documents"] == 2
    for row in rows.values():  # an untrained model: close to uniform over its 300 ids
        assert math.log2(300) / 2 < row["bits_per_byte"] * row["bytes"] / row["tokens"] < 2 * math.log2(300)
    assert 0 <= rows["lambada"]["accuracy_low"] <= rows["lambada"]["accuracy"] <= rows["lambada"]["accuracy_high"]


def test_eval_command_on_a_folder_without_a_model_is_one_clear_line(tmp_path, capsys):
    assert main(["eval", str(tmp_path)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "not a Hugging Face model folder" in error


def test_a_stream_shorter_than_one_window_is_scored_whole():
    # A validation stream shorter than seq_len + 1 (a paper-scale context on a short slice) used to fail in unfold.
    stream = torch.arange(10)
    windows = list(eval_windows(stream, seq_len=1024, batch_size=4))
    assert len(windows) == 1
    x, y = windows[0]
    assert x.tolist() == [list(range(9))] and y.tolist() == [list(range(1, 10))]
    model = GPT2LMHeadModel(GPT2Config(vocab_size=16, n_positions=1024, n_embd=8, n_layer=1, n_head=2))
    assert stream_loss(model, stream, seq_len=1024, batch_size=4) == pytest.approx(
        stream_loss(model, stream, seq_len=9, batch_size=4), rel=1e-5)
