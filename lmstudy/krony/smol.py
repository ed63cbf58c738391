"""Krony-PT on SmolLM2-135M (issue 49): does Kronecker compression beat distillation when the base is well trained?

Every model starts from the fetched SmolLM2 (``init_from``; 2 trillion tokens of pretraining) and gets the same
continued training:

- **Krony** (``kind="krony"``): every MLP matrix (gate, up, down) of every block factored
  (:func:`lmstudy.krony.llama.compress_llama`) at the size class's shape (:func:`lmstudy.krony.llama.llama_classes`:
  the paper's parameter ratio; ``n_factors`` and ``scalars`` of the spec, the class's own by default); Van Loan,
  pruning, or random factors as the control.
- **Distilled** (``kind="distilled"``, DistilGPT2's recipe adapted): SmolLM2 with every MLP narrowed to the width
  whose dense model has the Krony model's parameter count (:func:`lmstudy.krony.llama.matched_llama_inner`,
  :func:`~lmstudy.krony.llama.narrow_mlp`), trained with Hinton's loss, SmolLM2 the teacher
  (:class:`lmstudy.krony.distillation.DistillTask`: DistilGPT2's temperature 2 and its 5.0 : 0.5 KD : CE weights as
  ``alpha = 0.9``). Adapted how: DistilGPT2 halves the depth and initialises from every other layer, and adds a
  cosine loss on hidden states; here the student keeps every layer and narrows the MLPs, so its size matches the
  Krony model's by the part Krony-PT compresses, and the cosine term is left out (the shared
  :func:`~lmstudy.krony.distillation.distillation_loss`).
- **Narrowed** (``kind="narrowed"``): the distilled model's start trained with plain cross-entropy, no teacher:
  what the teacher's soft targets add.

**Continued training**: ``finetune_tokens`` (whole steps of ``batch_size`` x ``seq_len``) of random windows of our
pretraining text (the shared base's training documents, the evaluation-leak filter included) in SmolLM2's tokens
(:func:`lmstudy.base.pretrained_streams`, ``data_fraction`` of the documents), drawn with the run's seed, so every
model of a seed sees the same batches. AdamW (0.9, 0.95), weight decay 0.1 on matrices, 5% warm-up, cosine to a
tenth of ``finetune_lr``, bfloat16 autocast; the validation stream (``valid_tokens_per_domain`` of every domain's
validation documents, or its first ``val_tokens``) scored ``evals_per_run`` times and the best weights kept (and so
the initialisation is chosen on validation, never on test: :func:`best_init`).

**Evaluation**: the shared protocol (:func:`lmstudy.krony.runs.protocol_metrics`) on ``eval_*`` slices, in windows
of ``eval_seq_len`` tokens (SmolLM2's 8,192-token context would cost minutes a window here); SmolLM2 itself scored
the same way (:func:`smol_base_metrics`).

Runs are cached by their config (study ``03_krony_smollm2``) and resume after an interruption; the presets are
:data:`lmstudy.scales.SMOLLM2_KRONY`.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import asdict, dataclass, field, fields, replace

import pandas as pd
import torch
from tqdm.auto import tqdm

from lmstudy.evaluation import EvalConfig, eval_domains
from lmstudy.krony.classes import CLASSES, PAPER_RATIOS
from lmstudy.krony.config import LABELS, ModelSpec
from lmstudy.krony.distillation import DistillTask
from lmstudy.krony.llama import (
    compress_llama, llama_classes, llama_compressed_parameter_count, matched_llama_inner, narrow_mlp,
)
from lmstudy.krony.model import INITS, KroneckerConfig
from lmstudy.krony import study_tables
from lmstudy.krony.runs import protocol_metrics
from lmstudy.lm_batches import LMTask
from lmstudy.runs import Run, cached, training_seconds
from lmstudy.training import TrainConfig, count_parameters, train_and_restore

STUDY = "03_krony_smollm2"
SMOL_KINDS = ("krony", "distilled", "narrowed")
WARMUP_FRACTION = 0.05


@dataclass(frozen=True)
class SmolKronyConfig:
    """The SmolLM2 comparison's settings (presets: :data:`lmstudy.scales.SMOLLM2_KRONY`; module docstring)."""

    finetune_tokens: int  # continued-training budget of every model (whole steps of batch_size x seq_len)
    init_from: str = "smollm2"  # the pretrained Llama compressed and distilled (a fetched name or a folder)
    classes: list = field(default_factory=lambda: list(CLASSES))
    inits: list = field(default_factory=lambda: list(INITS))
    compare_class: str = "81M"  # the central comparison's class (the paper's DistilGPT2 size)
    seeds: list = field(default_factory=lambda: [0, 1, 2])  # of the central comparison
    data_fraction: float = 0.02  # of the base's training documents, tokenised by the model (pretrained_streams)
    batch_size: int = 8
    seq_len: int = 256
    finetune_lr: float = 3e-4
    evals_per_run: int = 2
    valid_tokens_per_domain: int = 3_000  # the validation stream: this many tokens of each domain's validation text
    val_tokens: int = 0  # first tokens of the validation stream scored during training; 0 = all of it
    mixed_precision: str = "bf16"
    distill_alpha: float = 0.9
    distill_temperature: float = 2.0
    table6_class: str = "67M"
    table6_factors: list = field(default_factory=lambda: [1, 2, 4])
    # the protocol's slices (lmstudy.evaluation.EvalConfig)
    eval_seq_len: int = 1024
    wikitext_tokens: int = 20_000
    lambada_examples: int = 500
    domains: list | None = None
    domain_documents: int = 5
    eval_batch_size: int = 4

    def __post_init__(self) -> None:
        unknown = {*self.classes, self.compare_class, self.table6_class} - set(CLASSES)
        if unknown:
            raise ValueError(f"unknown size class(es) {sorted(unknown)}; choose from {', '.join(CLASSES)}")
        if set(self.inits) - set(INITS) or not self.inits:
            raise ValueError(f"inits must be a non-empty subset of {INITS}, got {self.inits}")
        if not self.seeds:
            raise ValueError("seeds must hold at least one seed")
        if self.finetune_tokens < self.tokens_per_step:
            raise ValueError(f"finetune_tokens={self.finetune_tokens:,} is less than one step ({self.batch_size} x "
                             f"{self.seq_len} = {self.tokens_per_step:,} tokens)")
        if not 1 <= self.evals_per_run <= self.finetune_steps:
            raise ValueError(f"evals_per_run must be between 1 and the {self.finetune_steps} steps, got "
                             f"{self.evals_per_run}")
        if not 0 < self.data_fraction <= 1:
            raise ValueError(f"data_fraction must be in (0, 1], got {self.data_fraction}")
        if any(n < 1 for n in self.table6_factors):
            raise ValueError(f"table6_factors must be positive, got {self.table6_factors}")

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    @property
    def finetune_steps(self) -> int:
        return self.finetune_tokens // self.tokens_per_step

    def eval_config(self) -> EvalConfig:
        """The protocol's slices, windows of ``eval_seq_len`` tokens."""
        return EvalConfig(seq_len=self.eval_seq_len, batch_size=self.eval_batch_size,
                          wikitext_tokens=self.wikitext_tokens, lambada_examples=self.lambada_examples,
                          domains=self.domains, domain_documents=self.domain_documents)

    def protocol_identity(self) -> dict:
        """What of the config sets the scores (part of every run's identity)."""
        return {"seq_len": self.eval_seq_len, "wikitext_tokens": self.wikitext_tokens,
                "lambada_examples": self.lambada_examples, "domains": self.domains,
                "domain_documents": self.domain_documents}

    def finetune_identity(self) -> dict:
        """What of the config sets the continued training (part of every trained run's identity)."""
        return {"steps": self.finetune_steps, "batch_size": self.batch_size, "seq_len": self.seq_len,
                "lr": self.finetune_lr, "evals": self.evals_per_run, "val_tokens": self.val_tokens,
                "mixed_precision": self.mixed_precision, "data_fraction": self.data_fraction,
                "valid_tokens_per_domain": self.valid_tokens_per_domain}

    def train_config(self, seed: int) -> TrainConfig:
        """The continued training (module docstring)."""
        steps = self.finetune_steps
        every = max(1, steps // self.evals_per_run)
        return TrainConfig(max_steps=steps, lr=self.finetune_lr, weight_decay=0.1, betas=(0.9, 0.95),
                           lr_schedule="cosine", warmup_steps=round(WARMUP_FRACTION * steps), eval_every=every,
                           checkpoint_every=every, log_every=max(1, min(10, every)), seed=seed,
                           mixed_precision=self.mixed_precision)


def smol_config(scale: str, **overrides) -> SmolKronyConfig:
    """The preset of ``scale`` (:data:`lmstudy.scales.SMOLLM2_KRONY`) with ``overrides``; a ValueError names a
    key that is not a setting."""
    from lmstudy.scales import SMOLLM2_KRONY

    if scale not in SMOLLM2_KRONY:
        raise ValueError(f"unknown scale {scale!r}; choose one of {', '.join(SMOLLM2_KRONY)}")
    unknown = sorted(set(overrides) - {f.name for f in fields(SmolKronyConfig)})
    if unknown:
        raise ValueError(f"not a setting of the SmolLM2 Krony study: {', '.join(unknown)}")
    return SmolKronyConfig(**{**SMOLLM2_KRONY[scale], **overrides})


# ---------------------------------------------------------------------------------------------------
# the base, the streams and the models


@functools.lru_cache(maxsize=2)
def _teacher(init_from: str):
    """``(model, tokenizer)`` of ``init_from``, loaded once per process (float32, eval mode); callers copy it."""
    from lmstudy.pretrained import load_pretrained

    model, tokenizer, _ = load_pretrained(init_from)
    return model, tokenizer


def class_configs(config: SmolKronyConfig) -> dict[str, KroneckerConfig]:
    """The size classes on this model (:func:`lmstudy.krony.llama.llama_classes`)."""
    return llama_classes(_teacher(config.init_from)[0].config)


def krony_spec(config: SmolKronyConfig, size_class: str, init: str, n_factors: int | None = None,
               scalars: bool = False) -> ModelSpec:
    """A Krony model of ``size_class`` (``n_factors``: the class's own unless given)."""
    factors = n_factors or class_configs(config)[size_class].n_factors
    return ModelSpec("krony", size_class, init, factors, scalars)


def kronecker_config(config: SmolKronyConfig, spec: ModelSpec) -> KroneckerConfig:
    """The class's factor shape with the spec's number of factors and scalars."""
    return replace(class_configs(config)[spec.size_class], n_factors=spec.n_factors, scalars=spec.scalars)


def dense_inner(config: SmolKronyConfig, size_class: str) -> int:
    """The MLP width of the dense baselines of ``size_class``: the dense model nearest the class's Krony model."""
    model_config = _teacher(config.init_from)[0].config
    target = llama_compressed_parameter_count(model_config, class_configs(config)[size_class])
    return matched_llama_inner(model_config, target)


def initial_model(config: SmolKronyConfig, spec: ModelSpec, seed: int = 0) -> torch.nn.Module:
    """``spec``'s model as continued training starts it: SmolLM2 compressed (random factors from their own
    generator seeded with ``seed``) or narrowed; a fresh copy each call."""
    if spec.kind not in SMOL_KINDS:
        raise ValueError(f"the SmolLM2 study's models are {SMOL_KINDS}, got {spec.kind!r}")
    base = _teacher(config.init_from)[0]
    if spec.kind == "krony":
        model = compress_llama(copy.deepcopy(base), kronecker_config(config, spec), spec.init,
                               generator=torch.Generator().manual_seed(seed))
    else:
        model = narrow_mlp(base, dense_inner(config, spec.size_class))
    return model.requires_grad_(True)  # the shared base is frozen once it has served as a teacher


def streams(config: SmolKronyConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Training and validation streams in the model's tokens (:func:`lmstudy.base.pretrained_streams`)."""
    from lmstudy.base import pretrained_streams

    return pretrained_streams(config.init_from, data_fraction=config.data_fraction,
                              valid_tokens_per_domain=config.valid_tokens_per_domain)


# ---------------------------------------------------------------------------------------------------
# the cached runs


def _identity(config: SmolKronyConfig, stage: str, spec: ModelSpec | None = None, seed: int | None = None) -> dict:
    from lmstudy.pretrained import pretrained_record

    identity = {"stage": stage, "base": pretrained_record(config.init_from), "protocol": config.protocol_identity()}
    if spec is not None:
        identity.update(model=asdict(spec), seed=seed)
        if spec.kind != "krony":
            identity["n_inner"] = dense_inner(config, spec.size_class)
    return identity


def smol_base_metrics(config: SmolKronyConfig) -> dict:
    """Cached: the protocol's scores of the uncompressed model."""
    def fn(run: Run) -> dict:
        model, tokenizer = _teacher(config.init_from)
        return {**protocol_metrics(model, tokenizer, config), "parameters": count_parameters(model)}

    return cached(STUDY, _identity(config, "base"), fn)


def smol_initial_metrics(config: SmolKronyConfig, spec: ModelSpec, seed: int = 0) -> dict:
    """Cached: ``spec``'s scores straight after compression or narrowing, before any training (the seed counts for
    random factors only)."""
    seed = seed if spec.seeded_init else None
    if spec.kind == "distilled":  # the same start as the narrowed model: scored once
        spec = replace(spec, kind="narrowed")

    def fn(run: Run) -> dict:
        model = initial_model(config, spec, seed or 0)
        return {**protocol_metrics(model, _teacher(config.init_from)[1], config),
                "parameters": count_parameters(model)}

    return cached(STUDY, _identity(config, "initial", spec, seed), fn)


def continued_identity(config: SmolKronyConfig, spec: ModelSpec, seed: int) -> dict:
    """The run-cache identity of ``spec``'s continued training with ``seed``."""
    identity = {**_identity(config, "continued", spec, seed), "finetune": config.finetune_identity()}
    if spec.kind == "distilled":
        identity["distill"] = {"alpha": config.distill_alpha, "temperature": config.distill_temperature}
    return identity


def smol_continued_run(config: SmolKronyConfig, spec: ModelSpec, seed: int = 0) -> dict:
    """Cached, resumable: ``spec`` after continued training with seed ``seed``, its best validation weights scored."""

    def fn(run: Run) -> dict:
        teacher, tokenizer = _teacher(config.init_from)
        model = initial_model(config, spec, seed)
        train_ids, valid_ids = streams(config)
        task_args = dict(batch_size=config.batch_size, seq_len=config.seq_len, eval_batch_size=config.batch_size,
                         max_eval_tokens=config.val_tokens or None, seed=seed)
        if spec.kind == "distilled":
            task = DistillTask(train_ids, valid_ids, teacher=teacher, alpha=config.distill_alpha,
                               temperature=config.distill_temperature, **task_args)
        else:
            task = LMTask(train_ids, valid_ids, **task_args)
        metrics = train_and_restore(model, task, config.train_config(seed), run,
                                    evaluate=lambda trained: protocol_metrics(trained, tokenizer, config))
        return {**metrics, "parameters": count_parameters(model), "train_seconds": training_seconds(run),
                "finetune_tokens": metrics["steps"] * config.tokens_per_step}

    return cached(STUDY, continued_identity(config, spec, seed), fn)


# ---------------------------------------------------------------------------------------------------
# the tables

METRICS = ["wikitext_bpb", "wikitext_ppl", "lambada_acc", "lambada_acc_low", "lambada_acc_high", "lambada_ppl"]


def metric_keys(config: SmolKronyConfig) -> list[str]:
    """The scores a table row carries: :data:`METRICS` and each held-out domain's perplexity and bits per byte."""
    return METRICS + study_tables.domain_keys(config.domains)


def _row(config: SmolKronyConfig, spec: ModelSpec, seed: int, trained: dict | None) -> dict:
    """One model: its size, its scores straight after compression (``before_*``) and, when ``trained`` is
    given, after continued training (with the validation loss of the weights kept: what :func:`best_init` reads)."""
    initial = smol_initial_metrics(config, spec, seed)
    base_parameters = smol_base_metrics(config)["parameters"]
    row = {"model": LABELS[spec.kind], "kind": spec.kind, "class": spec.size_class, "init": spec.init,
           "factors": spec.n_factors if spec.kind == "krony" else None,
           "scalars": spec.scalars if spec.kind == "krony" else None, "seed": seed,
           "parameters": initial["parameters"], "size_ratio": initial["parameters"] / base_parameters,
           "paper_ratio": PAPER_RATIOS[spec.size_class],
           **{f"before_{key}": initial[key] for key in metric_keys(config)}}
    if trained is not None:
        row.update(best_val_loss=trained["best_val_loss"], finetune_tokens=trained["finetune_tokens"],
                   train_seconds=trained["train_seconds"], **{key: trained[key] for key in metric_keys(config)})
    return row


def base_row(config: SmolKronyConfig) -> dict:
    """The uncompressed model as a table row (its scores as both ``before_*`` and after: it is not trained)."""
    metrics = smol_base_metrics(config)
    return {"model": config.init_from, "kind": "base", "parameters": metrics["parameters"], "size_ratio": 1.0,
            **{f"before_{key}": metrics[key] for key in metric_keys(config)},
            **{key: metrics[key] for key in metric_keys(config)}}


def compressed_table(config: SmolKronyConfig) -> pd.DataFrame:
    """Straight after compression, no training: every class x init and each class's narrowed dense model."""
    specs = [krony_spec(config, c, init) for c in config.classes for init in config.inits]
    specs += [ModelSpec("narrowed", c) for c in config.classes]
    return pd.DataFrame([base_row(config)] + [_row(config, spec, 0, None)
                                              for spec in tqdm(specs, desc="after compression", unit="model")])


def class_specs(config: SmolKronyConfig, size_class: str, init: str | None = None) -> list[ModelSpec]:
    """The models of ``size_class``: Krony (every init, or ``init``), distilled, narrowed."""
    inits = config.inits if init is None else [init]
    return [krony_spec(config, size_class, i) for i in inits] + [
        ModelSpec("distilled", size_class), ModelSpec("narrowed", size_class)]


def central_specs(config: SmolKronyConfig, init: str | None = None) -> list[ModelSpec]:
    """The central comparison's models: :func:`class_specs` of ``compare_class``."""
    return class_specs(config, config.compare_class, init)


def trained_rows(config: SmolKronyConfig, specs: list[ModelSpec], seed: int, desc: str) -> list[dict]:
    """Rows of ``specs`` after continued training with ``seed`` (training what the run cache lacks)."""
    return [_row(config, spec, seed, smol_continued_run(config, spec, seed))
            for spec in tqdm(specs, desc=desc, unit="model")]


def best_init(rows: pd.DataFrame, size_class: str) -> str:
    """The Krony init of ``size_class`` with the lowest validation loss after continued training (seed 0): chosen
    on validation, never on the test sets."""
    return str(study_tables.best_init(rows[rows["seed"] == 0], size_class))


def central_table(config: SmolKronyConfig) -> pd.DataFrame:
    """Seed 0: every init and both dense baselines at ``compare_class``; the other seeds: the init chosen on
    validation and both dense baselines."""
    rows = pd.DataFrame(trained_rows(config, central_specs(config), config.seeds[0], "central, first seed"))
    chosen = best_init(rows, config.compare_class)
    for seed in config.seeds[1:]:
        rows = pd.concat([rows, pd.DataFrame(trained_rows(config, central_specs(config, chosen), seed,
                                                          f"central, seed {seed}"))], ignore_index=True)
    return rows


def grid_table(config: SmolKronyConfig) -> pd.DataFrame:
    """Every class's models after continued training, seed 0 (the compare class's are the central comparison's)."""
    return pd.DataFrame([row for size_class in config.classes
                         for row in trained_rows(config, class_specs(config, size_class), config.seeds[0],
                                                 f"grid, {size_class}")])


def table6(config: SmolKronyConfig, init: str = "van_loan") -> pd.DataFrame:
    """Table 6's question at ``table6_class``: one or several factors, without and with scalars, seed 0."""
    specs = [krony_spec(config, config.table6_class, init, n, scalars)
             for n in config.table6_factors for scalars in (False, True)]
    return pd.DataFrame(trained_rows(config, specs, config.seeds[0], "Table 6"))


def domain_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Each held-out domain's bits per byte after continued training, mean and std over seeds per model and init
    (the rows of :func:`central_table` or another table of trained models)."""
    columns = [column for column in rows if column.endswith("_bpb") and not column.startswith("before_")
               and column[: -len("_bpb")] in eval_domains()]
    return rows.groupby(["model", "init"], dropna=False, sort=False)[columns].agg(["mean", "std"])


__all__ = ["SMOL_KINDS", "STUDY", "SmolKronyConfig", "base_row", "best_init", "central_specs", "central_table",
           "class_configs", "class_specs", "compressed_table", "continued_identity", "dense_inner", "domain_table",
           "grid_table", "initial_model", "krony_spec", "metric_keys", "smol_base_metrics", "smol_config", "smol_continued_run",
           "smol_initial_metrics", "table6", "trained_rows"]
