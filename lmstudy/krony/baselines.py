"""The Krony study's dense same-size baselines (module docstring of :mod:`lmstudy.krony.runs`): the distilled
student's narrowed initialisation (:func:`narrowed_model`) and the equal-data scratch arm (:func:`scratch_pretraining`,
:func:`scratch_checkpoint`), both of the MLP width matched to ``compare_class`` (:func:`dense_width`)."""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.initialization import no_init_weights

from lmstudy.base import finished_data_run, gpt2_config
from lmstudy.base import run_config as base_run_config
from lmstudy.checkpoints import kept_checkpoint
from lmstudy.krony.bases import shared_base, study_streams
from lmstudy.krony.classes import class_width
from lmstudy.krony.config import STUDY, KronyConfig
from lmstudy.runs import Run, cached, get_run
from lmstudy.tokenization import load_tokenizer
from lmstudy.training import count_parameters, train


def base_model_config(config: KronyConfig) -> GPT2Config:
    """The shared base's GPT-2 config: from its recipe and its data run's tokenizer where that run is built, so the
    scratch arm's pretraining needs no trained base (on a GPU it trains beside the base's own pretraining:
    scripts/gpu_paper_runs.sh); else from the base itself."""
    try:
        tokenizer = load_tokenizer(finished_data_run(config.recipe.data).path / "tokenizer")
    except FileNotFoundError:
        tokenizer = shared_base(config, config.fractions[0]).tokenizer
    return gpt2_config(config.recipe.model, tokenizer)


def dense_width(config: KronyConfig) -> int:
    """The MLP width of the dense baselines: matched to the one-factor Krony model of ``compare_class``."""
    return class_width(base_model_config(config), config.compare_class)


def dense_config(config: KronyConfig) -> GPT2Config:
    """The dense baselines' GPT-2: the base's, with the MLP ``dense_width`` wide."""
    return narrow_config(base_model_config(config), dense_width(config))


def narrow_config(model_config: GPT2Config, n_inner: int) -> GPT2Config:
    """``model_config`` with the MLP hidden size ``n_inner``."""
    return GPT2Config(**{**model_config.to_dict(), "n_inner": n_inner})


def hidden_unit_scores(mlp: torch.nn.Module) -> torch.Tensor:
    """``(inner,)``: each MLP hidden unit's ``||input weights|| * ||output weights||``, how far it can move the
    residual stream for an input of a given size (the magnitude criterion of ``narrowed_model``)."""
    fan_in = mlp.c_fc.weight.detach().norm(dim=0)  # HF Conv1D (d, inner): column j feeds unit j
    fan_out = mlp.c_proj.weight.detach().norm(dim=1)  # (inner, d): row j is what unit j writes back
    return fan_in * fan_out


def _weights_to_load(model_config: GPT2Config) -> GPT2LMHeadModel:
    """A GPT-2 of ``model_config`` whose weights are about to be loaded (strictly): drawing initial ones is skipped
    (seconds for a 100M model), the output matrix tied to the embedding as initialisation would."""
    with no_init_weights():
        model = GPT2LMHeadModel(model_config)
    model.tie_weights()  # part of the initialisation skipped above
    return model


@torch.no_grad()
def narrowed_model(model: GPT2LMHeadModel, n_inner: int) -> GPT2LMHeadModel:
    """A dense copy of ``model`` whose every MLP keeps its ``n_inner`` highest-scoring hidden units
    (``hidden_unit_scores``, in their original order); every other weight is copied as it is."""
    inner = model.config.n_inner or 4 * model.config.n_embd
    if not 1 <= n_inner <= inner:
        raise ValueError(f"n_inner must be between 1 and the model's {inner} hidden units, got {n_inner}")
    state = model.state_dict()
    for index, block in enumerate(model.transformer.h):
        keep = hidden_unit_scores(block.mlp).topk(n_inner).indices.sort().values  # (n_inner,)
        prefix = f"transformer.h.{index}.mlp"
        state[f"{prefix}.c_fc.weight"] = block.mlp.c_fc.weight[:, keep]  # (d, n_inner)
        state[f"{prefix}.c_fc.bias"] = block.mlp.c_fc.bias[keep]  # (n_inner,)
        state[f"{prefix}.c_proj.weight"] = block.mlp.c_proj.weight[keep, :]  # (n_inner, d); c_proj.bias stays
    student = _weights_to_load(narrow_config(model.config, n_inner))
    student.load_state_dict(state)
    return student.to(model.device)


def scratch_pretraining(config: KronyConfig) -> dict:
    """Cached, resumable: the dense model of ``dense_width`` trained from random init with the shared base's exact
    recipe (same stream and windows, batch, schedule, kept checkpoints at the base's kept steps)."""
    recipe = config.recipe

    def fit(run: Run) -> dict:
        train_ids, valid_ids = study_streams(config)
        torch.manual_seed(recipe.seed)  # as lmstudy.base.build_model
        model = GPT2LMHeadModel(dense_config(config))
        if recipe.compile:
            model.compile()  # as the base run: speed only, the weights' names stay GPT-2's
        # The task of lmstudy.base.train_base: the same random windows of the same stream, batch for batch.
        metrics = train(model, recipe.lm_task(train_ids, valid_ids), recipe.train_config(), run)
        return {**metrics, "parameters": count_parameters(model), "n_inner": model.config.n_inner,
                "tokens": metrics["steps"] * recipe.tokens_per_step}

    return cached(STUDY, scratch_identity(config), fit)


def scratch_identity(config: KronyConfig) -> dict:
    """The run-cache identity of the scratch arm's pretraining (also part of every continued scratch run's)."""
    return {"stage": "scratch_pretraining", "recipe": base_run_config(config.recipe), "n_inner": dense_width(config)}


def scratch_checkpoint(config: KronyConfig, fraction: float) -> GPT2LMHeadModel:
    """The scratch model at the base's kept checkpoint ``fraction`` (training it that far first), float16-rounded
    as the shipped base is.

    A kept checkpoint is read as soon as it exists, before the scratch run ends: its weights are those of that
    step whatever follows (checkpoints are written whole, then renamed into place), so while ``lmstudy krony
    scratch`` trains in its own process the study continues from the 10% and 30% checkpoints meanwhile."""
    from safetensors.torch import load_model

    run = get_run(STUDY, scratch_identity(config))
    step = config.recipe.kept_steps()[fraction]
    try:
        folder = kept_checkpoint(run, step)
    except FileNotFoundError:
        scratch_pretraining(config)  # trains it here, or waits for the process that does
        folder = kept_checkpoint(run, step)
    model = _weights_to_load(dense_config(config))
    load_model(model, str(folder / "model.safetensors"))
    return model.to(torch.float16).to(torch.float32).eval()
