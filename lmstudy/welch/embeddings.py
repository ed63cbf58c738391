"""In-domain word vectors (Welch et al. 2020): gensim pretraining, GloVe-format I/O, alignment to a
``Vocab``, and coverage.

- Pretraining: word2vec (gensim's default CBOW; ``method="fasttext"`` for fastText) on a domain's
  *pretraining* split, read through ``lmstudy.data.parts.iter_split_sentences(domain, "pretrain")``,
  i.e. exactly the normalisation of the LM data (the same tokens; no UNK replacement, which is the
  paper's "same UNK symbol" concern only when K > 0). Vector size = the LM's embedding size, min count
  5 (the paper's GloVe cutoff), gensim's other defaults (window 5, 5 epochs). The paper used GloVe;
  GloVe's C code is not available here, so we train word2vec and keep GloVe's *file format*.
  gensim is only bit-reproducible with ``workers=1`` (and a fixed PYTHONHASHSEED); the default
  ``workers=1`` chooses reproducibility over speed.
- Files: the GloVe text format, one ``word v1 ... vE`` line per word, no header (``save_glove`` /
  ``load_glove``). Pretrained vectors are cached as runs of the study ``embeddings`` (the run cache:
  config -> folder), file ``vectors.txt``, so every LM run of a domain reuses them.
- Alignment: row i of the aligned matrix is the vector of ``vocab.itos[i]`` when there is one; the
  ``found`` mask says which rows have one. Rows without a vector are left to the model's random init
  (``apply_embedding_config`` copies the found rows only).
- Coverage (the paper's Section 2 numbers): share of the validation word *types* and *tokens* that
  have a pretrained vector, in percent. The specials ``<unk>`` and ``<eos>`` are not word tokens and
  are not counted (as in ``Vocab.unk_rate``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch

from lmstudy.data.splits import FORMAT_VERSION, check_split_format
from lmstudy.runs import cached, get_run
from lmstudy.text import Vocab

METHODS = ("word2vec", "fasttext")
STUDY = "embeddings"
VECTORS_FILE = "vectors.txt"


@dataclass(frozen=True)
class PretrainConfig:
    """What a set of pretrained vectors is trained on and how (the unit of the run cache)."""

    domain: str
    vector_size: int = 400
    method: str = "word2vec"  # "word2vec" | "fasttext"
    min_count: int = 5
    window: int = 5
    epochs: int = 5
    max_sentences: int = 0  # 0: the whole pretraining split; N: its first N sentences (smoke runs)
    seed: int = 0
    splits: int = FORMAT_VERSION  # the pretraining part's split format (as EmbeddingInitConfig.splits)

    def __post_init__(self) -> None:
        check_split_format(self.splits)
        if self.method not in METHODS:
            raise ValueError(f"PretrainConfig.method {self.method!r} is not one of {METHODS}")


class SplitSentences:
    """A re-iterable corpus of a split part's normalised sentences (gensim reads it once per epoch)."""

    def __init__(self, domain: str, part: str = "pretrain", max_sentences: int = 0):
        self.domain, self.part, self.max_sentences = domain, part, max_sentences

    def __iter__(self) -> Iterator[list[str]]:
        from lmstudy.data.parts import iter_split_sentences

        for index, sentence in enumerate(iter_split_sentences(self.domain, self.part)):
            if self.max_sentences and index >= self.max_sentences:
                return
            yield sentence


def train_word_vectors(sentences: Iterable[list[str]], vector_size: int, method: str = "word2vec",
                       min_count: int = 5, window: int = 5, epochs: int = 5, seed: int = 0,
                       workers: int = 1) -> tuple[list[str], np.ndarray]:
    """Train word2vec or fastText on ``sentences`` (a re-iterable of token lists); returns (words, (N, E))."""
    from gensim.models import FastText, Word2Vec

    if method not in METHODS:
        raise ValueError(f"method {method!r} is not one of {METHODS}")
    cls = Word2Vec if method == "word2vec" else FastText
    model = cls(sentences=sentences, vector_size=vector_size, window=window, min_count=min_count,
                epochs=epochs, seed=seed, workers=workers)
    words = list(model.wv.index_to_key)
    return words, np.asarray(model.wv.vectors, dtype=np.float32)


def save_glove(path: str | Path, words: list[str], vectors: np.ndarray) -> None:
    """Write the GloVe text format: ``word v1 ... vE`` per line, no header."""
    if len(words) != len(vectors):
        raise ValueError(f"{len(words)} words but {len(vectors)} vectors")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        for word, vector in zip(words, vectors):
            if not word or any(ch.isspace() for ch in word):
                raise ValueError(f"GloVe format cannot hold the word {word!r} (empty or with whitespace)")
            # repr-like shortest round-trip floats: a load gives back the same float32 values.
            handle.write(word + " " + " ".join(np.format_float_positional(v, unique=True, trim="-")
                                               for v in vector.astype(np.float32)) + "\n")
    tmp.replace(path)


def load_glove(path: str | Path) -> tuple[list[str], np.ndarray]:
    """Read a GloVe text file; returns (words, (N, E) float32). A word2vec-style header line is skipped."""
    words, rows = [], []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            parts = line.rstrip("\n").rstrip(" ").split(" ")
            if number == 0 and len(parts) == 2 and all(p.isdigit() for p in parts):
                continue  # "<count> <dim>" header of the word2vec text format
            if rows and len(parts) - 1 != len(rows[0]):
                raise ValueError(f"{path}:{number + 1}: {len(parts) - 1} values, expected {len(rows[0])}")
            words.append(parts[0])
            rows.append([float(v) for v in parts[1:]])
    return words, np.asarray(rows, dtype=np.float32).reshape(len(words), -1)


def align_to_vocab(vocab: Vocab, words: list[str], vectors: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """(V, E) matrix whose row i is the vector of ``vocab.itos[i]`` (zeros where none) and the (V,) bool
    mask of rows that have one."""
    index = {word: i for i, word in enumerate(words)}
    matrix = torch.zeros(len(vocab), vectors.shape[1])
    found = torch.zeros(len(vocab), dtype=torch.bool)
    for row, word in enumerate(vocab.itos):
        if word in index:
            matrix[row] = torch.from_numpy(vectors[index[word]])
            found[row] = True
    return matrix, found


@dataclass(frozen=True)
class Coverage:
    """Share of word types and tokens of a text that have a pretrained vector, in percent."""

    type_pct: float
    token_pct: float
    types: int
    tokens: int


def coverage(sentences: Iterable[list[str]], words: Iterable[str]) -> Coverage:
    """Coverage of the word tokens of ``sentences`` by the vocabulary ``words`` of pretrained vectors."""
    known = set(words)
    counts = Counter(token for sentence in sentences for token in sentence if token not in Vocab.specials)
    covered = [word for word in counts if word in known]
    tokens = sum(counts.values())
    return Coverage(
        type_pct=100.0 * len(covered) / len(counts) if counts else 0.0,
        token_pct=100.0 * sum(counts[word] for word in covered) / tokens if tokens else 0.0,
        types=len(counts),
        tokens=tokens,
    )


def pretrained_vectors(config: PretrainConfig) -> Path:
    """The GloVe file of ``config``'s vectors, trained on the domain's pretraining split on first use."""

    def pretrain(run) -> dict:
        words, vectors = train_word_vectors(
            SplitSentences(config.domain, "pretrain", config.max_sentences), config.vector_size,
            method=config.method, min_count=config.min_count, window=config.window, epochs=config.epochs,
            seed=config.seed)
        save_glove(run.path / VECTORS_FILE, words, vectors)
        return {"words": len(words), "vector_size": int(vectors.shape[1])}

    cached(STUDY, asdict(config), pretrain)
    return get_run(STUDY, asdict(config)).path / VECTORS_FILE
