"""Checks of code paths that only a GPU reaches (CI's CPU cannot): run on a GPU machine from the repository root,
``PYTHONPATH=. python3 scripts/gpu_checks.py``. Each prints one line; results/gpu/2026-11-26/lstm_check.txt is its
output on an H200.

- cuDNN keeps an ``nn.LSTM``'s weights as views into one flat buffer, which safetensors' ``save_model`` refuses (the
  NER probe's tagger crashed there on that lease); the training loop's ``save_model_file`` / ``load_model_file``
  save and reload it, and the reloaded LSTM is flat again (no "not part of single contiguous chunk" warning).
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import torch
from safetensors.torch import save_model
from torch import nn

from lmstudy.checkpoints import load_model_file, save_model_file


def check_flattened_lstm() -> None:
    torch.manual_seed(0)
    tagger = nn.Sequential(nn.Embedding(10, 4), nn.LSTM(4, 6, batch_first=True)).cuda()
    x = torch.randint(0, 10, (2, 5), device="cuda")
    out = tagger[1](tagger[0](x))[0]
    folder = Path(tempfile.mkdtemp())
    try:
        save_model(tagger, str(folder / "refused.safetensors"))
        print("plain save_model: accepted")
    except RuntimeError as error:
        print("plain save_model refused:", str(error)[:90])
    save_model_file(tagger, folder / "m.safetensors")
    other = nn.Sequential(nn.Embedding(10, 4), nn.LSTM(4, 6, batch_first=True)).cuda()
    load_model_file(other, folder / "m.safetensors")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = other[1](other[0](x))[0]
    print("reloaded output equal:", torch.equal(out, again), "| warnings:", [str(w.message)[:60] for w in caught])
    print("flat again (one storage):", len({w.untyped_storage().data_ptr() for w in other[1].parameters()}) == 1)


if __name__ == "__main__":
    if not torch.cuda.is_available():
        raise SystemExit("gpu_checks: no CUDA device visible to torch: run it on a GPU machine")
    check_flattened_lstm()
