"""The control-coded training mixture: documents per code, a BPE with the codes as special tokens,
code-prefixed training sequences with balanced sampling, held-out sets per code.

Our reading of CTRL (Keskar et al. 2019, section 3): every training sequence starts with its
domain's control code and continues with text of that domain; the model learns p(x | c) as an
ordinary LM with the code as the first token. Decisions:

- **Streams.** Per code, the formatted documents (``codes.format_text``: secondary codes included)
  are encoded and concatenated, each followed by ``<|endoftext|>``: one token stream per code.
- **Sequences.** A training sequence of length ``T`` is ``[code] + w[:T-1]`` predicting ``w``,
  where ``w`` is a random window of ``T`` tokens of the code's stream, so the code token is
  always position 0 (as in the paper) and the first text token is predicted from the code alone.
  A window may start inside a document (the paper also cut its data into fixed-length chunks).
- **Balanced mixture.** Each sequence's code is drawn from ``mixture_weights``: ``"uniform"``
  (the default: every code gets the same share of training sequences, however small its corpus:
  the 13 subreddits and Questions would otherwise vanish beside Wikipedia and Books) or
  ``"proportional"`` (to the training tokens of each code). The weights are saved with the model:
  they are the "empirical" prior of source attribution.
- **Held-out evaluation.** Per code, the valid stream is cut into non-overlapping chunks of ``T``
  tokens; each chunk ``c`` is scored as ``[code] + c[:-1]`` -> ``c``, so every held-out token is
  predicted exactly once with its code and its own chunk as context (the shared
  ``lmstudy.evaluation`` protocol, with the code prefixed). ``val_loss`` is the mean of the
  per-code losses (every code counts the same, like the training mixture); ``val_loss_<code>``
  are reported too.
- **Tokeniser.** ``lmstudy.tokenization.train_bpe`` on the training texts of every code, with
  ``<|endoftext|>`` and then the code tokens as special tokens (one id each, never split).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedTokenizerFast

from lmstudy.ctrl.codes import CODES, code_texts, code_token, get_code
from lmstudy.lm_batches import epoch_generator, lm_loss
from lmstudy.tokenization import END_OF_TEXT, train_bpe
from lmstudy.training import TrainTask

MIXTURES = ("uniform", "proportional")


@dataclass(frozen=True)
class MixtureConfig:
    """Which codes, how many documents of each, and how they are mixed."""

    codes: tuple[str, ...] = ()  # code names; () = every code of codes.CODES
    train_docs: int = 0  # per code: the first N documents of its train part; 0 = all
    eval_docs: int = 0  # per code: the first N documents of its valid part; 0 = all
    max_doc_chars: int = 0  # cut longer documents (books chunks, IRC windows); 0 = keep whole
    mixture: str = "uniform"  # "uniform" | "proportional"

    def code_names(self) -> list[str]:
        return [get_code(name) for name in self.codes] if self.codes else list(CODES)


@dataclass
class CodedTexts:
    """Formatted texts per code (without the code token) for training and held-out evaluation."""

    train: dict[str, list[str]]
    valid: dict[str, list[str]] = field(default_factory=dict)

    @property
    def codes(self) -> list[str]:
        return list(self.train)


def load_coded_texts(config: MixtureConfig) -> CodedTexts:
    """Read every code's train and valid documents from the corpora (see ``codes.py``)."""

    def texts(name: str, part: str, limit: int) -> list[str]:
        found = code_texts(name, part, limit or None)
        if config.max_doc_chars:
            found = [text[: config.max_doc_chars] for text in found]
        if not found:
            raise ValueError(f"control code {name!r} has no {part} documents")
        return found

    names = config.code_names()
    return CodedTexts(
        train={name: texts(name, "train", config.train_docs) for name in names},
        valid={name: texts(name, "valid", config.eval_docs) for name in names},
    )


def build_tokenizer(texts: CodedTexts, vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on the training texts, with every code as one special token."""
    special = [END_OF_TEXT] + [code_token(name) for name in texts.codes]
    corpus = [text for name in texts.codes for text in texts.train[name]]
    return train_bpe(corpus, vocab_size, special_tokens=special)


def code_id(tokenizer, name: str) -> int:
    """The id of code ``name``'s special token; a clear error when the tokenizer lacks it."""
    token = code_token(name)
    token_id = tokenizer.convert_tokens_to_ids(token)
    if token_id is None or token_id == tokenizer.unk_token_id or tokenizer.convert_ids_to_tokens(token_id) != token:
        raise ValueError(f"the tokenizer has no control code {name!r} (special token {token})")
    return int(token_id)


def encode_stream(tokenizer, texts: Sequence[str]) -> torch.Tensor:
    """The texts encoded and concatenated, each followed by eos: (L,) int64."""
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    for text in texts:
        ids.extend(tokenizer(text, add_special_tokens=False)["input_ids"])
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


def mixture_weights(streams: Mapping[str, torch.Tensor], mixture: str = "uniform") -> dict[str, float]:
    """The probability of each code in the training mixture."""
    if mixture not in MIXTURES:
        raise ValueError(f"mixture {mixture!r} is not one of {MIXTURES}")
    sizes = {name: (1.0 if mixture == "uniform" else float(ids.numel())) for name, ids in streams.items()}
    total = sum(sizes.values())
    return {name: size / total for name, size in sizes.items()}


def code_chunks(code: int, ids: torch.Tensor, seq_len: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Non-overlapping chunks ``c`` of ``ids`` as (``[code] + c[:-1]``, ``c``) pairs, each (1, <=T)."""
    for start in range(0, ids.numel(), seq_len):
        chunk = ids[start : start + seq_len]
        x = torch.cat([chunk.new_tensor([code]), chunk[:-1]])
        yield x.unsqueeze(0), chunk.unsqueeze(0)  # (1, t), (1, t)


@torch.no_grad()
def code_stream_loss(model, code: int, ids: torch.Tensor, seq_len: int, batch_size: int = 16) -> float:
    """Mean loss (nats/token) of the held-out stream ``ids`` given its control code (module docstring)."""
    device = next(model.parameters()).device
    total, count = 0.0, 0
    full = ids.numel() // seq_len
    if full:  # the full chunks in batches
        chunks = ids[: full * seq_len].view(full, seq_len)  # (N, T)
        inputs = torch.cat([chunks.new_full((full, 1), code), chunks[:, :-1]], dim=1)  # (N, T)
        for start in range(0, full, batch_size):
            x, y = inputs[start : start + batch_size].to(device), chunks[start : start + batch_size].to(device)
            total += lm_loss(model, x, y, reduction="sum").item()
            count += y.numel()
    tail = ids[full * seq_len :]
    if tail.numel():
        x, y = next(code_chunks(code, tail, seq_len))
        total += lm_loss(model, x.to(device), y.to(device), reduction="sum").item()
        count += y.numel()
    return total / count


@dataclass
class MixtureTask(TrainTask):
    """Code-prefixed LM training over several per-code token streams (see the module docstring)."""

    code_ids: dict[str, int]  # code name -> token id
    train_streams: dict[str, torch.Tensor]  # code name -> (L,) ids
    valid_streams: dict[str, torch.Tensor]
    weights: dict[str, float]  # code name -> probability of drawing the code
    batch_size: int
    seq_len: int  # model context, code token included
    batches_per_epoch: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        self.names = list(self.train_streams)
        if set(self.names) != set(self.code_ids) or set(self.names) != set(self.weights):
            raise ValueError("MixtureTask: code_ids, train_streams and weights must name the same codes")
        for name, ids in self.train_streams.items():
            if ids.numel() < self.seq_len:
                raise ValueError(f"code {name!r} has {ids.numel()} training tokens, fewer than seq_len={self.seq_len}")
        self._probs = torch.tensor([self.weights[name] for name in self.names], dtype=torch.float64)
        if self.batches_per_epoch is None:  # about one pass over all training tokens
            tokens = sum(ids.numel() for ids in self.train_streams.values())
            self.batches_per_epoch = max(1, math.ceil(tokens / (self.batch_size * self.seq_len)))

    def batches(self, epoch: int):
        generator = epoch_generator(self.seed, epoch)
        for _ in range(self.batches_per_epoch):
            which = torch.multinomial(self._probs, self.batch_size, replacement=True, generator=generator)
            xs, ys = [], []
            for index in which.tolist():
                name = self.names[index]
                ids = self.train_streams[name]
                start = int(torch.randint(ids.numel() - self.seq_len + 1, (1,), generator=generator))
                window = ids[start : start + self.seq_len]  # (T,)
                xs.append(torch.cat([window.new_tensor([self.code_ids[name]]), window[:-1]]))
                ys.append(window)
            yield torch.stack(xs), torch.stack(ys)  # (B, T), (B, T)

    def loss(self, model, batch):
        x, y = batch
        return lm_loss(model, x, y)

    def evaluate(self, model) -> dict[str, float]:
        metrics = {
            f"val_loss_{name}": code_stream_loss(model, self.code_ids[name], ids, self.seq_len, self.batch_size)
            for name, ids in self.valid_streams.items()
        }
        mean = sum(metrics.values()) / len(metrics)
        return {"val_loss": mean, "val_ppl": math.exp(mean), **metrics}


def build_task(texts: CodedTexts, tokenizer, batch_size: int, seq_len: int, mixture: str = "uniform",
               batches_per_epoch: int | None = None, seed: int = 0) -> MixtureTask:
    """Encode the texts and make the training task (the weights are the mixture of ``mixture``)."""
    train_streams = {name: encode_stream(tokenizer, texts.train[name]) for name in texts.codes}
    valid_streams = {name: encode_stream(tokenizer, texts.valid[name]) for name in texts.codes}
    return MixtureTask(
        code_ids={name: code_id(tokenizer, name) for name in texts.codes},
        train_streams=train_streams, valid_streams=valid_streams,
        weights=mixture_weights(train_streams, mixture), batch_size=batch_size, seq_len=seq_len,
        batches_per_epoch=batches_per_epoch, seed=seed,
    )


__all__ = ["CodedTexts", "MIXTURES", "MixtureConfig", "MixtureTask", "build_task", "build_tokenizer",
           "code_chunks", "code_id", "code_stream_loss", "encode_stream", "load_coded_texts", "mixture_weights"]
