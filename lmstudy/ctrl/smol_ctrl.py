"""A control-code model as a small delta over a fetched pretrained model (issue 48: a small CTRL from SmolLM2).

The idea: SmolLM2-135M (``models/smollm2``, :mod:`lmstudy.pretrained_fetch`) already writes fluent English; CTRL's
recipe (a domain code first, then the domain's text: :mod:`lmstudy.ctrl.data`) only has to teach it the codes.
So the trained model is kept as what changed, not as a second copy of 135M weights:

- **Codes as new tokens.** The 21 codes are added to SmolLM2's tokenizer as special tokens and its embedding grows
  by 21 rows (:func:`lmstudy.ctrl.codes.with_codes`; SmolLM2's input and output embeddings are tied,
  so each code row is also its output row).
- **LoRA + the code rows** (:func:`with_lora`): peft's LoRA (rank ``r``) on the attention (q/k/v/o) and MLP
  (gate/up/down) projections, and peft's ``trainable_token_indices`` on the code ids: a trainable delta for those
  21 rows only, added onto the frozen 49,152 x 576 embedding (and, tied, onto the output layer). Every other weight
  is frozen. Before training the adapter is exactly zero (LoRA's B starts at zero, the token delta too): the model
  is SmolLM2 with 21 extra tokens.
- **Saved small** (:func:`save_delta_model`): a folder with ``adapter.safetensors`` (the LoRA matrices),
  ``code_embeddings.safetensors`` (the code rows as trained, with their token ids), ``smol_ctrl.json`` (the base
  model's name and its fetch hashes from ``lmstudy_fetch.json``, the LoRA settings, the codes and the tokenizer's
  added tokens with their ids) and ``control_codes.json`` (codes + mixture, as every control-code model).
  Safetensors only, never pickle. On SmolLM2 at rank 8: 2,442,240 LoRA parameters + 21 x 576 code rows,
  9.8 MB in float32 (the base is 538 MB).
- **Loaded onto the fetched base** (:func:`load_delta_model`, which :func:`lmstudy.ctrl.model.load_control_model`
  dispatches to when ``smol_ctrl.json`` is there): the base's hashes are checked against the record, the codes
  added with the recorded ids, the code rows written, the LoRA loaded and merged into the weights (no adapter
  overhead at inference), giving the same :class:`~lmstudy.ctrl.model.ControlModel` as a full checkpoint.

LoRA or full fine-tuning, per CPU-hour (``benchmarks/bench_smol_ctrl.py``, ``figures/04_smol_ctrl_lora_vs_full.csv``;
SmolLM2 + 21 codes, 30 steps of 4 x 256 coded tokens, 2 torch threads, bfloat16 autocast, this 2-core machine):

    ====================  =========  ========  ==========  ====================  ==========================
    method                trainable  tokens/s  s / step    train loss, last 5    loss on 4 fresh batches
    ====================  =========  ========  ==========  ====================  ==========================
    LoRA r=8 + code rows  2.45M      450       2.28        3.404                 3.771
    full fine-tuning      134.5M     463       2.21        3.379                 3.747
    LoRA, codes frozen    2.44M      596       1.72        3.414                 3.774
    ====================  =========  ========  ==========  ====================  ==========================

(an earlier run of the first two, also alone on the machine: 496 and 461 tokens/s; a run with other work beside
it gave 236 and 359, discarded.) Per CPU-hour the two are a tie within run-to-run noise, full fine-tuning 0.025
nats ahead after 30 steps (one seed, learning rates not tuned: 2e-3 LoRA, 1e-4 full). **Decision: LoRA + code
rows**, because it is not slower, its result is a 9.8 MB delta where full fine-tuning's is the whole 269 MB
(bfloat16) model (the issue's bound is 30 MB in git), and the base stays SmolLM2. Why LoRA is not faster: peft's
``trainable_token_indices`` materialises the whole tied 49,152 x 576 matrix with the code rows swapped in, twice
per step, and backpropagates a full gradient into it; with the codes frozen LoRA runs 1.3x faster (596 tokens/s):
an adapter that scores the 21 code rows apart from the frozen matrix is the next speed-up to make.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from typing import NamedTuple

from lmstudy.ctrl.codes import CODES_FILE, code_token, with_codes, write_code_record
from lmstudy.pretrained import load_pretrained, pretrained_record
from lmstudy.pretrained_fetch import FETCH_RECORD, HASH_KEYS

DELTA_RECORD = "smol_ctrl.json"
ADAPTER_FILE = "adapter.safetensors"
CODE_ROWS_FILE = "code_embeddings.safetensors"
LLAMA_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LoraSettings:
    """peft LoRA on ``targets`` of every block (the code rows are always trainable too)."""

    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    targets: tuple[str, ...] = LLAMA_PROJECTIONS

    def peft_config(self, code_ids: list[int] | None = None):
        """peft's ``LoraConfig`` of these settings, with ``code_ids`` as trainable token rows (None: none)."""
        from peft import LoraConfig

        return LoraConfig(r=self.r, lora_alpha=self.alpha, lora_dropout=self.dropout,
                          target_modules=list(self.targets), bias="none", task_type="CAUSAL_LM",
                          trainable_token_indices=list(code_ids) if code_ids else None)


def code_ids_of(tokenizer, codes: list[str]) -> list[int]:
    """The token ids of ``codes`` (each one special token)."""
    return [int(tokenizer.convert_tokens_to_ids(code_token(name))) for name in codes]


def base_with_codes(base: str, codes: list[str]):
    """``(model, tokenizer)``: the pretrained ``base`` (a fetched name such as ``smollm2``, or a folder) with the
    code tokens added as special tokens and the embedding grown to match (float32, train mode)."""
    model, tokenizer, _ = load_pretrained(base)
    return with_codes(model, tokenizer, codes)


class DeltaModel(NamedTuple):
    """A loaded delta model's parts, in :class:`lmstudy.ctrl.model.ControlModel`'s order."""

    model: torch.nn.Module
    tokenizer: object
    codes: list[str]
    mixture: dict[str, float]


def with_lora(model, code_ids: list[int], settings: LoraSettings = LoraSettings()):
    """``model`` wrapped by peft: LoRA on ``settings.targets`` plus trainable rows ``code_ids`` of the (tied)
    embedding; nothing else trainable (module docstring)."""
    from peft import get_peft_model

    return get_peft_model(model, settings.peft_config(code_ids))


def trainable_parameters(model) -> dict[str, int]:
    """``{name: numel}`` of the parameters that get gradients."""
    return {name: p.numel() for name, p in model.named_parameters() if p.requires_grad}


def save_delta_model(peft_model, tokenizer, base: str, codes: list[str], mixture: dict[str, float],
                     settings: LoraSettings, path: str | Path) -> Path:
    """Write the adapter, the code rows and the records into ``path`` (module docstring); returns ``path``."""
    from peft import get_peft_model_state_dict

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    state = get_peft_model_state_dict(peft_model)
    lora = {key: value.detach().float().cpu().contiguous() for key, value in state.items() if "lora_" in key}
    if not lora:
        raise ValueError("the model has no LoRA weights: wrap it with with_lora first")
    save_file(lora, path / ADAPTER_FILE)
    ids = code_ids_of(tokenizer, codes)
    with torch.no_grad():  # the rows as the model uses them (base row + trained delta)
        embedding = peft_model.get_input_embeddings()
        weight_device = next(peft_model.parameters()).device
        rows = embedding(torch.tensor(ids, device=weight_device)).float().cpu().contiguous()
    save_file({"rows": rows, "token_ids": torch.tensor(ids, dtype=torch.long)}, path / CODE_ROWS_FILE)
    added = {token: int(index) for token, index in tokenizer.get_added_vocab().items()
             if token in {code_token(name) for name in codes}}
    record = {"base": pretrained_record(base), "lora": {**asdict(settings), "targets": list(settings.targets)},
              "codes": list(codes), "added_tokens": added, "vocab_size": len(tokenizer)}
    (path / DELTA_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    write_code_record(path, mixture)
    return path


def read_delta_record(path: str | Path) -> dict:
    """The ``smol_ctrl.json`` record of a delta folder (base, LoRA settings, codes, added tokens)."""
    return json.loads((Path(path) / DELTA_RECORD).read_text(encoding="utf-8"))


def load_delta_model(path: str | Path, device: str | torch.device | None = None, base: str | None = None,
                     merge: bool = True) -> DeltaModel:
    """The model of a folder written by :func:`save_delta_model`: its base (``base``: another name or folder for
    it; default the recorded one, whose fetch hashes must match the record), the codes with the recorded ids,
    the code rows, the LoRA merged in (``merge=False``: left as a peft model, e.g. to train on). float32, eval."""
    from peft import get_peft_model, set_peft_model_state_dict

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    path = Path(path)
    record = read_delta_record(path)
    info = json.loads((path / CODES_FILE).read_text(encoding="utf-8"))
    base_name = base or record["base"]["name"]
    found = pretrained_record(base_name)
    for key in HASH_KEYS:
        if key in record["base"] and found.get(key) != record["base"][key]:
            raise ValueError(f"{path} was trained on a base with {key}={record['base'][key]}, but {base_name} has "
                             f"{found.get(key)}: fetch the recorded base (python -m lmstudy models fetch "
                             f"{record['base']['name']})")
    codes = list(record["codes"])
    model, tokenizer = base_with_codes(base_name, codes)
    got = {token: int(tokenizer.convert_tokens_to_ids(token)) for token in record["added_tokens"]}
    if got != record["added_tokens"] or len(tokenizer) != record["vocab_size"]:
        raise ValueError(f"the base tokenizer gives the codes other ids than at training ({got} vs "
                         f"{record['added_tokens']}): {base_name} is not the model {path} was trained on")
    rows = load_file(path / CODE_ROWS_FILE)
    with torch.no_grad():
        model.get_input_embeddings().weight[rows["token_ids"]] = rows["rows"]
    settings = LoraSettings(**{**record["lora"], "targets": tuple(record["lora"]["targets"])})
    peft_model = get_peft_model(model, settings.peft_config())
    result = set_peft_model_state_dict(peft_model, load_file(path / ADAPTER_FILE))
    missing = [key for key in result.missing_keys if "lora_" in key]
    if missing or result.unexpected_keys:
        raise ValueError(f"{path / ADAPTER_FILE} does not fit the base: missing {missing[:3]}, unexpected "
                         f"{list(result.unexpected_keys)[:3]}")
    # merged: a plain model, every weight trainable again (as load_control_model's full checkpoints are)
    loaded = peft_model.merge_and_unload().requires_grad_(True) if merge else peft_model
    loaded.to(device).eval()
    return DeltaModel(loaded, tokenizer, list(info["codes"]), dict(info["mixture"]))


def fit_delta(config, texts, run, settings: LoraSettings = LoraSettings()) -> dict:
    """:func:`lmstudy.ctrl.model.fit` for a delta model: ``config.init_from`` (e.g. ``smollm2``) + the codes of
    ``texts``, LoRA + code rows (:func:`with_lora`), trained by the shared loop (``training.train_and_restore``) on
    the coded mixture (``data.MixtureTask``); saves :func:`save_delta_model` into ``run.path/"model"``."""
    from lmstudy.ctrl.data import build_task
    from lmstudy.training import train_and_restore

    if not config.init_from:
        raise ValueError("a delta model starts from a pretrained model: set init_from (e.g. smollm2)")
    model, tokenizer = base_with_codes(config.init_from, texts.codes)
    peft_model = with_lora(model, code_ids_of(tokenizer, texts.codes), settings)
    task = build_task(texts, tokenizer, config.batch_size, config.seq_len, config.mixture, seed=config.seed)
    metrics = train_and_restore(peft_model, task, config.train_config(), run)
    save_delta_model(peft_model, tokenizer, config.init_from, texts.codes, task.weights, settings,
                     run.path / "model")
    return {**metrics, "trainable_parameters": sum(trainable_parameters(peft_model).values()),
            "train_tokens": {name: int(ids.numel()) for name, ids in task.train_streams.items()},
            "mixture": task.weights}


__all__ = ["ADAPTER_FILE", "CODE_ROWS_FILE", "DELTA_RECORD", "DeltaModel", "LLAMA_PROJECTIONS", "LoraSettings",
           "base_with_codes", "code_ids_of", "fit_delta", "load_delta_model", "read_delta_record",
           "save_delta_model", "trainable_parameters", "with_lora"]
