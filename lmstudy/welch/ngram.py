"""Modified Kneser-Ney n-gram baseline (Welch et al. 2020, Table 7) with KenLM.

Decision: the model is estimated by the real KenLM ``lmplz`` (interpolated modified Kneser-Ney,
Heafield et al. 2013, the paper's n-gram baseline), built from the PyPI ``kenlm`` source
distribution by ``scripts/install_kenlm.sh`` (it holds the full C++ sources of lmplz, build_binary
and query). ``lmplz`` writes an ARPA file; we score text with our own ARPA reader (``ArpaModel``,
standard back-off semantics), which the tests check against KenLM's own ``query`` binary and against
a hand-computed value on a hand-written ARPA file (so the scorer is tested even where KenLM is not
installed). Reading the ARPA in Python keeps per-token log-probabilities in our hands, which the
OOV rule below needs.

Same data and ``<unk>`` handling as the AWD-LSTM (``lmstudy.word_lm.load_word_lm``):

- The text is first mapped through the LSTM's ``Vocab``: a word the vocabulary maps to ``<unk>``
  (count below the cutoff K, or a literal ``<unk>`` of Mikolov's PTB) becomes our UNK word, and the
  n-gram learns its probability from its training occurrences exactly as the LSTM learns row 0. KenLM
  forbids the literal string ``<unk>`` in its corpus (it is its own OOV symbol), so the UNK word is
  written as ``UNK_WORD`` ("<unk-word>") in the files we give it.
- One sentence per line. The LSTM predicts ``<eos>`` after every sentence; KenLM predicts ``</s>`` at
  every line end: the same tokens are predicted, so both perplexities are over (words + one end of
  sentence per sentence). Difference, by design of an n-gram: its context restarts at ``<s>`` each
  sentence, while the LSTM carries its state across sentences.
- With K = 0 the LSTM vocabulary also holds the valid/test word types never seen in training (they
  get embedding rows), so the LSTM assigns each of them a probability. For the n-gram they are OOV,
  scored as KenLM's ``<unk>``. KenLM interpolates its unigrams with a uniform distribution over
  max(``--vocab_pad``, its vocabulary without ``<s>``) slots, ``<unk>`` being one slot; we pad to the
  seen words + ``</s>`` + the unseen vocabulary words, so p(<unk> | h) is the probability of *one*
  unseen word and the unseen words together get the rest of the uniform mass: the n-gram is then a
  distribution over (about) the same vocabulary as the LSTM. Without padding ``<unk>`` would get
  one share of a uniform over the *seen* words only, too much for each of many unseen words. A token
  in no vocabulary at all cannot occur (the LSTM side maps it to ``<unk>`` first).
- ``--discount_fallback``: small or deduplicated corpora can break the closed-form discount estimate;
  KenLM then uses fixed discounts (0.5, 1, 1.5) for the affected orders. This does not change the
  result where the estimate works.

Perplexity = 10 ** (-(sum of log10 p over predicted tokens) / number of predicted tokens), the
number ``query`` prints as "Perplexity including OOVs".

Where the binaries are looked for (``kenlm_bin``): ``$KENLM_BIN``, ``~/.local/kenlm/bin`` (the
install script's default), the virtual environment's ``bin``, then ``$PATH``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from lmstudy.text import UNK, Vocab

UNK_WORD = "<unk-word>"  # our UNK as an ordinary word (KenLM reserves "<unk>" for its OOV symbol)
KENLM_UNK = "<unk>"
BOS, EOS_TOKEN = "<s>", "</s>"
BINARIES = ("lmplz", "build_binary", "query")
INSTALL_HINT = "install KenLM with scripts/install_kenlm.sh (or set $KENLM_BIN to the folder holding lmplz)"


class KenLMNotFound(FileNotFoundError):
    """A KenLM binary is not installed; the message says how to install it."""

    pass


def kenlm_bin() -> Path | None:
    """The folder holding KenLM's binaries, or None when they are not installed."""
    candidates = [os.environ.get("KENLM_BIN"), Path.home() / ".local" / "kenlm" / "bin", Path(sys.prefix) / "bin"]
    for candidate in candidates:
        if candidate and (Path(candidate) / "lmplz").is_file():
            return Path(candidate)
    found = shutil.which("lmplz")
    return Path(found).parent if found else None


def _binary(name: str) -> Path:
    folder = kenlm_bin()
    if folder is None or not (folder / name).is_file():
        raise KenLMNotFound(f"KenLM's {name} was not found: {INSTALL_HINT}")
    return folder / name


# --- text in KenLM's format -------------------------------------------------------------------

def kenlm_sentences(sentences: Iterable[list[str]], vocab: Vocab | None = None) -> Iterable[list[str]]:
    """Sentences as KenLM sees them: words the ``vocab`` maps to ``<unk>`` (and literal ``<unk>``)
    become ``UNK_WORD``. Without a vocab only the literal ``<unk>`` is renamed."""
    for sentence in sentences:
        yield [UNK_WORD if word == UNK or (vocab is not None and word not in vocab) else word for word in sentence]


def write_text(path: Path, sentences: Iterable[list[str]]) -> int:
    """One sentence per line; returns the number of lines."""
    lines = 0
    with open(path, "w", encoding="utf-8") as handle:
        for sentence in sentences:
            handle.write(" ".join(sentence) + "\n")
            lines += 1
    return lines


# --- estimation -----------------------------------------------------------------------------

@dataclass(frozen=True)
class NGramConfig:
    """How ``lmplz`` estimates the model: order, vocabulary padding, sorting memory, discount fallback."""

    order: int = 5  # KenLM's usual order; the paper used "the default hyperparameters of kenlm"
    vocab_pad: int = 0  # --vocab_pad (0: none); see the module docstring
    memory: str = "1G"  # lmplz -S: sorting memory (small: the machine is shared)
    discount_fallback: bool = True


def train_arpa(sentences: Iterable[list[str]], arpa_path: Path, config: NGramConfig = NGramConfig()) -> Path:
    """Estimate an interpolated modified Kneser-Ney model with ``lmplz``; writes ``arpa_path``."""
    lmplz = _binary("lmplz")
    arpa_path = Path(arpa_path)
    arpa_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "train.txt"
        write_text(text, sentences)
        command = [str(lmplz), "-o", str(config.order), "-S", config.memory, "-T", tmp]
        if config.discount_fallback:
            command.append("--discount_fallback")
        if config.vocab_pad:
            command += ["--vocab_pad", str(config.vocab_pad)]
        partial = arpa_path.with_name(f".{arpa_path.name}.tmp")
        with open(text, "rb") as stdin, open(partial, "wb") as stdout:
            result = subprocess.run(command, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE)
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            raise RuntimeError(f"lmplz failed ({' '.join(command)}):\n{result.stderr.decode(errors='replace')[-2000:]}")
        partial.replace(arpa_path)
    return arpa_path


def kenlm_query_perplexity(arpa_path: Path, sentences: Iterable[list[str]]) -> float:
    """KenLM's own ``query`` result ("Perplexity including OOVs") for ``sentences``: the reference
    our ``ArpaModel`` is tested against."""
    query = _binary("query")
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "eval.txt"
        write_text(text, sentences)
        with open(text, "rb") as stdin:
            result = subprocess.run([str(query), "-v", "summary", str(arpa_path)], stdin=stdin,
                                    capture_output=True, check=True)
    for line in result.stdout.decode().splitlines():
        if line.startswith("Perplexity including OOVs:"):
            return float(line.split(":", 1)[1])
    raise RuntimeError(f"no perplexity in query's output:\n{result.stdout.decode()[-1000:]}")


# --- scoring --------------------------------------------------------------------------------

class ArpaModel:
    """An ARPA back-off model: ``logprob(word, context)`` in log10, standard back-off semantics.

    p(w | h) = p*(h w) if the n-gram ``h w`` is listed, else b(h) * p(w | h minus its oldest word),
    with b(h) = 1 (log 0) for an unlisted context; a word outside the model's vocabulary is ``<unk>``.
    """

    def __init__(self, logprob: dict[tuple[str, ...], float], backoff: dict[tuple[str, ...], float], order: int):
        self.logprob, self.backoff, self.order = logprob, backoff, order
        self.vocab = {ngram[0] for ngram in logprob if len(ngram) == 1}

    @classmethod
    def load(cls, path: str | Path) -> ArpaModel:
        logprob: dict[tuple[str, ...], float] = {}
        backoff: dict[tuple[str, ...], float] = {}
        order, n = 0, 0
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                line = line.strip()
                if not line or line.startswith("\\data\\") or line.startswith("ngram ") or line == "\\end\\":
                    continue
                if line.startswith("\\") and line.endswith("-grams:"):
                    n = int(line[1:].split("-")[0])
                    order = max(order, n)
                    continue
                parts = line.split("\t") if "\t" in line else line.split()
                words = tuple(parts[1].split()) if "\t" in line else tuple(parts[1:1 + n])
                logprob[words] = float(parts[0])
                rest = parts[2:] if "\t" in line else parts[1 + n:]
                if rest:
                    backoff[words] = float(rest[0])
        return cls(logprob, backoff, order)

    def logprob_of(self, word: str, context: tuple[str, ...]) -> float:
        """log10 p(word | context); ``context`` oldest first, already mapped to the model's vocabulary."""
        context = context[-(self.order - 1):] if self.order > 1 else ()
        penalty = 0.0
        while True:
            ngram = context + (word,)
            if ngram in self.logprob:
                return penalty + self.logprob[ngram]
            if not context:
                return penalty + self.logprob[(KENLM_UNK,)]  # only reached for an OOV word
            penalty += self.backoff.get(context, 0.0)
            context = context[1:]

    def sentence_logprobs(self, sentence: list[str]) -> list[float]:
        """log10 p of each word and of the final ``</s>``, context starting at ``<s>``."""
        words = [word if word in self.vocab else KENLM_UNK for word in sentence] + [EOS_TOKEN]
        history: tuple[str, ...] = (BOS,)
        scores = []
        for word in words:
            scores.append(self.logprob_of(word, history))
            history = (history + (word,))[-(self.order - 1):] if self.order > 1 else ()
        return scores


@dataclass(frozen=True)
class NGramScore:
    """Perplexity of a text: ``log10_total`` over ``tokens`` predicted tokens (words + ``</s>``)."""

    ppl: float
    log10_total: float
    tokens: int
    oov_tokens: int  # tokens scored through <unk> (words absent from the n-gram training text)


def score(model: ArpaModel, sentences: Iterable[list[str]]) -> NGramScore:
    """Perplexity of ``sentences`` (already in KenLM's format), OOV tokens scored as ``<unk>``
    (KenLM ``query``'s "including OOVs")."""
    total, tokens, oov = 0.0, 0, 0
    for sentence in sentences:
        for word, logprob in zip(sentence + [EOS_TOKEN], model.sentence_logprobs(sentence)):
            if word not in model.vocab and word != EOS_TOKEN:
                oov += 1
            total += logprob
            tokens += 1
    return NGramScore(ppl=10 ** (-total / tokens), log10_total=total, tokens=tokens, oov_tokens=oov)


def ngram_perplexity(train: list[list[str]], evaluate: dict[str, list[list[str]]], vocab: Vocab | None,
                     arpa_path: Path, config: NGramConfig = NGramConfig()) -> dict[str, NGramScore]:
    """Train on ``train`` with lmplz (unless ``arpa_path`` exists) and score each text of ``evaluate``,
    all mapped through ``vocab`` as the LSTM sees them (see the module docstring)."""
    train_text = list(kenlm_sentences(train, vocab))
    seen = {word for sentence in train_text for word in sentence}
    # Vocabulary words (not the specials) missing from the training text: KenLM's <unk> stands for each.
    words = vocab.itos if vocab is not None else ()
    unseen = [word for word in words if word not in Vocab.specials and word not in seen]
    if not Path(arpa_path).exists():
        # Uniform slots: the seen words, </s>, and one per unseen vocabulary word (<unk> is one of them).
        pad = len(seen) + 1 + len(unseen) if unseen else 0
        train_arpa(train_text, Path(arpa_path), NGramConfig(config.order, pad, config.memory, config.discount_fallback))
    model = ArpaModel.load(arpa_path)
    return {name: score(model, list(kenlm_sentences(text, vocab)))
            for name, text in evaluate.items()}


__all__ = ["ArpaModel", "BINARIES", "KenLMNotFound", "NGramConfig", "NGramScore", "UNK_WORD", "kenlm_bin",
           "kenlm_query_perplexity", "kenlm_sentences", "ngram_perplexity", "score", "train_arpa", "write_text"]
