"""Krony-PT on a Llama-family model (issue 49: SmolLM2-135M, the first well-trained model we have).

A Llama block's MLP is gated, ``down(silu(gate(x)) * up(x))``, with three bias-free ``nn.Linear``: ``gate_proj`` and
``up_proj`` of shape ``(I, d)`` in the paper's ``(out, in)`` orientation (GPT-2's ``c_fc``) and ``down_proj`` of shape
``(d, I)`` (``c_proj``). :func:`compress_llama` replaces all three by :class:`lmstudy.krony.model.KroneckerLinear`
(``from_linear``; no bias), gate and up with ``A = a_shape``, down with the transposed shape, so the three cost the
same, as GPT-2's two do (:meth:`KroneckerConfig.a_shape_for`). Attention, norms and embeddings stay dense.
``lmstudy.krony.model.decompress`` folds the factors back into ``nn.Linear`` layers (a plain Hugging Face Llama).

**Size classes on SmolLM2** (:func:`llama_classes`). The paper's classes are sizes of GPT-2 small: 96M, 81M and 67M
of 124M parameters (77%, 65%, 54%; :data:`lmstudy.krony.classes.PAPER_RATIOS`). SmolLM2's MLPs are 59% of its
134.5M parameters (GPT-2 small's: 46%), so the paper's factor shapes would remove a different share. Each class
here keeps the paper's *ratio*: among the paper's kind of factor shape, ``B = (r, 1)`` with ``r`` dividing the
MLP width (the paper's 96M and 81M classes are ``B = (2, 1)`` and ``(4, 1)``), and 1 to :data:`MAX_FACTORS` factors
(the most the paper's Table 6 sums), the configuration whose whole model is nearest the paper's ratio; a tie goes to fewer factors, then to the smaller ``r``. :func:`parameter_table` prints the result
beside the paper's Table 1 rows.
"""

from __future__ import annotations

import pandas as pd
import torch
from torch import nn
from tqdm.auto import tqdm
from transformers import LlamaConfig

from lmstudy.krony.classes import CLASSES, PAPER_RATIOS
from lmstudy.llama_size import llama_parameter_count
from lmstudy.krony.model import (
    INITS, LLAMA_MATRICES, KroneckerConfig, KroneckerLinear, factored_parameter_change, partner_shape,
)

MAX_FACTORS = 4
# SmolLM2-135M's dimensions (models/smollm2/config.json): its size classes and shapes without fetching its weights
SMOLLM2_SHAPES = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                             num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                             tie_word_embeddings=True)
PAPER_PARAMETERS = {"96M": 95, "81M": 81, "67M": 67}  # the paper's Table 1 models (millions; GPT-2 small: 124)


def _layers(model: nn.Module):
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None or not all(hasattr(layer, "mlp") for layer in layers):
        raise ValueError(f"compress_llama expects a Llama-family causal LM (with .model.layers[i].mlp), got "
                         f"{type(model).__name__}; for GPT-2 use lmstudy.krony.model.compress")
    return layers


def compress_llama(model: nn.Module, config: KroneckerConfig, init: str = "van_loan", *,
                   generator: torch.Generator | None = None) -> nn.Module:
    """Replace ``gate_proj`` / ``up_proj`` / ``down_proj`` (``config.matrices``, default all three) of every block
    by a ``KroneckerLinear``, in place; returns ``model``. ``init``: ``van_loan`` or ``prune`` (from the current
    weights) or ``random`` (std: the model's ``initializer_range``, Llama's own init)."""
    if init not in INITS:
        raise ValueError(f"unknown init {init!r}; choose one of {', '.join(INITS)}")
    layers = _layers(model)
    matrices = config.matrices if set(config.matrices) <= set(LLAMA_MATRICES) else None
    if matrices is None:
        raise ValueError(f"a Llama MLP's matrices are {LLAMA_MATRICES}; the config names {config.matrices} "
                         "(give matrices=LLAMA_MATRICES)")
    for index, layer in enumerate(layers):  # check every target before touching any
        for matrix in matrices:
            linear = getattr(layer.mlp, matrix)
            if not isinstance(linear, nn.Linear):
                raise ValueError(f"model.layers.{index}.mlp.{matrix} is a {type(linear).__name__}, not a dense "
                                 "nn.Linear: already compressed? (lmstudy.krony.model.decompress gives it back)")
            partner_shape(tuple(linear.weight.shape), config.a_shape_for(matrix))
    std = getattr(model.config, "initializer_range", 0.02)
    for layer in tqdm(layers, desc=f"Kronecker {init} init", leave=False):
        for matrix in matrices:
            factored = KroneckerLinear.from_linear(getattr(layer.mlp, matrix), config.a_shape_for(matrix),
                                                   config.n_factors, config.scalars, init, std=std,
                                                   generator=generator)
            setattr(layer.mlp, matrix, factored)
    return model


@torch.no_grad()
def narrow_mlp(model: nn.Module, inner: int) -> nn.Module:
    """A copy of the Llama ``model`` whose every MLP keeps ``inner`` of its neurons: the dense baselines' start
    (the distilled model trains it with the teacher's soft targets, ``lmstudy.krony.distillation``; the narrowed
    one without). DistilGPT2 starts its student from the teacher's weights, every other layer; here every layer is
    kept and each MLP keeps the neurons with the largest ``|gate_i| |up_i| |down_:,i|`` (the norms of the neuron's
    two input rows and its output column: its weight in the output up to the activation), in their order."""
    import copy

    layers = _layers(model)
    width = model.config.intermediate_size
    if not 1 <= inner <= width:
        raise ValueError(f"inner must be between 1 and the MLP width {width}, got {inner}")
    narrowed = copy.deepcopy(model)
    narrowed.config.intermediate_size = inner
    for layer, source in zip(_layers(narrowed), layers):
        mlp = source.mlp
        if not all(isinstance(getattr(mlp, m), nn.Linear) for m in LLAMA_MATRICES):
            raise ValueError("narrow_mlp needs a dense MLP: decompress the model first")
        score = (mlp.gate_proj.weight.norm(dim=1) * mlp.up_proj.weight.norm(dim=1)
                 * mlp.down_proj.weight.norm(dim=0))  # (I,)
        keep = score.topk(inner).indices.sort().values  # (inner,)
        for matrix, rows in (("gate_proj", True), ("up_proj", True), ("down_proj", False)):
            old = getattr(mlp, matrix)
            weight = old.weight[keep] if rows else old.weight[:, keep]  # (inner, d) / (d, inner)
            new = nn.Linear(weight.shape[1], weight.shape[0], bias=old.bias is not None).to(weight)
            new.weight.copy_(weight)
            if old.bias is not None:
                new.bias.copy_(old.bias[keep] if rows else old.bias)
            setattr(layer.mlp, matrix, new)
    return narrowed


def llama_config(a_shape, n_factors: int = 1, scalars: bool = False) -> KroneckerConfig:
    """A :class:`KroneckerConfig` for all three matrices of a Llama MLP (``a_shape``: gate/up's A, ``(out, in)``)."""
    return KroneckerConfig(a_shape=a_shape, n_factors=n_factors, scalars=scalars, matrices=LLAMA_MATRICES)


# ---------------------------------------------------------------------------------------------------
# parameters


def _mlp_shapes(model_config: LlamaConfig) -> dict[str, tuple[int, int]]:
    d, inner = model_config.hidden_size, model_config.intermediate_size
    return {"gate_proj": (inner, d), "up_proj": (inner, d), "down_proj": (d, inner)}


def llama_compressed_parameter_count(model_config: LlamaConfig, config: KroneckerConfig) -> int:
    """Parameters of ``compress_llama(LlamaForCausalLM(model_config), config)`` from the configs alone."""
    return llama_parameter_count(model_config) + factored_parameter_change(
        _mlp_shapes(model_config), config, model_config.num_hidden_layers)


def matched_llama_inner(model_config: LlamaConfig, target_parameters: int) -> int:
    """The MLP width (``intermediate_size``, 1 .. the model's) whose dense Llama has the parameter count nearest
    ``target_parameters`` (the smaller one on a tie): the dense baselines' size for a class (a narrowed MLP).
    The count is linear in the width: ``3 * d * layers`` parameters a unit."""
    per_unit = 3 * model_config.hidden_size * model_config.num_hidden_layers
    base = llama_parameter_count(model_config) - per_unit * model_config.intermediate_size  # without the MLPs
    low = min(max((target_parameters - base) // per_unit, 1), model_config.intermediate_size)
    candidates = [inner for inner in (low, low + 1) if 1 <= inner <= model_config.intermediate_size]
    return min(candidates, key=lambda inner: (abs(base + per_unit * inner - target_parameters), inner))


def llama_classes(model_config: LlamaConfig) -> dict[str, KroneckerConfig]:
    """The paper's three size classes on this Llama (module docstring: the paper's ratio, B = (r, 1), 1 to
    :data:`MAX_FACTORS` factors)."""
    inner, d = model_config.intermediate_size, model_config.hidden_size
    dense = llama_parameter_count(model_config)
    candidates = [llama_config((inner // r, d), factors) for r in range(2, inner + 1) if inner % r == 0
                  for factors in range(1, MAX_FACTORS + 1)
                  if factors <= min((inner // r) * d, r)]  # no more factors than the rank allows
    chosen = {}
    for name in CLASSES:
        def distance(config: KroneckerConfig) -> tuple:
            ratio = llama_compressed_parameter_count(model_config, config) / dense
            return abs(ratio - PAPER_RATIOS[name]), config.n_factors, inner // config.a_shape[0]
        chosen[name] = min(candidates, key=distance)
    return chosen


def parameter_table(model_config: LlamaConfig) -> pd.DataFrame:
    """One row per class: the paper's GPT-2 model (parameters, share of 124M) beside this Llama's (A and B of
    gate/up, factors, parameters, share of the dense model, share of the MLP kept, and ``dense_inner``: the MLP width
    of the dense model of the same size, the distilled and narrowed baselines')."""
    dense = llama_parameter_count(model_config)
    mlp = 3 * model_config.num_hidden_layers * model_config.hidden_size * model_config.intermediate_size
    rows = []
    for name, config in llama_classes(model_config).items():
        shape = _mlp_shapes(model_config)["gate_proj"]
        compressed = llama_compressed_parameter_count(model_config, config)
        rows.append({"class": name, "paper_parameters_M": PAPER_PARAMETERS[name],
                     "paper_ratio": round(PAPER_RATIOS[name], 4), "a_shape": config.a_shape,
                     "b_shape": partner_shape(shape, config.a_shape), "factors": config.n_factors,
                     "parameters": compressed, "ratio": round(compressed / dense, 4),
                     "mlp_kept": round((compressed - (dense - mlp)) / mlp, 4),
                     "dense_inner": matched_llama_inner(model_config, compressed)})
    return pd.DataFrame(rows)


__all__ = ["MAX_FACTORS", "PAPER_PARAMETERS", "SMOLLM2_SHAPES", "compress_llama", "llama_classes", "llama_compressed_parameter_count",
           "llama_config", "llama_parameter_count", "matched_llama_inner", "narrow_mlp", "parameter_table"]
