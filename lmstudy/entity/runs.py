"""The entity study's fine-tuning runs and the tables read from them (Tables 2-3, the loss curves, the trend,
the ablations).

1. Models from identical weights (:data:`lmstudy.entity.config.VARIANTS`, :func:`initial_model`): GPT2E =
   :meth:`GPT2E.from_gpt2` (entity attention in every block, zero output projection, so it starts as exactly the
   base), GPT2 = the same with ``entity_layers=[]``, and the two ablations below. All are fine-tuned with the same
   data, batches, schedule and seed (:func:`finetune_run`, cached), for every seed. The seed sets the new entity
   weights and the document order (so one seed = the same batches for every model: differences are paired by
   seed).
2. Data (:func:`lmstudy.entity.documents.study_documents`). ``test_ppl`` is GUM test + LitBank test read with the
   entity memory (:func:`lmstudy.entity.data.entity_stream_loss`); for entity models also with every entity id null
   (``test_ppl_no_entities``: what the entity information itself is worth at test time).
3. Fine-tuning recipe and the trend (our decision). One long run per (model, seed) rather than one run per
   budget: the checkpoints at the ``budgets`` steps are kept (``TrainConfig.keep_checkpoints``) and each is
   scored on the test set, gold and null entities. That is three budgets for the price of the largest, and the
   budgets share their first steps exactly, so the trend is one trajectory, not three noisy runs. What makes
   an early checkpoint a fair stand-in for a shorter run is the schedule: linear warm-up, then a *constant*
   learning rate (a cosine decay would leave the early checkpoints mid-decay, at a high learning rate, where a
   run of that length would have annealed). The price is that no budget gets a final anneal. The run lasts
   the largest budget, several passes over the training documents; validation every ``eval_every`` steps keeps
   the best weights (``best/``): early stopping in the model-selection sense (the run is not cut short: the
   trend needs every budget's checkpoint). The headline measures (LAMBADA, Table 4, t-SNE, NER, the ablations)
   read the best weights; the trend reads the budget checkpoints as they are, overfitted or not (the loss
   curves show where validation turns).
4. LAMBADA (OpenAI's detokenized test set, ``lambada_examples`` passages): the shared protocol
   (:func:`lmstudy.evaluation.lambada_scores`: last-word per-token perplexity and greedy last-word accuracy
   with its Wilson interval), entity models with all-null entities, as the paper does.
5. Ablations the paper leaves open (:func:`ablation_runs`, ``ablation_seeds``), each a GPT2E option of
   :class:`lmstudy.entity.model.GPT2EConfig`: the entity memory initialised with ones (the paper) vs a learned
   vector (``entity_init="learned"``); the memory written at the end of the chunk (ours, the paper's per-step
   update) vs after each mention within the chunk (``memory_update="mention"``, strictly causal, two passes).
   Why the second can matter: where nothing is written yet (a document's first chunk, with the chunk-end
   update) every key of the entity attention is the same initial state, so its attention is uniform, a causal
   mean of the values, and the entity ids carry no information at all; the per-mention memory gives a chunk's
   second mention of an entity its first mention's state.

Reading the two gaps: GPT2E minus GPT2 mixes the use of the entities with the extra sub-layer's capacity (even
with null entities the entity attention is a causal mean of values, a layer GPT2 lacks); GPT2E's gold minus
null entities isolates the use of the entities.
"""

from __future__ import annotations

import math
from functools import partial

import pandas as pd
import torch
from safetensors.torch import load_model
from transformers import LlamaForCausalLM, PreTrainedModel
from transformers.initialization import no_init_weights

from lmstudy.checkpoints import kept_checkpoint
from lmstudy.entity.config import ABLATIONS, MODELS, STUDY, VARIANTS, EntityStudyConfig, load_base
from lmstudy.entity.data import EntityDocument, EntityLMTask, entity_stream_loss
from lmstudy.entity.documents import study_documents, without_entities
from lmstudy.entity.llama import LlamaE
from lmstudy.entity.model import GPT2E, EntityLM, training_flops_per_token, with_entity_layers
from lmstudy.evaluation import context_size, lambada_examples, lambada_scores
from lmstudy.runs import Run, cached, get_run, read_log, read_log_records
from lmstudy.second_worker import StudyRun
from lmstudy.training import (
    TrainConfig, count_parameters, load_weights, process_device, train_and_restore,
)


def _options(base: PreTrainedModel, name: str, config: EntityStudyConfig | None) -> dict:
    """The entity options of ``name`` on ``base`` (the study's top-k layers when ``config`` sets them)."""
    if name not in VARIANTS:
        raise ValueError(f"model {name!r} is not one of {tuple(VARIANTS)}")
    return VARIANTS[name] if config is None else config.variant_options(name, base.config.num_hidden_layers)


def entity_class(base: PreTrainedModel) -> type[EntityLM]:
    """The entity model of a base: LlamaE for a Llama (SmolLM2), GPT2E for a GPT-2."""
    return LlamaE if isinstance(base, LlamaForCausalLM) else GPT2E


def _with_entities(base: PreTrainedModel, options: dict) -> EntityLM:
    """The entity model of ``base`` with its weights and ``options`` (zero entity output: exactly ``base``)."""
    model_class = entity_class(base)
    return with_entity_layers(model_class, model_class.config_class, base, **options)


def train_top_layers_only(model: EntityLM, k: int) -> EntityLM:
    """Freeze every weight but those of the top ``k`` blocks (their entity sub-layers with them) and the learned
    initial entity state (``trained_top_layers``: a pretrained model fine-tuned on a CPU); in place."""
    model.requires_grad_(False)
    for block in model.blocks()[-k:]:
        block.requires_grad_(True)
    if getattr(model, "initial_entity", None) is not None:
        model.initial_entity.requires_grad_(True)
    return model


def initial_model(base: PreTrainedModel, name: str, seed: int, config: EntityStudyConfig | None = None) -> EntityLM:
    """The model ``name`` of :data:`lmstudy.entity.config.VARIANTS` with the base's weights; the seed draws the new
    entity weights (their output projection is zero, so every variant computes the base exactly). Drawing them
    draws every base weight before them too (then overwritten by the base's), so the random state it leaves is
    that of a whole model's initialisation: the fine-tuning that follows reads it (the run cache's runs were
    made so). ``config``: the study's top-k entity layers and trained blocks (None: every block, all trained)."""
    options = _options(base, name, config)
    torch.manual_seed(seed)
    model = _with_entities(base, options)
    if config is not None and config.trained_top_layers:
        train_top_layers_only(model, config.trained_top_layers)
    return model


def uninitialised_model(base: PreTrainedModel, name: str, config: EntityStudyConfig | None = None) -> EntityLM:
    """The model ``name`` with the base's weights and its own (the entity weights) left as allocated: for a caller
    that reads every weight next (:func:`finetuned_model`, the export's check)."""
    options = _options(base, name, config)
    with no_init_weights():
        model = _with_entities(base, options)
    model.tie_weights()  # part of the initialisation skipped above
    return model


def finetune_config(config: EntityStudyConfig, name: str, seed: int) -> dict:
    """The identity of the fine-tuning run of ``name`` and ``seed`` in the run cache."""
    options = _options(load_base(config).model, name, config)
    return {"stage": "finetune", "model": name, "options": options, "seed": seed,
            **config.finetune_identity(), "lambada_examples": config.lambada_examples}


def train_config(config: EntityStudyConfig, seed: int) -> TrainConfig:
    """The fine-tuning recipe (module docstring, 4): warm-up then constant, the budgets' checkpoints kept."""
    every = min(config.eval_every, config.finetune_steps)
    return TrainConfig(
        max_steps=config.finetune_steps, lr=config.lr, lr_schedule="constant", warmup_steps=config.warmup_steps,
        eval_every=every, checkpoint_every=every, keep_checkpoints=tuple(config.budgets), seed=seed,
        log_every=max(1, every // 10), mixed_precision=config.mixed_precision,
    )


COREF_SCORES = ("test_loss", "test_ppl", "test_loss_no_entities", "test_ppl_no_entities")  # coref_test_scores' keys


def coref_test_scores(model: GPT2E, docs: list[EntityDocument], config: EntityStudyConfig, pad_id: int) -> dict:
    """``test_loss`` / ``test_ppl`` of ``docs`` with their entities; for entity models also with every entity
    id null (``test_loss_no_entities`` / ``test_ppl_no_entities``)."""
    evaluate = dict(seq_len=config.seq_len, batch_size=config.batch_size, pad_id=pad_id)
    loss = entity_stream_loss(model, docs, **evaluate)
    results = {"test_loss": loss, "test_ppl": math.exp(loss)}
    if model.has_entity_layers:
        null = entity_stream_loss(model, without_entities(docs), **evaluate)
        results.update(test_loss_no_entities=null, test_ppl_no_entities=math.exp(null))
    return results


def finetune_run(config: EntityStudyConfig, name: str, seed: int) -> dict:
    """Fine-tune ``name`` from the base with ``seed`` (cached): the best weights' test perplexities and LAMBADA,
    and ``budgets``: each kept checkpoint's step, tokens and test perplexities (the trend)."""
    def fn(run: Run) -> dict:
        base = load_base(config)
        tokenizer, pad_id = base.tokenizer, base.tokenizer.eos_token_id
        positions = context_size(base.model)
        if config.seq_len > positions:
            raise ValueError(f"seq_len={config.seq_len} exceeds the base model's {positions} positions")
        docs = study_documents(config, tokenizer)
        model = initial_model(base.model, name, seed, config)
        task = EntityLMTask(docs["train"], docs["valid"], batch_size=config.batch_size, seq_len=config.seq_len,
                            pad_id=pad_id, seed=seed)

        def evaluate(best: GPT2E) -> dict:
            return {**coref_test_scores(best, docs["test"], config, pad_id),
                    **lambada_scores(best, lambada_examples(tokenizer, config.lambada_examples),
                                     positions, config.batch_size)}

        metrics = train_and_restore(model, task, train_config(config, seed), run, evaluate=evaluate)
        budgets = []
        for step in config.budgets:
            if step == metrics.get("best_step"):  # the best weights are this checkpoint's, scored just above
                scores = {key: metrics[key] for key in COREF_SCORES if key in metrics}
            else:  # the budget's weights into the same model (on the device training used): no new 124M model
                load_model(model, str(kept_checkpoint(run, step) / "model.safetensors"))
                scores = coref_test_scores(model, docs["test"], config, pad_id)
            budgets.append({"step": step, "tokens": step * config.tokens_per_step, **scores})
        log = read_log_records(run.log_path)
        return {**metrics, "budgets": budgets,
                "train_seconds": max((r["train_s"] for r in log if r.get("kind") == "train"), default=0.0),
                "parameters": count_parameters(model),
                "flops_per_token": training_flops_per_token(model.config, config.seq_len),
                "train_docs": len(docs["train"]), "train_tokens": sum(len(d.input_ids) for d in docs["train"])}

    return cached(STUDY, finetune_config(config, name, seed), fn)


def finetuned_model(config: EntityStudyConfig, name: str, seed: int) -> tuple[GPT2E, object]:
    """The fine-tuned model (best weights; trains it if needed) and the tokenizer."""
    finetune_run(config, name, seed)
    base = load_base(config)
    model = uninitialised_model(base.model, name, config)  # every weight is read from the run next (strictly)
    load_weights(model, get_run(STUDY, finetune_config(config, name, seed)), "best")
    device = process_device()  # the probes' forward passes: this process's GPU (cuda:<local rank>) when there is one
    return model.to(device).eval(), base.tokenizer


RUN_COLUMNS = ("test_ppl", "test_ppl_no_entities", "lambada_ppl", "lambada_acc", "best_step", "train_seconds")


def run_rows(config: EntityStudyConfig, names, seeds) -> pd.DataFrame:
    """One row per (model, seed) of ``names`` and ``seeds``: the best weights' scores and the training loss."""
    rows = []
    for seed in seeds:
        for name in names:
            metrics = finetune_run(config, name, seed)
            log = read_log(get_run(STUDY, finetune_config(config, name, seed)))
            train_loss = log[log["kind"] == "train"]["loss"].tail(5).mean()  # the last few logged steps
            rows.append({"model": name, "seed": seed, "train_loss": train_loss, "train_ppl": math.exp(train_loss),
                         "val_loss": metrics["best_val_loss"], "val_ppl": math.exp(metrics["best_val_loss"]),
                         **{key: metrics.get(key, float("nan")) for key in RUN_COLUMNS}})
    return pd.DataFrame(rows)


def perplexity_runs(config: EntityStudyConfig) -> pd.DataFrame:
    """One row per (model, seed) of GPT2 and GPT2E: Tables 2-3 of the best weights (training happens here,
    cached); ``train_loss`` is the mean of the last logged training losses."""
    return run_rows(config, MODELS, config.seeds)


def loss_curves(config: EntityStudyConfig, names=MODELS) -> pd.DataFrame:
    """Training and validation loss per step of every fine-tuning run (model, seed, split, step, loss)."""
    frames = []
    for seed in config.seeds:
        for name in names:
            finetune_run(config, name, seed)
            log = read_log(get_run(STUDY, finetune_config(config, name, seed)))
            train_part = log[log["kind"] == "train"][["step", "loss"]].assign(split="training")
            valid_part = log[log["kind"] == "eval"][["step", "val_loss"]].rename(columns={"val_loss": "loss"})
            frames.append(pd.concat([train_part, valid_part.assign(split="validation")]).assign(model=name, seed=seed))
    return pd.concat(frames, ignore_index=True)


def trend_table(config: EntityStudyConfig) -> pd.DataFrame:
    """One row per (model, seed, budget) of GPT2 and GPT2E: step, tokens, test_ppl (gold entities) and
    test_ppl_no_entities (GPT2E; NaN for GPT2), from each run's kept checkpoints."""
    rows = [{"model": name, "seed": seed, "step": budget["step"], "tokens": budget["tokens"],
             "test_ppl": budget["test_ppl"], "test_ppl_no_entities": budget.get("test_ppl_no_entities", math.nan)}
            for seed in config.seeds for name in MODELS for budget in finetune_run(config, name, seed)["budgets"]]
    return pd.DataFrame(rows)


def ablation_runs(config: EntityStudyConfig) -> pd.DataFrame:
    """One row per (model, seed) of GPT2E and each ablation, over ``ablation_seeds`` (best weights)."""
    return run_rows(config, ("GPT2E", *ABLATIONS), config.ablation_seeds)


def study_run_list(parameters: dict) -> list[list[StudyRun]]:
    """Notebook 02's fine-tuning runs for a second worker (:mod:`lmstudy.second_worker`), one stage in the order the
    notebook trains them: GPT2 and GPT2E of every seed (Tables 2-3), then GPT2E's ablations of every
    ``ablation_seeds`` seed (GPT2E's own runs of those seeds are already among the first). ``parameters``: the
    notebook's."""
    config = EntityStudyConfig(**{key: value for key, value in parameters.items() if key != "scale"})
    models = [(name, seed) for seed in config.seeds for name in MODELS]
    models += [(name, seed) for seed in config.ablation_seeds for name in ("GPT2E", *ABLATIONS)
               if (name, seed) not in models]
    return [[StudyRun(f"{name}, seed {seed}", partial(finetune_run, config, name, seed)) for name, seed in models]]
