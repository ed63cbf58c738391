"""The Krony study's runs: every model's initial weights, its continued training and its scores.

Models (``ModelSpec``), all started from one base checkpoint and given the same continued training:

- **Krony** (``kind="krony"``): the base with both MLP matrices of every block factored. Size classes keep the
  paper's *factor shapes*, not its parameter counts (our dims differ): ``c_fc`` is ``(4d, d)`` in the paper's
  ``(out, in)`` orientation; the 96M class is ``B = (2, 1)`` (A = (2d, d): half the MLP), the 81M class
  ``B = (4, 1)`` (A = (d, d): a quarter), the 67M class a balanced pair with both factors tiny (A's sides the
  divisors nearest the square roots: (24, 12) at d = 192). ``size_ratio`` (parameters over the base's) is
  reported beside the paper's 95/124, 81/124, 67/124; our embeddings are a larger share of a small model, so the
  same shapes remove less. Inits: ``van_loan``, ``prune``, ``random`` (``lmstudy.krony.model``).
- **Distilled** (``kind="distilled"``, the DistilGPT2 analogue): a dense GPT-2 of the base's depth and width whose
  MLP hidden size (``matched_dense_inner``) gives the parameter count closest to the Krony model of the class,
  trained on the same continued-training tokens with Hinton's loss from the same base checkpoint as teacher
  (``DistillTask``: ``alpha * KL(p_t^T || p_s^T) * T^2 + (1 - alpha) * CE``, DistilGPT2's T = 2 and its 5.0 : 0.5
  KD : CE ratio as alpha = 0.9; DistilGPT2's third, cosine hidden-state term is left out).
  **Its initialisation is the teacher's own weights** (``narrowed_model``): the base with each MLP narrowed to the
  matched width, keeping in every block the hidden units with the largest ``||input weights|| * ||output
  weights||`` (``hidden_unit_scores``), everything else copied. Why: DistilGPT2 itself starts from GPT-2's weights
  (every second layer), and the Krony model inherits the base's attention, embeddings and an approximation of its
  MLPs; a student from random init given only the continued-training tokens (a fraction of a percent of the
  base's) would be a straw man, losing for want of data, not for want of Kronecker factors. Magnitude selection
  keeps the units that move the residual stream most, so the student starts as close to the teacher as a
  narrower dense MLP can without training.
- **Scratch, equal data** (``kind="scratch"``): the same narrowed dense GPT-2 from random init, trained with the
  base's exact recipe (``lmstudy.base.final_config(scale).train_config()``: same data stream and windows, batch,
  learning-rate schedule, and kept checkpoints at the base's kept steps) in ONE run (``scratch_pretraining``);
  its checkpoint at each kept step then gets the same continued training as the Krony model. At every point of
  the trend it has seen exactly the base's tokens plus the continued-training tokens: equal data, equal
  treatment. Its kept weights are rounded through float16 like the shipped base's (``study_base``).

Continued training (``continued_run``): ``finetune_tokens`` (the preset's stated budget, rounded down to whole
steps of the base's batch x context) of random windows of the base's own training stream
(:func:`lmstudy.base.base_streams`), drawn with seed ``FINETUNE_SEED_OFFSET + seed`` so they are not the base's
first windows replayed; the same batches for every model of a seed. The base's recipe otherwise (AdamW (0.9,
0.95), weight decay 0.1 on matrices, 2% warm-up, cosine to a tenth) with peak ``finetune_lr``; the validation
stream (its first ``val_tokens``) is scored ``evals_per_run`` times and the best weights are kept.

Evaluation: the shared protocol (:func:`lmstudy.evaluation.evaluate_model`) on the preset's slices: WikiText-2
test detokenised, per token (``wikitext_ppl``), per word (``wikitext_ppl_word``) and bits per byte
(``wikitext_bpb``), LAMBADA accuracy with its 95% Wilson interval (``lambada_acc``, ``_low``, ``_high``) and
target perplexity (``lambada_ppl``), each held-out domain (``<domain>_ppl``, ``_ppl_word``, ``_bpb``). Each model
is scored before (``initial_metrics``) and after continued training.
"""

from __future__ import annotations

from dataclasses import asdict, replace

import torch
from transformers import GPT2LMHeadModel

from lmstudy.evaluation import evaluate_model
from lmstudy.krony.bases import base_checkpoint, load_base, shared_base, study_device, study_streams
from lmstudy.krony.baselines import dense_width, narrowed_model, scratch_checkpoint, scratch_identity
from lmstudy.krony.classes import class_a_shape
from lmstudy.krony.config import FINETUNE_SEED_OFFSET, STUDY, KronyConfig, ModelSpec
from lmstudy.krony.distillation import DistillTask
from lmstudy.krony.model import KroneckerConfig, compress
from lmstudy.lm_batches import LMTask
from lmstudy.runs import Run, cached, config_hash
from lmstudy.training import TrainConfig, count_parameters, train_and_restore


def protocol_metrics(model: torch.nn.Module, tokenizer, config: KronyConfig) -> dict:
    """The shared protocol (:func:`lmstudy.evaluation.evaluate_model`) on ``config``'s slices, flattened:
    ``<name>_ppl`` (per token), ``_ppl_word``, ``_bpb`` for every benchmark (``wikitext`` for WikiText-2, as
    ``TextScore.metrics`` names it, ``lambada``, each domain) and ``lambada_acc`` with its Wilson interval
    ``lambada_acc_low`` / ``lambada_acc_high``."""
    table = evaluate_model(model, tokenizer, config.eval_config())
    metrics = {}
    for row in table.to_dict("records"):
        name = "wikitext" if row["benchmark"] == "wikitext2" else row["benchmark"]
        metrics.update({f"{name}_ppl": row["ppl_token"], f"{name}_ppl_word": row["ppl_word"],
                        f"{name}_bpb": row["bits_per_byte"]})
        if name == "lambada":
            metrics.update(lambada_acc=row["accuracy"], lambada_acc_low=row["accuracy_low"],
                           lambada_acc_high=row["accuracy_high"])
    return metrics


def initial_model(config: KronyConfig, fraction: float, spec: ModelSpec, seed: int = 0) -> GPT2LMHeadModel:
    """The model of ``spec`` as continued training starts it, from the base checkpoint ``fraction``: the base
    compressed (Krony; random factors drawn from their own generator seeded with ``seed``), narrowed (distilled) or
    the scratch arm's checkpoint. Built anew for each user (:func:`continued_run`, :func:`initial_metrics`): no draw
    of the global generator reaches the runs (training seeds it first)."""
    base = load_base(config, fraction)
    if spec.kind == "krony":
        kron = KroneckerConfig(a_shape=class_a_shape(spec.size_class, base.model.config.n_embd),
                               n_factors=spec.n_factors, scalars=spec.scalars)
        return compress(base.model, kron, spec.init, generator=torch.Generator().manual_seed(seed))
    if spec.kind == "distilled":
        return narrowed_model(base.model, dense_width(config))
    return scratch_checkpoint(config, fraction)


def _identity(config: KronyConfig, fraction: float, spec: ModelSpec, stage: str, seed: int | None) -> dict:
    """A run's config: the base checkpoint, the model, the protocol, and what else sets its weights."""
    identity = {"stage": stage, "base": base_checkpoint(config, fraction)[0], "model": asdict(spec),
                "seed": seed, "protocol": config.protocol_identity()}
    if spec.kind != "krony":
        identity["n_inner"] = dense_width(config)
    if spec.kind == "scratch":
        identity["scratch_run"] = config_hash(scratch_identity(config))
    return identity


def initial_metrics(config: KronyConfig, fraction: float, spec: ModelSpec, seed: int = 0) -> dict:
    """Cached: the protocol's scores of ``spec`` before continued training (the seed matters for random
    Kronecker factors only, so deterministic inits are scored once for every seed)."""
    seed = seed if spec.seeded_init else None

    def fn(run: Run) -> dict:
        base = shared_base(config, fraction)
        model = initial_model(config, fraction, spec, seed or 0).to(study_device())
        return {**protocol_metrics(model, base.tokenizer, config), "parameters": count_parameters(model)}

    return cached(STUDY, _identity(config, fraction, spec, "initial", seed), fn)


def finetune_train_config(config: KronyConfig, seed: int) -> TrainConfig:
    """The continued training: the base's recipe (optimizer, decay, warm-up share, cosine) over ``finetune_steps``."""
    recipe, steps = config.recipe, config.finetune_steps
    every = max(1, steps // config.evals_per_run)
    # The base's own TrainConfig (optimizer, betas, decay, schedule) with the continued training's length.
    return replace(recipe.train_config(), max_steps=steps, lr=config.finetune_lr,
                   warmup_steps=round(recipe.warmup_fraction * steps), eval_every=every, checkpoint_every=every,
                   log_every=max(1, min(10, every)), seed=seed, keep_checkpoints=())


def continued_run(config: KronyConfig, fraction: float, spec: ModelSpec, seed: int = 0) -> dict:
    """Cached, resumable: ``spec`` from the base checkpoint ``fraction``, continued training (seed ``seed``), the
    best validation weights scored by the protocol."""
    identity = {**_identity(config, fraction, spec, "continued", seed), "finetune": config.finetune_identity()}
    if spec.kind == "distilled":
        identity["distill"] = {"alpha": config.distill_alpha, "temperature": config.distill_temperature}

    def fn(run: Run) -> dict:
        base = load_base(config, fraction)
        model = initial_model(config, fraction, spec, seed)
        train_ids, valid_ids = study_streams(config)
        task_args = dict(batch_size=config.recipe.batch_size, seq_len=config.recipe.model.seq_len,
                         eval_batch_size=2 * config.recipe.batch_size, max_eval_tokens=config.val_tokens or None,
                         seed=FINETUNE_SEED_OFFSET + seed)
        if spec.kind == "distilled":
            task = DistillTask(train_ids, valid_ids, teacher=base.model, alpha=config.distill_alpha,
                               temperature=config.distill_temperature, **task_args)
        else:
            task = LMTask(train_ids, valid_ids, **task_args)
        metrics = train_and_restore(model, task, finetune_train_config(config, seed), run,
                                    evaluate=lambda trained: protocol_metrics(trained, base.tokenizer, config))
        return {**metrics, "parameters": count_parameters(model),
                "finetune_tokens": metrics["steps"] * config.recipe.tokens_per_step}

    return cached(STUDY, identity, fn)


def base_metrics(config: KronyConfig, fraction: float) -> dict:
    """Cached: the protocol's scores of the base checkpoint ``fraction`` itself."""
    def fn(run: Run) -> dict:
        base = load_base(config, fraction)
        return {**protocol_metrics(base.model.to(study_device()), base.tokenizer, config),
                "parameters": count_parameters(base.model)}

    identity = {"stage": "base", "base": base_checkpoint(config, fraction)[0],
                "protocol": config.protocol_identity()}
    return cached(STUDY, identity, fn)


def grid_specs(config: KronyConfig) -> list[ModelSpec]:
    """The grid's models: every class x init, then the dense baselines of ``compare_class``."""
    specs = [ModelSpec("krony", size_class, init) for size_class in config.classes for init in config.inits]
    return specs + [ModelSpec(kind, config.compare_class) for kind in ("distilled", "scratch")]


def table6_specs(config: KronyConfig) -> list[ModelSpec]:
    """Table 6's models: Van Loan, ``table6_class``, each of ``table6_factors`` without and with scalars."""
    return [ModelSpec("krony", config.table6_class, "van_loan", n, scalars)
            for n in config.table6_factors for scalars in (False, True)]


def trend_specs(config: KronyConfig, init: str) -> list[ModelSpec]:
    """The trend's models: the ``compare_class`` Krony model (``init``) and the two dense baselines of its size."""
    return [ModelSpec("krony", config.compare_class, init), ModelSpec("distilled", config.compare_class),
            ModelSpec("scratch", config.compare_class)]
