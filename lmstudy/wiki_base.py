"""The small GPT-2 pretrained on our Wikipedia split, and the evaluation slices read with its BPE.

It is stage 1 of the published Krony-PT run on the old base (``lmstudy.krony.published``), and the
Entity-Transformer study (``lmstudy.entity.study``) fine-tunes the same cached run; it lives in the core so
that neither paper imports the other. A byte-level BPE trained on the split's training documents (saved in the run folder,
so every later stage reads the same ids) and a GPT-2 trained from scratch on the same documents
(general English; the split keeps WikiText-2's test articles out), evaluated with the shared protocol
(:mod:`lmstudy.evaluation`).

Its runs stay in the ``03_kronecker`` run-cache folder under the config they were published with
(``{"stage": "base", **WikiBaseConfig.base_config()}``), so archived runs still hit the cache. Its sizes
are the ``wiki_base`` preset (``lmstudy.scales``), which the published Krony-PT preset (``PUBLISHED_CPU``) includes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from lmstudy.data.splits import split_documents
from lmstudy.evaluation import (
    EncodedDocuments, LambadaExample, encode_documents, lambada_examples, lambada_scores, score_documents,
    wikitext2_test_articles,
)
from lmstudy.lm_batches import LMTask
from lmstudy.runs import Run, cached, get_run
from lmstudy.scales import preset
from lmstudy.tokenization import load_tokenizer, train_bpe
from lmstudy.training import TrainConfig, count_parameters, load_weights, train_and_restore

STUDY = "03_kronecker"  # the published runs' folder: moving it would orphan every archived run


@dataclass(frozen=True)
class WikiBaseConfig:
    """The Wikipedia base: BPE and data sizes, the GPT-2's size and pretraining recipe, the evaluation slices."""

    # data and tokenizer
    vocab_size: int
    train_docs: int  # Wikipedia train documents (BPE and training text); 0 = all
    valid_docs: int  # Wikipedia valid documents (early-stopping metric)
    # model and pretraining
    n_layer: int
    n_head: int
    n_embd: int
    seq_len: int
    batch_size: int
    pretrain_steps: int
    lr: float
    eval_every: int = 50
    # evaluation slices (0 = the whole WikiText-2 test set / all 5,153 LAMBADA passages)
    wikitext_tokens: int = 0
    lambada_examples: int = 0
    seed: int = 0

    def base_config(self) -> dict:
        """What identifies the trained base (its run config, less the stage): data, model and pretraining."""
        keys = ("vocab_size", "train_docs", "valid_docs", "n_layer", "n_head", "n_embd", "seq_len", "batch_size",
                "pretrain_steps", "lr", "seed")
        return {key: getattr(self, key) for key in keys}


def wiki_base_config(scale: str) -> WikiBaseConfig:
    """The base of the ``wiki_base`` preset at ``scale``."""
    return WikiBaseConfig(**preset("wiki_base", scale))


def gpt2_config(config: WikiBaseConfig, vocab_size: int, n_inner: int | None = None) -> GPT2Config:
    """The GPT-2 of ``config``'s dims; ``n_inner`` narrows the MLP (Krony's dense same-size baselines)."""
    return GPT2Config(
        vocab_size=vocab_size, n_positions=config.seq_len, n_embd=config.n_embd, n_layer=config.n_layer,
        n_head=config.n_head, n_inner=n_inner, bos_token_id=0, eos_token_id=0,
    )


def encode_texts(tokenizer, texts: list[str]) -> torch.Tensor:
    """``texts`` encoded and joined into one stream, each followed by the eos token (id 0).

    The eos token between documents is GPT-2's convention.
    """
    ids: list[int] = []
    for text in texts:
        ids.extend(tokenizer(text)["input_ids"])
        ids.append(tokenizer.eos_token_id)
    return torch.tensor(ids, dtype=torch.long)


def wiki_texts(part: str, limit: int) -> list[str]:
    """The first ``limit`` (0: all) documents of a part of our Wikipedia split, as text."""
    return [doc.text for doc in split_documents("wikipedia", part, limit=limit or None)]


@dataclass
class WikiData:
    """The base's training and validation streams and the evaluation protocol's texts, encoded with its BPE."""

    tokenizer: object
    train: torch.Tensor
    valid: torch.Tensor
    wikitext: EncodedDocuments  # WikiText-2 test articles, detokenised (lmstudy.evaluation)
    lambada: list[LambadaExample]


def load_data(config: WikiBaseConfig, tokenizer) -> WikiData:
    """``WikiData`` for ``config`` (its document limits and evaluation slices), encoded with ``tokenizer``."""
    return WikiData(
        tokenizer=tokenizer,
        train=encode_texts(tokenizer, wiki_texts("train", config.train_docs)),
        valid=encode_texts(tokenizer, wiki_texts("valid", config.valid_docs)),
        wikitext=encode_documents(tokenizer, wikitext2_test_articles(), max_tokens=config.wikitext_tokens),
        lambada=lambada_examples(tokenizer, config.lambada_examples),
    )


def evaluate(model: GPT2LMHeadModel, data: WikiData, config: WikiBaseConfig) -> dict:
    """The shared protocol (lmstudy.evaluation) on ``config``'s slices: WikiText-2 and LAMBADA metrics."""
    wikitext = score_documents(model, data.wikitext, config.seq_len, batch_size=config.batch_size, desc="wikitext2")
    return {**wikitext.metrics("wikitext"), **lambada_scores(model, data.lambada, config.seq_len, config.batch_size)}


def train_on(model, data: WikiData, config: WikiBaseConfig, run: Run, steps: int, lr: float,
             task: LMTask | None = None) -> dict:
    """Train ``model`` on ``data.train`` (or ``task``) for ``steps`` with a cosine schedule, then load its best
    validation weights; the schedule every stage of the Krony-PT study uses (the base included)."""
    if task is None:
        task = LMTask(data.train, data.valid, batch_size=config.batch_size, seq_len=config.seq_len, seed=config.seed)
    train_config = TrainConfig(
        max_steps=steps, lr=lr, lr_schedule="cosine", warmup_steps=max(1, steps // 20),
        eval_every=min(config.eval_every, steps), checkpoint_every=min(config.eval_every, steps),
        seed=config.seed, log_every=max(1, steps // 10),
    )
    return train_and_restore(model, task, train_config, run)


def _base_run_config(config: WikiBaseConfig) -> dict:
    return {"stage": "base", **config.base_config()}


def base_run(config: WikiBaseConfig) -> Run:
    """The run folder of the base of ``config``."""
    return get_run(STUDY, _base_run_config(config))


def pretrain_base(config: WikiBaseConfig) -> dict:
    """Cached: the BPE (saved in the run folder) and the pretrained dense base, evaluated."""
    def fn(run: Run) -> dict:
        tokenizer = train_bpe(wiki_texts("train", config.train_docs), config.vocab_size)
        tokenizer.save_pretrained(str(run.path / "tokenizer"))
        data = load_data(config, tokenizer)
        torch.manual_seed(config.seed)
        model = GPT2LMHeadModel(gpt2_config(config, len(tokenizer)))
        metrics = train_on(model, data, config, run, config.pretrain_steps, config.lr)
        return {**metrics, **evaluate(model, data, config), "parameters": count_parameters(model),
                "vocab_size": len(tokenizer), "train_tokens": data.train.numel()}

    return cached(STUDY, _base_run_config(config), fn)


# Encoded data per (base run, evaluation slice): every stage of one notebook reads the same ids, so we
# encode them once per process instead of once per run.
_DATA: dict[tuple, WikiData] = {}


def load_base(config: WikiBaseConfig) -> tuple[GPT2LMHeadModel, WikiData]:
    """The trained base model (best weights) and the study data encoded with its BPE."""
    pretrain_base(config)
    run = base_run(config)
    key = (str(run.path), config.wikitext_tokens, config.lambada_examples)
    if key not in _DATA:
        _DATA[key] = load_data(config, load_tokenizer(run.path / "tokenizer"))
    data = _DATA[key]
    model = GPT2LMHeadModel(gpt2_config(config, len(data.tokenizer)))
    load_weights(model, run, "best")
    return model, data
