"""The files of a training run's weights and checkpoints: what ``lmstudy.training``'s loop writes and reads back.

Decisions (the loop decides *when* to write; this module decides *how*):

- A checkpoint (``run.checkpoint_dir/step-NNNNNNNNN/``) holds ``model.safetensors`` (written by
  ``safetensors.torch.save_model``, which copes with tied weights; :func:`save_model_file` also with a GPU's
  cuDNN-flattened LSTM weights), ``state.safetensors`` (every tensor of the optimizer state, the torch RNG states
  and the carry) and ``state.json`` (all the rest: the caller's record, the optimizer class and hyperparameters,
  python/numpy RNG states). Nothing is ever unpickled: nested state is written as JSON whose tensors are
  ``{"__tensor__": key}`` references into ``state.safetensors`` (:func:`_pack`).
- A checkpoint is written into a temp folder and renamed into place, then older ones are deleted (but those of
  the steps asked to be kept), so the latest complete checkpoint always exists; ``state.json`` is written last,
  so a folder is complete when it has one.
- The optimizer is recorded by class name (``torch.optim`` only), hyperparameters and the names of its
  parameters, so it is rebuilt on a fresh model; a checkpoint without one (``optimizer=None``) is allowed.
- With several processes, every process's RNG states and carry are kept: the main process's where one-process
  checkpoints keep them, the others under ``other_ranks``. A checkpoint records how many processes wrote it and
  is resumed by as many.
- The best weights live in ``run.best_dir/model.safetensors``, replaced atomically.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from lmstudy.runs import Run

CHECKPOINT_FORMAT = 1


# --------------------------------------------------------------------------------------------
# JSON + safetensors serialisation of nested state (optimizer state_dict, RNG states, carry)


def _pack(obj: Any, tensors: dict[str, torch.Tensor], key: str) -> Any:
    """JSON-able form of ``obj``; its tensors go into ``tensors`` under dotted keys."""
    if isinstance(obj, torch.Tensor):
        tensor = obj.detach().to("cpu")
        whole = tensor.is_contiguous() and tensor.storage_offset() == 0 and (
            tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size())
        # safetensors refuses tensors that share storage (views): those are copied. A tensor that is its whole
        # storage (optimizer moments) is written as it is: copying AdamW's state of GPT-2 small took 2 s.
        tensors[key] = tensor if whole else tensor.clone().contiguous()
        return {"__tensor__": key}
    if isinstance(obj, tuple):
        return {"__tuple__": [_pack(v, tensors, f"{key}.{i}") for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [_pack(v, tensors, f"{key}.{i}") for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {k: _pack(v, tensors, f"{key}.{k}") for k, v in obj.items()}
        if all(isinstance(k, int) for k in obj):  # optimizer state is keyed by parameter index
            return {"__intkeys__": {str(k): _pack(v, tensors, f"{key}.{k}") for k, v in obj.items()}}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot checkpoint {type(obj).__name__} at {key!r}: use tensors, numbers, "
                    "strings and (nested) lists, tuples or dicts of them")


def _unpack(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(obj, list):
        return [_unpack(v, tensors) for v in obj]
    if isinstance(obj, dict):
        if "__tensor__" in obj:
            return tensors[obj["__tensor__"]]
        if "__tuple__" in obj:
            return tuple(_unpack(v, tensors) for v in obj["__tuple__"])
        if "__intkeys__" in obj:
            return {int(k): _unpack(v, tensors) for k, v in obj["__intkeys__"].items()}
        return {k: _unpack(v, tensors) for k, v in obj.items()}
    return obj


def _pack_optimizer(optimizer: torch.optim.Optimizer, model: torch.nn.Module, tensors: dict) -> dict:
    cls = type(optimizer)
    if getattr(torch.optim, cls.__name__, None) is not cls:
        raise TypeError(f"only torch.optim optimizers can be checkpointed, got {cls.__module__}.{cls.__name__}")
    names = {id(p): name for name, p in model.named_parameters()}
    param_names = []
    for group in optimizer.param_groups:
        missing = [p.shape for p in group["params"] if id(p) not in names]
        if missing:
            raise ValueError(f"the optimizer holds parameters that are not the model's (shapes {missing})")
        param_names.append([names[id(p)] for p in group["params"]])
    return {
        "class": cls.__name__,
        # Parameters are recorded by name so the optimizer can be rebuilt on a fresh model.
        "param_names": param_names,
        "defaults": _pack(optimizer.defaults, tensors, "optimizer_defaults"),
        "state_dict": _pack(optimizer.state_dict(), tensors, "optimizer"),
    }


def _unpack_optimizer(info: dict, model: torch.nn.Module, tensors: dict) -> torch.optim.Optimizer:
    cls = getattr(torch.optim, info["class"], None)
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        raise ValueError(f"checkpoint names an unknown optimizer class {info['class']!r}")
    params = dict(model.named_parameters())
    groups = [{"params": [params[name] for name in names]} for names in info["param_names"]]
    # defaults also hold flags the constructor does not take (AdamW's decoupled_weight_decay).
    accepted = inspect.signature(cls.__init__).parameters
    defaults = {k: v for k, v in _unpack(info["defaults"], tensors).items() if k in accepted and k != "params"}
    optimizer = cls(groups, **defaults)
    optimizer.load_state_dict(_unpack(info["state_dict"], tensors))  # all hyperparameters and state
    return optimizer


def rng_state() -> dict:
    """This process's python, numpy, torch and CUDA RNG states (plain objects, CPU tensors)."""
    return {"python": random.getstate(), "numpy": np.random.get_state(legacy=True),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def _pack_rng(rng: dict, tensors: dict, prefix: str = "rng") -> dict:
    tensors[f"{prefix}.torch"] = rng["torch"]
    for i, state in enumerate(rng["cuda"]):
        tensors[f"{prefix}.cuda.{i}"] = state
    name, keys, pos, has_gauss, cached_gaussian = rng["numpy"]
    return {
        "python": _pack(rng["python"], tensors, f"{prefix}.python"),
        "numpy": [name, keys.tolist(), pos, has_gauss, cached_gaussian],
        "cuda_devices": len(rng["cuda"]),
    }


def _unpack_rng(info: dict, tensors: dict, prefix: str = "rng") -> None:
    random.setstate(_unpack(info["python"], tensors))
    name, keys, pos, has_gauss, cached_gaussian = info["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached_gaussian))
    torch.set_rng_state(tensors[f"{prefix}.torch"])
    if info["cuda_devices"] and torch.cuda.is_available() and torch.cuda.device_count() == info["cuda_devices"]:
        torch.cuda.set_rng_state_all([tensors[f"{prefix}.cuda.{i}"] for i in range(info["cuda_devices"])])


# --------------------------------------------------------------------------------------------
# checkpoints


def latest_checkpoint(run: Run) -> Path | None:
    """The newest complete checkpoint folder of ``run`` (temp folders are never complete)."""
    if not run.checkpoint_dir.is_dir():
        return None
    complete = [p for p in run.checkpoint_dir.glob("step-*") if (p / "state.json").is_file()]
    return max(complete, key=lambda p: int(p.name.split("-")[1]), default=None)


def kept_checkpoint(run: Run, step: int) -> Path:
    """The folder of the checkpoint at ``step`` (kept when ``step`` is in ``TrainConfig.keep_checkpoints``)."""
    path = run.checkpoint_dir / f"step-{step:09d}"
    if not (path / "state.json").is_file():
        raise FileNotFoundError(f"run {run.path} has no checkpoint at step {step}: train it that far first")
    return path


def save_checkpoint(run: Run, model, optimizer: torch.optim.Optimizer | None, step: int, record: dict,
                    ranks: list[dict], keep_steps: tuple[int, ...] = ()) -> Path:
    """Write the checkpoint of ``step`` and delete older ones (but those of ``keep_steps``).

    ``record``: the caller's JSON-able fields of ``state.json`` (the loop's ``train_state`` and ``train_config``);
    ``optimizer``: None for none (a finished run's); ``ranks``: every process's ``{"rng": rng_state(),
    "carry": ...}``, the main process's first.
    """
    run.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=run.checkpoint_dir, prefix=".tmp-"))
    tensors: dict[str, torch.Tensor] = {}
    payload = {
        "format": CHECKPOINT_FORMAT,
        **record,
        "optimizer": None if optimizer is None else _pack_optimizer(optimizer, model, tensors),
        # The main process's RNG and carry where one-process checkpoints have always kept them.
        "rng": _pack_rng(ranks[0]["rng"], tensors),
        "carry": _pack(ranks[0]["carry"], tensors, "carry"),
    }
    if len(ranks) > 1:
        payload["processes"] = len(ranks)
        payload["other_ranks"] = [
            {"rng": _pack_rng(r["rng"], tensors, f"rank{i}.rng"), "carry": _pack(r["carry"], tensors, f"rank{i}.carry")}
            for i, r in enumerate(ranks[1:], start=1)
        ]
    save_model_file(model, tmp / "model.safetensors")
    save_file(tensors, str(tmp / "state.safetensors"))
    # state.json last: a folder is complete when it has one (see latest_checkpoint).
    (tmp / "state.json").write_text(json.dumps(payload), encoding="utf-8")
    final = run.checkpoint_dir / f"step-{step:09d}"
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)  # atomic: the checkpoint appears complete or not at all
    kept = {f"step-{kept_step:09d}" for kept_step in keep_steps}
    for old in run.checkpoint_dir.iterdir():
        if old != final and old.is_dir() and not old.name.startswith(".tmp-") and old.name not in kept:
            shutil.rmtree(old, ignore_errors=True)
    return final


def read_checkpoint(path: Path, processes: int = 1) -> dict:
    """The ``state.json`` of the checkpoint at ``path``, once its format and number of processes are checked
    (before anything is restored: a refused checkpoint leaves the model as it was)."""
    payload = json.loads((path / "state.json").read_text(encoding="utf-8"))
    if payload.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"checkpoint {path} has format {payload.get('format')!r}, expected {CHECKPOINT_FORMAT}")
    written_by = payload.get("processes", 1)
    if written_by != processes:
        raise ValueError(
            f"checkpoint {path} was written by {written_by} process(es), this is {processes}: resume it with "
            f"{written_by} (accelerate launch --num_processes {written_by}) or start a new run"
        )
    return payload


def restore_checkpoint(path: Path, payload: dict, model, rank: int = 0):
    """Load the checkpoint's weights into ``model`` and process ``rank``'s RNG states; returns (the optimizer,
    or None when the checkpoint has none, the carry of ``rank``). ``payload``: :func:`read_checkpoint`'s."""
    tensors = load_file(str(path / "state.safetensors"))
    load_model_file(model, path / "model.safetensors")
    optimizer = None if payload["optimizer"] is None else _unpack_optimizer(payload["optimizer"], model, tensors)
    mine = payload if rank == 0 else payload["other_ranks"][rank - 1]
    _unpack_rng(mine["rng"], tensors, "rng" if rank == 0 else f"rank{rank}.rng")
    return optimizer, _unpack(mine["carry"], tensors)


@contextlib.contextmanager
def _rnn_weights_apart(model: torch.nn.Module):
    """On a GPU, cuDNN keeps an ``nn.LSTM``'s weights as views into one flat buffer (``flatten_parameters``), a
    storage that none of them covers whole, and safetensors' ``save_model`` / ``load_model`` refuse it ("None is
    covering the entire storage": the NER probe's tagger, the first time it trained on a GPU). Inside this context
    every RNN weight is a tensor of its own (a copy; the same Parameter objects, so an optimizer's state still
    applies); after it, cuDNN's flat buffer is rebuilt (``flatten_parameters`` is a no-op off the GPU)."""
    rnns = [module for module in model.modules() if isinstance(module, torch.nn.RNNBase)]
    with torch.no_grad():
        for rnn in rnns:
            for weight in rnn.parameters(recurse=False):
                weight.data = weight.data.clone()
    try:
        yield
    finally:
        for rnn in rnns:
            rnn.flatten_parameters()


def _adapter_only(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a frozen base plus an adapter (a peft model): its weight files then hold the trainable
    tensors alone (the base is rebuilt from its own source at every load; on SmolLM2 + LoRA r8: 2.5M of 137M
    parameters, 10 MB instead of 523 MB a checkpoint, so an unfinished run can be archived and committed)."""
    return getattr(model, "peft_config", None) is not None


def _trainable(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def save_model_file(model: torch.nn.Module, path: Path, metadata: dict[str, str] | None = None) -> None:
    """``safetensors.torch.save_model`` (tied weights stored once, no pickle), for RNNs on a GPU too; an adapter
    model's trainable tensors alone (:func:`_adapter_only`)."""
    if _adapter_only(model):
        tensors = {name: p.detach().contiguous() for name, p in _trainable(model).items()}
        save_file(tensors, str(path), metadata=metadata)
        return
    with _rnn_weights_apart(model):
        save_model(model, str(path), metadata=metadata)


def load_model_file(model: torch.nn.Module, path: Path) -> None:
    """``safetensors.torch.load_model`` (strict: every tensor present, none left over), for RNNs on a GPU too; an
    adapter model's trainable tensors alone, also strictly."""
    if _adapter_only(model):
        tensors, expected = load_file(str(path)), set(_trainable(model))
        if set(tensors) != expected:
            raise ValueError(f"{path} does not hold this adapter model's trainable tensors: missing "
                             f"{sorted(expected - set(tensors))[:3]}, unexpected {sorted(set(tensors) - expected)[:3]}")
        model.load_state_dict(tensors, strict=False)
        return
    with _rnn_weights_apart(model):
        load_model(model, str(path))


def save_best(run: Run, model, metadata: dict[str, str]) -> None:
    """Write ``model``'s weights as the run's best (``run.best_dir/model.safetensors``), atomically: a reader finds
    the old best or the new one."""
    run.best_dir.mkdir(parents=True, exist_ok=True)
    tmp = run.best_dir / f".model.{os.getpid()}.tmp"
    try:
        save_model_file(model, tmp, metadata=metadata)
        os.replace(tmp, run.best_dir / "model.safetensors")  # atomic: old best or new best
    finally:
        tmp.unlink(missing_ok=True)


def load_weights(model: torch.nn.Module, run: Run, which: str = "best") -> torch.nn.Module:
    """Load a run's trained weights into ``model``: ``"best"`` (lowest validation metric) or ``"last"``."""
    if which == "best":
        path = run.best_dir / "model.safetensors"
        if not path.is_file():
            raise FileNotFoundError(
                f"run {run.path} has no best weights ({path}): its evaluations never reported the "
                "early-stopping metric; use which='last'"
            )
    elif which == "last":
        checkpoint = latest_checkpoint(run)
        if checkpoint is None:
            raise FileNotFoundError(f"run {run.path} has no checkpoint yet: train it first")
        path = checkpoint / "model.safetensors"
    else:
        raise ValueError(f"which must be 'best' or 'last', got {which!r}")
    load_model_file(model, path)
    return model
