"""01_embedding_init (Welch et al. 2020): one AWD-LSTM run per (embedding configuration, data setting, seed).

``run(config)`` is the unit of the study: it builds the vocabulary of the domain's training split,
fetches (training on first use) the in-domain pretrained vectors when the embedding configuration
needs them, builds an ``AWDLSTM`` set up as the configuration says, trains it with the shared loop
(``AWDLSTMTask``: variable BPTT, AR/TAR, NT-ASGD) into a cached run, and returns the metrics:
validation and test perplexity of the best weights (awd-lstm-lm's protocol: the model saved at the
best validation loss, ASGD-averaged once averaging has started), the final validation perplexity, wall
time, parameter counts and, for pretrained configurations, the coverage of the validation text by
the pretrained vectors.

Data settings (Table 1): *Std* is Mikolov's PTB (already UNK'd; its vocabulary is its own 10k words,
so ``unk_cutoff=0`` adds nothing). *Rare* needs PTB without UNK replacement, which we do not have
(no raw WSJ): it is built the paper's way on another domain, ``unk_cutoff=0`` = no replacement, with
the valid/test word types given embedding rows (``Vocab.build(..., extra_words=...)``) so that rare
evaluation words can benefit from pretrained vectors. *Std-news* is that same news corpus UNK'd, so
that UNK is the only difference from *Rare*, as between the paper's two columns: ``unk_cutoff=1``
keeps every training word and maps the evaluation words never seen in training to UNK (at the cpu
scale's 200k training tokens, 5.8% of validation tokens; the paper's Std and Rare differ in 5.1%).
Unlike PTB, no training word is UNK'd at this cutoff, so UNK never occurs in training; a cutoff that
UNKs training words too is notebook 01b's Table 3 (K = 2, 5).
``DATA_SETTINGS`` names the three.

The loop evaluates and saves ``best/`` inside ``AWDLSTMTask.eval_weights`` (ASGD's averages once it
has switched), so ``best/`` holds exactly the weights its validation score was measured with.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, fields, replace

import torch

from lmstudy.data.splits import FORMAT_VERSION, check_split_format, get_domain
from lmstudy.welch.embeddings import PretrainConfig, align_to_vocab, coverage, load_glove, pretrained_vectors
from lmstudy.welch.awd_lstm import AWDLSTM, AWDLSTMConfig, AWDLSTMTask, carried_state_loss
from lmstudy.welch.embedding_config import EmbeddingConfig, apply_embedding_config
from lmstudy.runs import cached
from lmstudy.scales import preset
from lmstudy.training import TrainConfig, count_parameters, train_and_restore
from lmstudy.word_lm import WordLMData, load_word_lm

STUDY = "01_embedding_init"

# Table 1's data settings (see the module docstring).
DATA_SETTINGS: dict[str, dict] = {
    "Std": dict(domain="ptb", unk_cutoff=0),
    "Std-news": dict(domain="news", unk_cutoff=1),
    "Rare": dict(domain="news", unk_cutoff=0),
}


@dataclass(frozen=True)
class EmbeddingInitConfig:
    """Everything one run depends on (its hash is the run-cache key)."""

    embedding: str  # an EmbeddingConfig name, e.g. "untied/in=pretrained,frozen/out=random,trainable"
    domain: str = "ptb"
    unk_cutoff: int = 0  # K of Welch Table 3; 0 = no UNK replacement (valid/test types get rows)
    # model (awd-lstm-lm PTB defaults = Welch's "Baseline" column)
    emb_size: int = 400
    hidden_size: int = 1150
    n_layers: int = 3
    dropout: float = 0.4
    dropouth: float = 0.25
    dropouti: float = 0.4
    dropoute: float = 0.1
    wdrop: float = 0.5
    # training
    batch_size: int = 20  # awd-lstm-lm's PTB command (80 is its WikiText-2 setting)
    bptt: int = 70
    eval_batch_size: int = 10
    test_batch_size: int = 1
    lr: float = 30.0
    weight_decay: float = 1.2e-6
    grad_clip: float = 0.25
    alpha: float = 2.0
    beta: float = 1.0
    nonmono: int = 5
    max_epochs: int = 500
    max_steps: int = 0  # 0: no step limit
    evals_per_epoch: int = 1
    patience: int = 0  # evaluations without improvement before stopping; 0: never stop early
    train_tokens: int = 0  # first whole sentences holding N tokens of train; 0 = all
    eval_tokens: int = 0  # the same for valid and test
    # pretrained vectors
    vector_method: str = "word2vec"
    vector_epochs: int = 5
    pretrain_sentences: int = 0  # 0 = the whole pretraining split
    seed: int = 0
    # The split files' format the data came from (v2: near-duplicate clusters kept in one part). Part of the run's
    # identity: Table 1's archived format-1 runs must not be read back as runs on the clean splits.
    splits: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        check_split_format(self.splits)


# The run-config fields a notebook parameter sets for a whole grid (all but what names each run of it).
RUN_FIELDS = {f.name for f in fields(EmbeddingInitConfig)} - {"embedding", "seed", "domain", "unk_cutoff", "splits"}


def make_config(embedding: str | EmbeddingConfig, scale: str, setting: str = "Std", **overrides) -> EmbeddingInitConfig:
    """The run config of ``embedding`` at ``scale`` on a Table 1 data ``setting`` (a ``DATA_SETTINGS`` name)."""
    name = embedding.name if isinstance(embedding, EmbeddingConfig) else EmbeddingConfig.from_name(embedding).name
    # The preset also holds notebook-only keys (configs, seeds, settings): keep the run-config fields.
    fields = EmbeddingInitConfig.__dataclass_fields__
    params = {k: v for k, v in preset(STUDY, scale).items() if k in fields}
    return EmbeddingInitConfig(embedding=name, **{**params, **DATA_SETTINGS[setting], **overrides})


def build_model(config: EmbeddingInitConfig, data: WordLMData) -> tuple[AWDLSTM, dict]:
    """The AWD-LSTM of ``config``, embeddings set up; also returns pretrained-vector facts (coverage)."""
    embedding = EmbeddingConfig.from_name(config.embedding)
    torch.manual_seed(config.seed)
    model = AWDLSTM(AWDLSTMConfig(
        vocab_size=len(data.vocab), emb_size=config.emb_size, hidden_size=config.hidden_size,
        n_layers=config.n_layers, dropout=config.dropout, dropouth=config.dropouth,
        dropouti=config.dropouti, dropoute=config.dropoute, wdrop=config.wdrop, tie_weights=embedding.tied,
    ))
    facts: dict = {}
    vectors = found = None
    if embedding.uses_pretrained:
        # PTB's pretraining part is another domain's (news): name that one, so both share the vectors.
        pretrain_domain = get_domain(config.domain).pretrain_from or config.domain
        path = pretrained_vectors(PretrainConfig(
            domain=pretrain_domain, vector_size=config.emb_size, method=config.vector_method,
            epochs=config.vector_epochs, max_sentences=config.pretrain_sentences, seed=config.seed))
        words, array = load_glove(path)
        vectors, found = align_to_vocab(data.vocab, words, array)
        cov = coverage(data.valid_sentences, words)
        facts = {"valid_type_coverage_pct": cov.type_pct, "valid_token_coverage_pct": cov.token_pct,
                 "vocab_rows_pretrained": int(found.sum()), "pretrained_words": len(words)}
    apply_embedding_config(model, embedding, vectors, found)
    return model, facts


def run(config: EmbeddingInitConfig) -> dict:
    """Train (or fetch from the run cache) one configuration; returns its metrics."""
    data = load_word_lm(config.domain, config.unk_cutoff, config.train_tokens, config.eval_tokens)
    return cached(STUDY, asdict(config), lambda run_: train_awd_lstm(config, data, run_))


def train_awd_lstm(config: EmbeddingInitConfig, data: WordLMData, run_, vectors_domain: str | None = None) -> dict:
    """Train the AWD-LSTM of ``config`` on ``data`` into ``run_`` (resuming), test its best weights; its metrics.

    The recipe of every AWD-LSTM run: :func:`run`'s (``data`` = ``config``'s) and those of
    ``lmstudy.welch.extended`` (more LM data, another vector source). ``vectors_domain``: the domain whose
    pretraining split the vectors come from, when it is not ``config.domain`` (:func:`build_model` reads it
    from ``config.domain``, which is used for nothing else here: the data are passed in).
    """
    model, facts = build_model(replace(config, domain=vectors_domain) if vectors_domain else config, data)
    task = AWDLSTMTask(data.train, data.valid, batch_size=config.batch_size, bptt=config.bptt,
                       eval_batch_size=config.eval_batch_size, alpha=config.alpha, beta=config.beta,
                       nonmono=config.nonmono, seed=config.seed)
    eval_every = max(1, task.steps_per_epoch // config.evals_per_epoch)
    train_config = TrainConfig(
        max_epochs=config.max_epochs, max_steps=config.max_steps or None, optimizer="sgd", lr=config.lr,
        weight_decay=config.weight_decay, grad_clip=config.grad_clip, eval_every=eval_every,
        checkpoint_every=eval_every, early_stopping_patience=config.patience or None,
        seed=config.seed, log_every=max(1, eval_every // 5),
    )
    start = time.perf_counter()
    # Valid and test with the best weights (averaged under ASGD), as awd-lstm-lm reports them.
    metrics = train_and_restore(model, task, train_config, run_)
    metrics["train_wall_s"] = time.perf_counter() - start  # this session only when a run resumed
    metrics["final_val_ppl"] = metrics["val_ppl"]
    metrics["val_loss"], metrics["val_ppl"] = metrics["best_val_loss"], metrics["best_val_ppl"]
    metrics["test_loss"] = carried_state_loss(model, data.test, config.test_batch_size, config.bptt)
    metrics["test_ppl"] = math.exp(metrics["test_loss"])
    # The step of the first evaluation made with ASGD's averages (None: never switched).
    switched = [r["step"] for r in run_history(run_) if r.get("averaged")]
    metrics["asgd_from_step"] = switched[0] if switched else None
    metrics["parameters"] = count_parameters(model)
    metrics["trainable_parameters"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    metrics["vocab_size"] = len(data.vocab)
    metrics.update(facts)
    return metrics


def run_history(run_) -> list[dict]:
    """The evaluation records of a run's log."""
    from lmstudy.runs import read_log_records

    return [r for r in read_log_records(run_.log_path) if r.get("kind") == "eval"]


__all__ = ["DATA_SETTINGS", "RUN_FIELDS", "STUDY", "EmbeddingInitConfig", "build_model",
           "make_config", "run", "run_history", "train_awd_lstm"]
