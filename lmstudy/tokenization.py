"""Sub-word tokenisers: the real GPT-2 BPE (offline), and small byte-level BPEs trained on our corpora.

- :func:`gpt2_tokenizer` loads OpenAI's GPT-2 byte-level BPE (50,257 ids, ``<|endoftext|>`` = 50256)
  from the ``gpt2_bpe`` folder of the data directory, never from the Hugging Face hub, so it works
  offline and in CI (``HF_HUB_OFFLINE=1``).
- :func:`train_bpe` trains a byte-level BPE of any size with the ``tokenizers`` library, the same
  scheme as GPT-2 (bytes mapped to printable characters, GPT-2's pre-tokenisation regex, no unknown
  token: every string can be encoded). Special tokens, e.g. CTRL control codes, are never split:
  each is one id, matched wherever its string occurs in the text (like GPT-2's ``<|endoftext|>``,
  also inside a word), so pick codes that do not occur in running text, e.g. ``<|wikipedia|>``.
  The result is a ``transformers.PreTrainedTokenizerFast``, so HF models and ``save_pretrained`` /
  :func:`load_tokenizer` work with it as with GPT-2's.

Decisions: no prefix space is added (GPT-2 convention: ``"Hello"`` and ``" Hello"`` differ), so
``decode(encode(text)) == text`` for any text; ``clean_up_tokenization_spaces`` is off for the same
reason. The first special token (by default ``<|endoftext|>``) is the end-of-text/eos token.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GPT2TokenizerFast, PreTrainedTokenizerFast

END_OF_TEXT = "<|endoftext|>"


def gpt2_tokenizer() -> GPT2TokenizerFast:
    """The real GPT-2 tokenizer, read from ``data_dir()/"gpt2_bpe"`` (vocab.json + merges.txt)."""
    from lmstudy.data.catalogue import corpus_path  # clear error + fetch command when missing

    return GPT2TokenizerFast.from_pretrained(str(corpus_path("gpt2_bpe")), local_files_only=True)


def train_bpe(
    texts: Iterable[str],
    vocab_size: int,
    special_tokens: Sequence[str] = (END_OF_TEXT,),
    min_frequency: int = 2,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on ``texts`` with at most ``vocab_size`` ids (specials and the 256 byte
    symbols included). Pairs seen fewer than ``min_frequency`` times are not merged, so on little
    text the vocabulary can stay smaller than ``vocab_size``.

    ``special_tokens`` get the first ids, in order, and are always encoded as one id each; the first
    is the eos token.
    """
    special_tokens = list(dict.fromkeys(special_tokens))  # unique, order kept
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + len(special_tokens):
        raise ValueError(
            f"vocab_size={vocab_size} is too small: a byte-level BPE needs {len(alphabet)} byte symbols "
            f"plus {len(special_tokens)} special tokens; use at least {len(alphabet) + len(special_tokens)}"
        )
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=special_tokens,
        initial_alphabet=alphabet,  # all 256 bytes, so no text is ever unencodable
        show_progress=os.environ.get("TQDM_DISABLE", "") not in {"1", "true", "True"},
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=special_tokens[0] if special_tokens else None,
        additional_special_tokens=special_tokens[1:],
        clean_up_tokenization_spaces=False,
    )


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """Load a tokenizer saved with ``save_pretrained`` (e.g. one from :func:`train_bpe`), from disk only."""
    path = Path(path)
    if not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(f"no tokenizer in {path}: expected tokenizer.json written by save_pretrained")
    return PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)


__all__ = ["END_OF_TEXT", "gpt2_tokenizer", "load_tokenizer", "train_bpe"]
