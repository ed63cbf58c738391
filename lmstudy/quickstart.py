"""00_quickstart: the smallest end-to-end study.

A word-level GPT-2-style language model on Mikolov's PTB, through every shared piece of the
workbench: the corpus reader and committed split (``lmstudy.data.splits``), the vocabulary
(``lmstudy.text.Vocab``), the one training loop (``lmstudy.training.train``), the run cache
(``lmstudy.runs``) and the shared evaluation protocol (``lmstudy.evaluation``). It is what
``make demo`` runs until the Gradio app has its demo checkpoint.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pandas as pd
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from lmstudy.evaluation import stream_loss
from lmstudy.lm_batches import LMTask
from lmstudy.runs import cached, get_run, read_log
from lmstudy.training import TrainConfig, count_parameters, train_and_restore
from lmstudy.word_lm import load_word_lm

STUDY = "00_quickstart"


@dataclass(frozen=True)
class QuickstartConfig:
    """One quick-start run: the GPT-2's size, the training recipe and how much PTB text it reads."""

    n_layer: int
    n_head: int
    n_embd: int
    seq_len: int
    batch_size: int
    max_steps: int
    eval_every: int
    lr: float
    train_tokens: int  # first whole sentences holding N tokens of PTB train; 0 = all of it
    eval_tokens: int  # the same for valid and test
    seed: int = 0


def build_model(config: QuickstartConfig, vocab_size: int) -> GPT2LMHeadModel:
    """A freshly initialised GPT-2 of ``config``'s size over ``vocab_size`` tokens (seeded by ``config.seed``)."""
    torch.manual_seed(config.seed)
    return GPT2LMHeadModel(GPT2Config(
        vocab_size=vocab_size, n_positions=config.seq_len, n_embd=config.n_embd,
        n_layer=config.n_layer, n_head=config.n_head,
        bos_token_id=None, eos_token_id=None,
    ))


def run(config: QuickstartConfig) -> dict:
    """Train (or fetch from the run cache) and evaluate; returns the run's metrics."""
    # PTB is already UNK'd to 10k words: K = 0 keeps its vocabulary as it is.
    data = load_word_lm("ptb", unk_cutoff=0, train_tokens=config.train_tokens, eval_tokens=config.eval_tokens)

    def train_and_test(run_) -> dict:
        model = build_model(config, len(data.vocab))
        task = LMTask(data.train, data.valid, batch_size=config.batch_size, seq_len=config.seq_len,
                      seed=config.seed)
        train_config = TrainConfig(
            max_steps=config.max_steps, lr=config.lr, lr_schedule="cosine",
            warmup_steps=max(1, config.max_steps // 20), eval_every=config.eval_every,
            checkpoint_every=config.eval_every, seed=config.seed, log_every=max(1, config.eval_every // 5),
        )

        def test(model) -> dict:
            loss = stream_loss(model, data.test, config.seq_len, config.batch_size)
            return {"test_loss": loss, "test_ppl": float(torch.tensor(loss).exp())}

        metrics = train_and_restore(model, task, train_config, run_, evaluate=test)
        metrics["parameters"] = count_parameters(model)
        metrics["vocab_size"] = len(data.vocab)
        return metrics

    return cached(STUDY, asdict(config), train_and_test)


def training_log(config: QuickstartConfig) -> pd.DataFrame:
    """The run's per-step log (train and eval records) as a DataFrame."""
    return read_log(get_run(STUDY, asdict(config)))
