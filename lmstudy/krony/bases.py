"""The Krony study's view of the shared base: its checkpoints (a private copy of each model) and its training and
validation streams, each loaded once per process, and the device the study runs on."""

from __future__ import annotations

import copy
import functools
import json

import torch

from lmstudy.base import StudyBase, base_streams, checkpoint_identity, loaded_study_base
from lmstudy.krony.config import KronyConfig


def _overrides(config: KronyConfig) -> str:
    """``config.base_overrides`` as a cache key (JSON, sorted)."""
    return json.dumps(config.base_overrides, sort_keys=True)


def load_base(config: KronyConfig, fraction: float) -> StudyBase:
    """The base checkpoint ``fraction`` of ``config.base_scale``, with a private copy of its model."""
    base = shared_base(config, fraction)
    return StudyBase(model=copy.deepcopy(base.model), tokenizer=base.tokenizer, name=base.name,
                     fraction=base.fraction, tokens=base.tokens, identity=base.identity)


def shared_base(config: KronyConfig, fraction: float) -> StudyBase:
    """The shared base checkpoint ``fraction`` of ``config`` (its scale and overrides), loaded once per process."""
    return loaded_study_base(config.base_scale, fraction, config.base_overrides)


def base_checkpoint(config: KronyConfig, fraction: float) -> tuple[dict, int]:
    """The identity and training tokens of the base checkpoint ``fraction``, without loading it."""
    return checkpoint_identity(config.base_scale, fraction, config.base_overrides)


def study_streams(config: KronyConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """The training and validation streams of ``config``'s shared base, read once per process."""
    return _streams(config.base_scale, _overrides(config))


@functools.lru_cache(maxsize=1)
def _streams(scale: str, overrides: str = "{}") -> tuple[torch.Tensor, torch.Tensor]:
    return base_streams(scale, overrides=json.loads(overrides))  # ~0.9 GB of int64 at cpu scale: read once


def study_device() -> torch.device:
    """Where the study scores its models: the GPU when there is one."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
