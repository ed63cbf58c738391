"""A trained model as a Hugging Face folder beside its run record: the one exporter of lmstudy.

Every exported model (the shared base's checkpoints, ``lmstudy.base``; the CTRL demo model, ``lmstudy.ctrl.model``;
the entity study's model) is a folder that transformers loads as it is, plus what lmstudy knows about the run:

- ``save_pretrained`` of the model (``model.safetensors`` + ``config.json``, + ``generation_config.json`` for a
  causal LM) and of the tokenizer;
- ``lmstudy_run.json`` (:data:`RUN_RECORD`): the caller's run record (which run and step, config, metrics, log),
  written with :func:`lmstudy.runs.atomic_write_json` (sorted keys, atomic), read back by :func:`read_run_record`;
- optionally ``README.md``, a model card whose text the caller writes (:func:`write_model_card`).

Decisions: ``dtype`` saves a half-precision *copy* (``"float16"`` / ``"bfloat16"``: a committed checkpoint half the
size); the caller's model keeps its weights and precision. The caller decides what the record and the card say;
this module only decides the files.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch

from lmstudy.runs import atomic_write_json

RUN_RECORD = "lmstudy_run.json"
CARD = "README.md"
HALF_PRECISION = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def save_folder(model, tokenizer, path: str | Path, dtype: str | None = None) -> Path:
    """``save_pretrained`` ``model`` (safetensors) and ``tokenizer`` into ``path`` (created); ``dtype``:
    ``"float16"`` / ``"bfloat16"`` saves a copy in that precision, None the model as it is. Returns ``path``."""
    path = Path(path)
    if dtype is not None:
        if dtype not in HALF_PRECISION:
            raise ValueError(f"dtype {dtype!r} is not one of {sorted(HALF_PRECISION)} (or None for the model's own)")
        model = copy.deepcopy(model).to(HALF_PRECISION[dtype])
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path))  # safetensors: the only format transformers writes
    tokenizer.save_pretrained(str(path))
    return path


def write_run_record(path: str | Path, record: dict) -> None:
    """Write ``record`` as the folder's ``lmstudy_run.json``."""
    atomic_write_json(Path(path) / RUN_RECORD, record)


def read_run_record(path: str | Path) -> dict | None:
    """The folder's run record, or None when it has none (not exported by lmstudy, or not yet)."""
    record_path = Path(path) / RUN_RECORD
    if not record_path.is_file():
        return None
    return json.loads(record_path.read_text(encoding="utf-8"))


def write_model_card(path: str | Path, card: str) -> None:
    """Write ``card`` (Markdown, front matter included) as the folder's ``README.md``."""
    (Path(path) / CARD).write_text(card, encoding="utf-8")


def export_folder(model, tokenizer, path: str | Path, record: dict, card: str | None = None,
                  dtype: str | None = None) -> Path:
    """The whole export: :func:`save_folder` (model and tokenizer, ``dtype`` as there), the run ``record`` as
    ``lmstudy_run.json`` and, when given, the model ``card`` as ``README.md``. Returns ``path``."""
    path = save_folder(model, tokenizer, path, dtype)
    write_run_record(path, record)
    if card is not None:
        write_model_card(path, card)
    return path


__all__ = ["CARD", "RUN_RECORD", "export_folder", "read_run_record", "save_folder", "write_model_card",
           "write_run_record"]
