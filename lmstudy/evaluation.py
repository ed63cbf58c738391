"""The one evaluation protocol every study calls: detokenised WikiText-2, LAMBADA, held-out domains.

Two layers. The low-level one scores a token stream and is what training tasks use for validation
(``lmstudy.lm_batches`` imports it from here, never the other way round):

- ``eval_windows`` / ``lm_loss`` / ``stream_loss``: the stream is cut into non-overlapping windows of
  ``seq_len``; every token after the first is predicted exactly once, with the context of its own
  window only. Perplexity = exp(mean loss in nats per token).

The benchmark layer scores *text*, so that models with different tokenisers compare:

- **Denominators.** A text is scored as its total negative log-likelihood ``nll`` (nats) over all its
  tokens, then ``ppl_token = exp(nll / tokens)``, ``ppl_word = exp(nll / words)`` and
  ``bits_per_byte = nll / (bytes * ln 2)``. ``words`` = whitespace-separated words of the text as
  scored (``len(text.split())``), ``bytes`` = its UTF-8 length. Only ``ppl_token`` depends on the
  tokeniser; the other two are per unit of text. (lm-evaluation-harness counts words and bytes of the
  WikiText page *before* detokenisation, with ``len(re.split(r"\\s+", page))``, so its word
  perplexity and bits per byte are lower than ours for the same model: more, shorter "words" such as
  ``@-@`` and lone punctuation, and more bytes.)
- **Documents.** Every benchmark is a list of documents, each scored on its own: its tokens are
  preceded by one prefix token (the tokeniser's BOS, else its EOS: lm-evaluation-harness's rule; for
  GPT-2 both are ``<|endoftext|>``) so that the document's *first* token is predicted too and every
  token of the text counts exactly once; the prefix itself is never a target, and no window crosses
  a document boundary (no context leaks from one article or review into the next). This is
  lm-evaluation-harness's ``loglikelihood_rolling``. Joining documents with EOS into one stream would
  differ only in that context crossing and in scoring the separators.
- **Windows** (``seq_len`` input tokens at most, ``stride``): a window ending at target ``e`` scores
  only the targets not scored by an earlier window, with the rest of the window as context: HF's
  "perplexity of fixed-length models" recipe with the eos prefix. ``stride == seq_len`` (the
  default) gives non-overlapping windows (each token sees only the tokens of its own window before
  it); a smaller stride gives every token at least ``seq_len - stride`` tokens of context, which
  lowers the perplexity and costs ``seq_len / stride`` times the compute. Windows of all documents
  are batched, right-padded (causal attention: padding after a position cannot change it, so no
  attention mask is needed), longest first.

Benchmarks:

- **WikiText-2 test** (``wikitext2_test_articles``): ``wikitext-2-raw/wiki.test.raw`` (CRLF
  normalised to ``\\n``), cut into its 62 articles with lm-evaluation-harness's heading rule
  (``wikitext_document_level``: a line `` = Title = ``, once ``= =`` runs are folded, starts a page),
  each article's lines newline-terminated as in the file, then detokenised per article with
  ``wikitext_detokenize`` (per article as lm-eval does: its quote and bracket rules pair marks
  across lines of one article). One document per article. Our copy is a Hugging Face re-export
  without the original's blank lines, so an article has one ``\\n`` where the original zip has
  ``\\n \\n`` around headings; the words are the same. ``max_tokens`` scores the first that many
  tokens of the articles in order (the last article cut; its words and bytes are those of the text
  its kept tokens decode to, so denominators stay those of the text scored).
- **LAMBADA** (``lambada_examples``): OpenAI's detokenised test set, ``lambada/lambada_test.jsonl``
  read as is (the ``lambada`` reader folds blank lines inside passages; the published numbers use
  the file's text). The target is the passage's last whitespace-separated word; the context is the
  text before the whitespace character in front of it, and the continuation is that character plus
  the word: ``" word"`` for 5,146 of 5,153 passages, as lm-eval's ``split(" ")``; seven end in
  ``"\\nword"``, where lm-eval's target would also hold the word before the newline. Context and
  continuation are tokenised separately (so the target's tokens do not depend on the context),
  without a prefix token, and the context is truncated on the left so that the input fits
  ``seq_len`` (default: the model's positions). ``accuracy``: greedy decoding would produce the
  whole continuation, i.e. every continuation token is the arg-max given the passage and the
  continuation's earlier tokens (teacher forcing); no stop-word filter. 95% **Wilson score**
  interval for the accuracy (``scipy.stats.binomtest``; Wilson rather than Clopper-Pearson: close to
  nominal coverage and not over-conservative at n of hundreds to thousands). Perplexities of the
  target: per token (``ppl_token``; the studies' ``lambada_ppl``) and per word = per passage
  (``ppl_word``, exp of the mean per-passage NLL: lm-eval's ``lambada_openai`` perplexity, per word
  as GPT-2's published LAMBADA perplexity, 35.13 for GPT-2 small).
- **Held-out domains** (``domain_test_texts``): the test part of our committed split of each domain
  of ``lmstudy.data.splits.DOMAINS`` except ``ptb`` (its text is lower-cased, ``<unk>``-masked and
  tokenised, not raw text), raw document text, first ``max_documents`` documents in reader order.
  Reading a shuffled-split domain streams its corpus until enough test documents have passed: the
  test part is ~0.4% of a big corpus, so 20 documents read a few thousand; all of them (``0``) read
  the whole corpus, minutes for wikipedia, imdb, reddit.

``evaluate_model(model, tokenizer, EvalConfig)`` runs them all into one tidy DataFrame (one row per
benchmark); ``python -m lmstudy eval PATH`` prints it for a local Hugging Face causal LM folder
(``lmstudy/eval_cli.py``). Studies call the pieces: ``score_documents`` / ``TextScore.metrics`` and
``lambada_scores``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import pandas as pd
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

IGNORE = -100  # label of positions that are context only (F.cross_entropy's default ignore_index)
CONFIDENCE = 0.95

# ---------------------------------------------------------------------------------------------------
# Token streams (the training tasks' validation)
# ---------------------------------------------------------------------------------------------------


def check_token_stream(ids: torch.Tensor, name: str, min_length: int) -> None:
    """A clear error unless ``ids`` is a 1-D integer tensor of at least ``min_length`` tokens."""
    if not isinstance(ids, torch.Tensor) or ids.dim() != 1:
        raise ValueError(f"{name} must be a 1-D tensor of token ids, got {getattr(ids, 'shape', type(ids))}")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
    if ids.numel() < min_length:
        raise ValueError(f"{name} has {ids.numel()} tokens, fewer than the {min_length} needed here")


def eval_windows(
    ids: torch.Tensor, seq_len: int, batch_size: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Non-overlapping windows covering ``ids`` (L,): batches of full windows, then the short tail (a stream
    shorter than one window is all tail)."""
    check_token_stream(ids, "ids", 2)
    full = (ids.numel() - 1) // seq_len
    if full:  # unfold needs at least one whole window
        windows = ids[: full * seq_len + 1].unfold(0, seq_len + 1, seq_len)  # (full, T + 1), 1-token overlap
        for start in range(0, full, batch_size):
            chunk = windows[start : start + batch_size]  # (b, T + 1)
            yield chunk[:, :-1], chunk[:, 1:]
    tail = ids[full * seq_len :]  # the last (L - 1) % T targets, with their inputs
    if tail.numel() > 1:
        yield tail[:-1].unsqueeze(0), tail[1:].unsqueeze(0)  # (1, r), (1, r)


def model_logits(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Logits (B, T, V) of ``model(input_ids=x)``: a tensor, or an object with ``.logits`` (HF models)."""
    out = model(input_ids=x)
    return out.logits if hasattr(out, "logits") else out


def lm_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Next-token cross-entropy of ``model(input_ids=x)`` against targets ``y`` (B, T).

    ``y`` is already shifted: we never pass ``labels=`` to HF models, which shift labels themselves.
    """
    logits = model_logits(model, x)  # (B, T, V)
    # float32 for the softmax: under bf16/fp16 autocast the loss would lose precision.
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1).long(), reduction=reduction)


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's (first) parameters."""
    return next(model.parameters()).device


@contextmanager
def evaluating(model: torch.nn.Module):
    """Eval mode (no dropout) and no autograd for the block; the model's training flag is restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def stream_loss(model: torch.nn.Module, ids: torch.Tensor, seq_len: int, batch_size: int) -> float:
    """Mean next-token loss (nats) of ``model`` over the 1-D stream ``ids`` (non-overlapping windows)."""
    device = model_device(model)
    total = torch.zeros((), dtype=torch.float64, device=device)
    count = 0
    with evaluating(model):
        for x, y in eval_windows(ids, seq_len, batch_size):
            total += lm_loss(model, x.to(device), y.to(device), reduction="sum").double()
            count += y.numel()
    return total.item() / count  # one device sync for the whole evaluation


def stream_perplexity(model: torch.nn.Module, ids: torch.Tensor, seq_len: int, batch_size: int) -> float:
    """Perplexity of ``model`` over the 1-D stream ``ids``: exp of :func:`stream_loss`."""
    return math.exp(stream_loss(model, ids, seq_len, batch_size))


# ---------------------------------------------------------------------------------------------------
# Text: the WikiText detokeniser, the benchmark texts
# ---------------------------------------------------------------------------------------------------

# lm-evaluation-harness's ``wikitext_detokenizer`` (lm_eval/tasks/wikitext/preprocess_wikitext.py), itself
# NVIDIA Megatron-LM's (tasks/zeroshot_gpt2/detokenizer.py): the same rules, in the same order. A str is a
# literal replacement, a compiled pattern a regex substitution.
_WIKITEXT_RULES: list[tuple[str | re.Pattern, str]] = [
    # contractions
    ("s '", "s'"),
    # Slashes included, as in the original: this pattern (meant as "' [0-9]") matches almost nothing; kept
    # so that our text is lm-eval's text.
    (re.compile(r"/' [0-9]/"), r"/'[0-9]/"),
    # number separators
    (" @-@ ", "-"),
    (" @,@ ", ","),
    (" @.@ ", "."),
    # punctuation
    (" : ", ": "),
    (" ; ", "; "),
    (" . ", ". "),
    (" ! ", "! "),
    (" ? ", "? "),
    (" , ", ", "),
    # brackets and quotes: drop the spaces just inside a pair
    (re.compile(r"\(\s*([^\)]*?)\s*\)"), r"(\1)"),
    (re.compile(r"\[\s*([^\]]*?)\s*\]"), r"[\1]"),
    (re.compile(r"{\s*([^}]*?)\s*}"), r"{\1}"),
    (re.compile(r"\"\s*([^\"]*?)\s*\""), r'"\1"'),
    (re.compile(r"'\s*([^']*?)\s*'"), r"'\1'"),
    # headings, degrees, line ends, the word "N", possessives
    ("= = = =", "===="),
    ("= = =", "==="),
    ("= =", "=="),
    (" \N{DEGREE SIGN} ", "\N{DEGREE SIGN}"),
    (" \n", "\n"),
    ("\n ", "\n"),
    (" N ", " 1 "),
    (" 's", "'s"),
]


def wikitext_detokenize(text: str) -> str:
    """WikiText's tokenised text back to running text, rule for rule lm-evaluation-harness's
    ``wikitext_detokenizer`` (from Megatron-LM): `` @-@ `` -> ``-``, `` , `` -> ``, ``, ``( x )`` -> ``(x)``,
    ``= = Section = =`` -> ``== Section ==``, and so on (``_WIKITEXT_RULES``)."""
    for rule, replacement in _WIKITEXT_RULES:
        text = rule.sub(replacement, text) if isinstance(rule, re.Pattern) else text.replace(rule, replacement)
    return text


def _is_wikitext_article_heading(line: str) -> bool:
    # lm-eval's wikitext_document_level: fold "= =" runs, then a page starts at "= Title =".
    folded = line.replace("= = =", "===").replace("= =", "==").strip()
    return folded.startswith("= ") and folded.endswith(" =")


def wikitext2_test_articles(detokenize: bool = True) -> list[str]:
    """The 62 WikiText-2 test articles from ``wiki.test.raw``, detokenised (module docstring)."""
    from lmstudy.data.catalogue import corpus_path

    path = corpus_path("wikitext-2-raw") / "wiki.test.raw"
    # Bytes, then an explicit CRLF -> LF: the file has CRLF line ends, the detokeniser's rules expect "\n".
    lines = path.read_bytes().decode("utf-8").replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the file ends with a newline: no empty last line
    articles: list[list[str]] = []
    for line in lines:
        if _is_wikitext_article_heading(line) or not articles:
            articles.append([])
        articles[-1].append(line + "\n")
    texts = ["".join(article) for article in articles if "".join(article).strip()]
    return [wikitext_detokenize(text) for text in texts] if detokenize else texts


def count_words(text: str) -> int:
    """Whitespace-separated words: the per-word perplexity's denominator."""
    return len(text.split())


def count_bytes(text: str) -> int:
    """UTF-8 bytes: the bits-per-byte denominator."""
    return len(text.encode("utf-8"))


def eval_domains() -> list[str]:
    """The held-out domains of the protocol: every split domain except ptb (not raw text)."""
    from lmstudy.data.splits import DOMAINS

    return [domain for domain in DOMAINS if domain != "ptb"]


def domain_test_texts(domain: str, max_documents: int = 20) -> Iterator[str]:
    """Raw text of the first ``max_documents`` (0 = all) test documents of ``domain``'s committed split."""
    from lmstudy.data.parts import split_documents

    if domain == "ptb":
        raise ValueError("ptb is not raw text (lower-cased, <unk>-masked); held-out domains are "
                         + ", ".join(eval_domains()))
    for document in split_documents(domain, "test", limit=max_documents or None):
        yield document.text


# ---------------------------------------------------------------------------------------------------
# Scoring documents: nll, tokens, words, bytes
# ---------------------------------------------------------------------------------------------------


def document_prefix_id(tokenizer) -> int:
    """The token each document is predicted from: BOS, else EOS (lm-evaluation-harness's rule)."""
    for token_id in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return token_id
    raise ValueError("the tokenizer has neither a bos nor an eos token: a document's first token has no context")


@dataclass
class EncodedDocuments:
    """Documents ready to score: each is ``[prefix] + its tokens``; ``words`` and ``bytes`` of the text."""

    sequences: list[list[int]]
    words: int
    bytes: int

    @property
    def tokens(self) -> int:
        return sum(len(sequence) - 1 for sequence in self.sequences)  # the prefix is no target


def encode_documents(tokenizer, texts: Iterable[str], max_tokens: int = 0) -> EncodedDocuments:
    """Tokenise ``texts`` (no special tokens added), each after the prefix token; stop after ``max_tokens``
    tokens (0 = all), cutting the last document: its words and bytes are those of its kept tokens' text."""
    prefix = document_prefix_id(tokenizer)
    sequences, words, n_bytes = [], 0, 0
    budget = max_tokens if max_tokens > 0 else math.inf
    for text in texts:
        # verbose=False: no "longer than the maximum length" warning, windows take care of the length.
        ids = tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
        if len(ids) > budget:
            ids = ids[: int(budget)]
            text = tokenizer.decode(ids, clean_up_tokenization_spaces=False)
        if ids:
            sequences.append([prefix, *ids])
            words += count_words(text)
            n_bytes += count_bytes(text)
        budget -= len(ids)
        if budget <= 0:
            break
    return EncodedDocuments(sequences, words, n_bytes)


@dataclass
class TextScore:
    """Summed negative log-likelihood (nats) of a text and its three denominators."""

    nll: float
    tokens: int
    words: int
    bytes: int
    documents: int

    @property
    def ppl_token(self) -> float:
        return math.exp(self.nll / self.tokens)

    @property
    def ppl_word(self) -> float:
        return math.exp(self.nll / self.words)

    @property
    def bits_per_byte(self) -> float:
        return self.nll / (self.bytes * math.log(2))

    def metrics(self, prefix: str) -> dict[str, float]:
        """The studies' metric keys: ``{prefix}_ppl`` (per token), ``{prefix}_ppl_word``, ``{prefix}_bpb``."""
        return {f"{prefix}_ppl": self.ppl_token, f"{prefix}_ppl_word": self.ppl_word,
                f"{prefix}_bpb": self.bits_per_byte}

    def row(self) -> dict:
        return {"documents": self.documents, "tokens": self.tokens, "words": self.words, "bytes": self.bytes,
                "nll": self.nll, "ppl_token": self.ppl_token, "ppl_word": self.ppl_word,
                "bits_per_byte": self.bits_per_byte}


def sliding_windows(n_targets: int, seq_len: int, stride: int) -> list[tuple[int, int, int]]:
    """Windows ``(begin, end, new)`` over a sequence of ``n_targets + 1`` ids (prefix included): input
    ``ids[begin:end]`` (at most ``seq_len``) predicts ``ids[begin + 1:end + 1]``, of which only the last
    ``new`` are scored; together the windows score every target exactly once."""
    if not 1 <= stride <= seq_len:
        raise ValueError(f"need 1 <= stride <= seq_len, got stride={stride}, seq_len={seq_len} "
                         "(a stride above seq_len would skip tokens)")
    windows, scored = [], 0  # targets 1..scored (indices into ids) are done
    for begin in range(0, n_targets, stride):
        end = min(begin + seq_len, n_targets)
        windows.append((begin, end, end - scored))
        scored = end
        if end == n_targets:
            break
    return windows


def _at_least_float32(logits: torch.Tensor) -> torch.Tensor:
    # bf16/fp16 logits lose precision in the softmax; float32 and float64 are kept as they are.
    return logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits


def score_documents(
    model: torch.nn.Module, documents: EncodedDocuments, seq_len: int, stride: int | None = None,
    batch_size: int = 4, desc: str = "scoring",
) -> TextScore:
    """Total NLL of ``documents`` under ``model`` in windows of ``seq_len`` tokens moved by ``stride``
    (default ``seq_len``: non-overlapping), every token scored exactly once (module docstring)."""
    if documents.tokens == 0:
        raise ValueError("no text to score: every document is empty")
    stride = stride or seq_len
    windows = [(index, *window) for index, sequence in enumerate(documents.sequences)
               for window in sliding_windows(len(sequence) - 1, seq_len, stride)]
    windows.sort(key=lambda window: window[2] - window[1], reverse=True)  # longest first: little padding
    device = model_device(model)
    total = torch.zeros((), dtype=torch.float64, device=device)
    scored = 0
    with evaluating(model):
        for start in tqdm(range(0, len(windows), batch_size), desc=desc, unit="batch"):
            batch = windows[start : start + batch_size]
            width = max(end - begin for _, begin, end, _ in batch)
            pad = documents.sequences[batch[0][0]][0]  # any valid id: padded positions are never targets
            x = torch.full((len(batch), width), pad, dtype=torch.long)  # (B, T), right-padded
            y = torch.full((len(batch), width), IGNORE, dtype=torch.long)  # (B, T), IGNORE = context/padding
            for row, (index, begin, end, new) in enumerate(batch):
                sequence = documents.sequences[index]
                length = end - begin
                x[row, :length] = torch.tensor(sequence[begin:end])
                y[row, length - new : length] = torch.tensor(sequence[end - new + 1 : end + 1])
                scored += new
            x, y = x.to(device), y.to(device)
            logits = model_logits(model, x)  # (B, T, V)
            targets = y != IGNORE  # (B, T)
            # Only the scored positions: (N, V) instead of the whole (B*T, V), which matters for small strides.
            total += F.cross_entropy(_at_least_float32(logits[targets]), y[targets], reduction="sum").double()
    assert scored == documents.tokens, (scored, documents.tokens)  # every token exactly once
    return TextScore(total.item(), documents.tokens, documents.words, documents.bytes, len(documents.sequences))


def score_texts(model: torch.nn.Module, tokenizer, texts: Iterable[str], seq_len: int, stride: int | None = None,
                batch_size: int = 4, max_tokens: int = 0, desc: str = "scoring") -> TextScore:
    """``score_documents`` of ``encode_documents(tokenizer, texts, max_tokens)``."""
    return score_documents(model, encode_documents(tokenizer, texts, max_tokens), seq_len, stride, batch_size, desc)


# ---------------------------------------------------------------------------------------------------
# LAMBADA
# ---------------------------------------------------------------------------------------------------


@dataclass
class LambadaExample:
    """One LAMBADA passage for :func:`score_lambada`: context and target ids, the continuation's text."""

    context: list[int]  # token ids of the passage before the continuation
    target: list[int]  # token ids of the continuation (whitespace + last word)
    continuation: str  # its text: the bytes of the per-byte figure


def split_lambada_passage(passage: str) -> tuple[str, str]:
    """(context, continuation): the continuation is the last whitespace character and the last word."""
    passage = passage.rstrip()
    cut = max(passage.rfind(space) for space in (" ", "\n", "\t"))
    if cut <= 0:
        raise ValueError(f"a LAMBADA passage needs a context before its last word: {passage!r}")
    return passage[:cut], passage[cut:]


def lambada_passages(limit: int = 0) -> list[str]:
    """The first ``limit`` (0 = all 5,153) passages of OpenAI's detokenised LAMBADA test set, as in the file."""
    from lmstudy.data.catalogue import corpus_path

    passages = []
    with (corpus_path("lambada") / "lambada_test.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            passages.append(json.loads(line)["text"])
            if len(passages) == limit:
                break
    return passages


def lambada_examples(tokenizer, limit: int = 0) -> list[LambadaExample]:
    """LAMBADA test passages tokenised for ``score_lambada`` (module docstring)."""
    examples = []
    for passage in lambada_passages(limit):
        context, continuation = split_lambada_passage(passage)
        examples.append(LambadaExample(tokenizer(context, add_special_tokens=False)["input_ids"],
                                       tokenizer(continuation, add_special_tokens=False)["input_ids"], continuation))
    return examples


def wilson_interval(successes: int, trials: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion."""
    from scipy.stats import binomtest

    if trials == 0:
        return 0.0, 1.0
    interval = binomtest(successes, trials).proportion_ci(confidence_level=confidence, method="wilson")
    return float(interval.low), float(interval.high)


@dataclass
class LambadaScore:
    """What :func:`score_lambada` counts: correct greedy last words, passages, target NLL, tokens, bytes."""

    correct: int
    examples: int
    nll: float  # nats, summed over every target token
    tokens: int
    bytes: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.examples

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.correct, self.examples)

    @property
    def ppl_token(self) -> float:
        return math.exp(self.nll / self.tokens)

    @property
    def ppl_word(self) -> float:
        return math.exp(self.nll / self.examples)  # one target word per passage

    def metrics(self) -> dict[str, float]:
        """The studies' keys: ``lambada_ppl`` (per token), ``lambada_ppl_word``, ``lambada_acc`` and its
        Wilson interval ``lambada_acc_low`` / ``lambada_acc_high``."""
        low, high = self.interval
        return {"lambada_ppl": self.ppl_token, "lambada_ppl_word": self.ppl_word, "lambada_acc": self.accuracy,
                "lambada_acc_low": low, "lambada_acc_high": high}

    def row(self) -> dict:
        low, high = self.interval
        return {"documents": self.examples, "tokens": self.tokens, "words": self.examples, "bytes": self.bytes,
                "nll": self.nll, "ppl_token": self.ppl_token, "ppl_word": self.ppl_word,
                "bits_per_byte": self.nll / (self.bytes * math.log(2)),
                "accuracy": self.accuracy, "accuracy_low": low, "accuracy_high": high}


def score_lambada(model: torch.nn.Module, examples: Sequence[LambadaExample], max_positions: int,
                  batch_size: int = 16) -> LambadaScore:
    """Greedy last-word accuracy and the target's NLL; inputs of at most ``max_positions`` tokens."""
    if not examples:
        raise ValueError("no LAMBADA examples to score")
    order = sorted(range(len(examples)), key=lambda i: len(examples[i].context) + len(examples[i].target),
                   reverse=True)  # longest first: little padding
    device = model_device(model)
    correct = torch.zeros((), dtype=torch.long, device=device)
    total = torch.zeros((), dtype=torch.float64, device=device)
    with evaluating(model):
        for start in tqdm(range(0, len(order), batch_size), desc="lambada", unit="batch"):
            batch = [examples[i] for i in order[start : start + batch_size]]
            inputs = []
            for example in batch:
                if len(example.target) > max_positions:
                    raise ValueError(f"a LAMBADA target of {len(example.target)} tokens does not fit "
                                     f"{max_positions} positions")
                ids = (example.context + example.target)[-(max_positions + 1):]  # context cut on the left
                inputs.append(ids[:-1])  # the last target token is predicted, never an input
            width = max(len(ids) for ids in inputs)
            x = torch.full((len(batch), width), batch[0].target[0], dtype=torch.long)  # (B, T), right-padded
            for row, ids in enumerate(inputs):
                x[row, : len(ids)] = torch.tensor(ids)
            logits = model_logits(model, x.to(device))  # (B, T, V)
            for row, (example, ids) in enumerate(zip(batch, inputs)):
                n = len(example.target)
                predicting = _at_least_float32(logits[row, len(ids) - n : len(ids)])  # (n, V): predict the target
                target = torch.tensor(example.target, device=device)  # (n,)
                total += F.cross_entropy(predicting, target, reduction="sum").double()
                correct += (predicting.argmax(-1) == target).all().long()
    return LambadaScore(int(correct.item()), len(examples), total.item(),
                        sum(len(example.target) for example in examples),
                        sum(count_bytes(example.continuation) for example in examples))


def lambada_scores(model: torch.nn.Module, examples: Sequence[LambadaExample], max_positions: int,
                   batch_size: int = 16) -> dict[str, float]:
    """``score_lambada(...).metrics()``: what the studies record."""
    return score_lambada(model, examples, max_positions, batch_size).metrics()


# ---------------------------------------------------------------------------------------------------
# The whole table
# ---------------------------------------------------------------------------------------------------


def context_size(model: torch.nn.Module) -> int:
    """The model's number of positions (``n_positions`` or ``max_position_embeddings`` of its config)."""
    config = getattr(model, "config", None)
    for name in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(config, name, None)
        if value:
            return int(value)
    raise ValueError("cannot tell the model's context size from its config: pass seq_len")


@dataclass
class EvalConfig:
    """What :func:`evaluate_model` scores: window length, stride and batch, benchmark slices, held-out domains."""

    seq_len: int | None = None  # window length; None = the model's context size
    stride: int | None = None  # None = seq_len (non-overlapping windows)
    batch_size: int = 4  # windows (LAMBADA: 4x as many passages) per forward pass
    wikitext_tokens: int = 0  # first tokens of WikiText-2 test scored; 0 = all
    lambada_examples: int = 0  # first passages of LAMBADA; 0 = all 5,153; -1 = skip
    domains: list[str] | None = None  # held-out domains; None = eval_domains(), [] = none
    domain_documents: int = 20  # test documents per domain; 0 = all (minutes per big domain)
    wikitext: bool = True  # False skips WikiText-2


ROW_COLUMNS = ["benchmark", "documents", "tokens", "words", "bytes", "nll", "ppl_token", "ppl_word",
               "bits_per_byte", "accuracy", "accuracy_low", "accuracy_high"]


def evaluate_model(model: torch.nn.Module, tokenizer, config: EvalConfig | None = None) -> pd.DataFrame:
    """The protocol's table, one row per benchmark: ``wikitext2``, ``lambada``, then each domain.

    Columns ``ROW_COLUMNS``; the LAMBADA row's counts and perplexities are those of the target words
    (``words`` = passages), and only it has ``accuracy`` (with its 95% Wilson interval).
    """
    config = config or EvalConfig()
    seq_len = config.seq_len or context_size(model)
    if seq_len > context_size(model):
        raise ValueError(f"seq_len={seq_len} exceeds the model's {context_size(model)} positions")
    score = dict(seq_len=seq_len, stride=config.stride, batch_size=config.batch_size)
    rows = []
    if config.wikitext:
        result = score_texts(model, tokenizer, wikitext2_test_articles(), max_tokens=config.wikitext_tokens,
                             desc="wikitext2", **score)
        rows.append({"benchmark": "wikitext2", **result.row()})
    if config.lambada_examples >= 0:
        result = score_lambada(model, lambada_examples(tokenizer, config.lambada_examples), seq_len,
                               4 * config.batch_size)
        rows.append({"benchmark": "lambada", **result.row()})
    for domain in eval_domains() if config.domains is None else config.domains:
        result = score_texts(model, tokenizer, domain_test_texts(domain, config.domain_documents), desc=domain,
                             **score)
        rows.append({"benchmark": domain, **result.row()})
    return pd.DataFrame(rows).reindex(columns=ROW_COLUMNS)


def format_table(table: pd.DataFrame) -> str:
    """The table as aligned text: counts as integers, perplexities with two decimals, rates with four."""
    formats = {"ppl_token": "{:.2f}", "ppl_word": "{:.2f}", "bits_per_byte": "{:.4f}", "nll": "{:.1f}",
               **{column: "{:.4f}" for column in ("accuracy", "accuracy_low", "accuracy_high")}}
    shown = table.copy()
    for column in shown.columns:
        if column in formats:
            shown[column] = [formats[column].format(v) if pd.notna(v) else "" for v in table[column]]
        elif column != "benchmark":
            shown[column] = [f"{int(v):,}" if pd.notna(v) else "" for v in table[column]]
    return shown.to_string(index=False)


def protocol_markdown(rows: list[dict]) -> str:
    """The protocol's table from its records (a model card's or a JSON file's) as a Markdown code block."""
    if not rows:
        return "(not evaluated)"
    table = pd.DataFrame(rows).reindex(columns=ROW_COLUMNS)  # JSON may have sorted the keys
    return "```\n" + format_table(table) + "\n```"


__all__ = [
    "CONFIDENCE", "EncodedDocuments", "EvalConfig", "LambadaExample", "LambadaScore", "ROW_COLUMNS", "TextScore",
    "check_token_stream", "context_size", "count_bytes", "count_words", "document_prefix_id", "domain_test_texts",
    "encode_documents", "eval_domains", "eval_windows", "evaluate_model", "evaluating", "format_table",
    "lambada_examples", "lambada_passages", "lambada_scores", "lm_loss", "model_device", "model_logits", "protocol_markdown",
    "score_documents", "score_lambada", "score_texts", "sliding_windows", "split_lambada_passage", "stream_loss",
    "stream_perplexity", "wikitext2_test_articles", "wikitext_detokenize", "wilson_interval",
]
