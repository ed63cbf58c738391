"""Save a Kronecker-compressed GPT-2 (or Llama: :mod:`lmstudy.krony.llama`) in two forms: a plain dense Hugging Face
folder, or the factored form.

- ``export_dense(model, tokenizer, path)``: every ``KroneckerLinear`` folded back into a dense ``Conv1D``
  (``lmstudy.krony.model.decompress``) and saved with ``save_pretrained``: ``config.json``,
  ``generation_config.json``, ``model.safetensors`` and the tokenizer files. Any Hugging Face tool loads it
  (``AutoModelForCausalLM.from_pretrained(path)``); it has the base model's size and speed.
- ``export_factored(model, tokenizer, path)`` / ``load_factored(path)``: the factors themselves, the small
  form. The folder holds

  - ``config.json`` and ``generation_config.json``: the Hugging Face GPT-2 config of the dense model the
    factors replace (the skeleton ``load_factored`` builds);
  - ``kronecker.json``: which layers are factored, with their ``a_shape``, ``b_shape``, ``n_factors``, whether
    they have per-factor scalars and a bias (a Llama MLP has none; absent: a bias) (``KRONECKER_FILE``, format
    ``FORMAT``);
  - ``kronecker_model.safetensors``: the model's tensors (``a_factors``, ``b_factors``, ``scalars``, the
    biases, attention and embeddings; tied embeddings stored once), nothing pickled;
  - the tokenizer files.

  The weights file is deliberately not called ``model.safetensors``: ``AutoModelForCausalLM`` on this
  folder then fails loudly ("no file named model.safetensors") instead of building a dense GPT-2 with
  randomly initialised MLPs. ``load_factored`` rebuilds the model (``AutoModelForCausalLM`` from the config,
  the listed layers replaced by ``KroneckerLinear`` of the recorded shapes) and loads every tensor
  strictly, so the reloaded model computes the same logits bit for bit.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_model, save_model
from transformers import AutoConfig, AutoModelForCausalLM, GPT2LMHeadModel, GenerationConfig

from lmstudy.krony.model import KroneckerLinear, decompress, kronecker_layers

KRONECKER_FILE = "kronecker.json"
WEIGHTS_FILE = "kronecker_model.safetensors"
FORMAT = "lmstudy-kronecker-gpt2"
FORMAT_VERSION = 1


def export_dense(model: GPT2LMHeadModel, tokenizer, path: str | Path) -> Path:
    """Save ``model`` with its Kronecker factors folded back as a plain Hugging Face GPT-2 folder.

    The folder (``config.json``, ``model.safetensors``, tokenizer files) loads with
    ``AutoModelForCausalLM.from_pretrained(path)``; its logits equal the factored model's to float error.
    ``model`` itself is left as it is. Returns the folder.
    """
    path = Path(path)
    decompress(model).save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return path


def kronecker_layout(model: GPT2LMHeadModel) -> dict:
    """The content of ``kronecker.json`` for ``model``: format, dtype and one entry per ``KroneckerLinear``."""
    layers = [
        {
            "name": name,  # e.g. transformer.h.0.mlp.c_fc
            "in_features": layer.in_features,
            "out_features": layer.out_features,
            "a_shape": list(layer.a_shape),  # the paper's (out, in) orientation (lmstudy.krony.model)
            "b_shape": list(layer.b_shape),
            "n_factors": layer.n_factors,
            "scalars": layer.scalars is not None,
            "bias": layer.bias is not None,
        }
        for name, layer in kronecker_layers(model)
    ]
    if not layers:
        raise ValueError("the model has no KroneckerLinear layer: compress it first, or save it with save_pretrained")
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    return {"format": FORMAT, "version": FORMAT_VERSION, "weights": WEIGHTS_FILE, "dtype": dtype, "layers": layers}


def export_factored(model: GPT2LMHeadModel, tokenizer, path: str | Path) -> Path:
    """Save a compressed model in its factored form (config, ``kronecker.json``, safetensors, tokenizer).

    ``load_factored(path)`` gives the same model back. Returns the folder.
    """
    path = Path(path)
    layout = kronecker_layout(model)  # fails before writing anything if the model is not compressed
    path.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(str(path))
    if model.generation_config is not None:
        model.generation_config.save_pretrained(str(path))
    (path / KRONECKER_FILE).write_text(json.dumps(layout, indent=2) + "\n")
    save_model(model, str(path / WEIGHTS_FILE))  # tied embeddings once; plain tensors, no pickle
    tokenizer.save_pretrained(str(path))
    return path


def load_factored(path: str | Path) -> GPT2LMHeadModel:
    """Load a folder written by ``export_factored``: the compressed model (GPT-2 or Llama), in eval mode.

    The tokenizer is in the same folder: ``AutoTokenizer.from_pretrained(path)``.
    """
    path = Path(path)
    layout = json.loads((path / KRONECKER_FILE).read_text())
    if layout.get("format") != FORMAT or layout.get("version") != FORMAT_VERSION:
        raise ValueError(
            f"{path / KRONECKER_FILE} is not an lmstudy factored model of format {FORMAT} v{FORMAT_VERSION} "
            f"(found {layout.get('format')!r} v{layout.get('version')!r})"
        )
    dtype = getattr(torch, layout["dtype"])
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(path))).to(dtype)
    for entry in layout["layers"]:
        parent_name, _, attribute = entry["name"].rpartition(".")
        layer = KroneckerLinear(
            entry["in_features"], entry["out_features"], tuple(entry["a_shape"]), entry["n_factors"], entry["scalars"],
            bias=entry.get("bias", True),
        ).to(dtype)
        if list(layer.b_shape) != entry["b_shape"]:
            raise ValueError(f"{entry['name']}: b_shape {entry['b_shape']} does not fit a_shape {entry['a_shape']}")
        setattr(model.get_submodule(parent_name), attribute, layer)
    load_model(model, str(path / layout["weights"]), strict=True)  # every tensor present, none left over
    if (path / "generation_config.json").exists():
        model.generation_config = GenerationConfig.from_pretrained(str(path))
    return model.eval()
