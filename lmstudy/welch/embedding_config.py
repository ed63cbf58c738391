"""The 20 embedding configurations of Welch et al. (2020), Table 1.

A language model has an input embedding (the encoder, ids -> vectors) and an output embedding (the
decoder's weight, vectors -> logits). Each is *initialised* ``random`` or ``pretrained`` and is
either ``frozen`` or ``trainable``; and the two may be *tied* (one shared matrix). Untied gives
2 x 2 x 2 x 2 = 16 configurations, tied gives 2 x 2 = 4 (one matrix, one init, one freeze flag):
20 in all.

Our reading of the paper (footnote 1): a frozen output embedding keeps a trainable bias.

Each configuration names itself in the paper's terms, and the name is what the run cache sees:

- ``tied/pretrained,frozen``
- ``untied/in=pretrained,frozen/out=random,trainable``

``EmbeddingConfig.from_name`` parses the name back; ``ALL_CONFIGS`` lists the 20 in a fixed order: the
4 tied, then the 16 untied, in ``itertools.product`` order over (random, pretrained) x (frozen, trainable).
``apply_embedding_config`` sets a model's embeddings up as a configuration says.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

INITS = ("random", "pretrained")
FREEZING = ("frozen", "trainable")


@dataclass(frozen=True)
class EmbeddingConfig:
    """How the input and output embeddings are set up. For ``tied``, output_* must equal input_*."""

    tied: bool
    input_init: str = "random"  # "random" | "pretrained"
    input_frozen: bool = False
    output_init: str = "random"
    output_frozen: bool = False

    def __post_init__(self) -> None:
        for side in ("input_init", "output_init"):
            if getattr(self, side) not in INITS:
                raise ValueError(f"EmbeddingConfig.{side} must be one of {INITS}, got {getattr(self, side)!r}")
        if self.tied and (self.input_init, self.input_frozen) != (self.output_init, self.output_frozen):
            raise ValueError("a tied configuration has one matrix: output_init/output_frozen must equal "
                             f"input_init/input_frozen, got {self}")

    @property
    def uses_pretrained(self) -> bool:
        return "pretrained" in (self.input_init, self.output_init)

    @property
    def name(self) -> str:
        def side(init: str, frozen: bool) -> str:
            return f"{init},{'frozen' if frozen else 'trainable'}"

        if self.tied:
            return f"tied/{side(self.input_init, self.input_frozen)}"
        return (f"untied/in={side(self.input_init, self.input_frozen)}"
                f"/out={side(self.output_init, self.output_frozen)}")

    @classmethod
    def from_name(cls, name: str) -> EmbeddingConfig:
        """Inverse of ``name``: ``"tied/random,trainable"`` or ``"untied/in=.../out=..."``."""

        def side(text: str) -> tuple[str, bool]:
            init, _, freezing = text.partition(",")
            if init not in INITS or freezing not in FREEZING:
                raise ValueError(f"bad embedding side {text!r} in {name!r}: expected '<{'|'.join(INITS)}>,"
                                 f"<{'|'.join(FREEZING)}>'")
            return init, freezing == "frozen"

        kind, _, rest = name.partition("/")
        if kind == "tied":
            init, frozen = side(rest)
            return cls(True, init, frozen, init, frozen)
        if kind == "untied":
            parts = rest.split("/")
            if len(parts) != 2 or not parts[0].startswith("in=") or not parts[1].startswith("out="):
                raise ValueError(f"bad untied configuration name {name!r}: expected 'untied/in=.../out=...'")
            (in_init, in_frozen), (out_init, out_frozen) = side(parts[0][3:]), side(parts[1][4:])
            return cls(False, in_init, in_frozen, out_init, out_frozen)
        raise ValueError(f"bad configuration name {name!r}: it must start with 'tied/' or 'untied/'")

    def __str__(self) -> str:
        return self.name


def _all_configs() -> tuple[EmbeddingConfig, ...]:
    sides = list(itertools.product(INITS, (True, False)))  # (init, frozen)
    tied = [EmbeddingConfig(True, init, frozen, init, frozen) for init, frozen in sides]
    untied = [EmbeddingConfig(False, i_init, i_frozen, o_init, o_frozen)
              for (i_init, i_frozen), (o_init, o_frozen) in itertools.product(sides, sides)]
    return tuple(tied + untied)


ALL_CONFIGS: tuple[EmbeddingConfig, ...] = _all_configs()  # 4 tied + 16 untied

# Section 3's six configurations (the ones run with 3 seeds), in the paper's list order: the standard
# approach; ours with random output and no freezing; standard + pretraining; ours without freezing;
# ours (untied, pretrained, frozen input); ours with random output embeddings.
SECTION3_CONFIGS: tuple[EmbeddingConfig, ...] = tuple(EmbeddingConfig.from_name(n) for n in (
    "tied/random,trainable",
    "untied/in=pretrained,trainable/out=random,trainable",
    "tied/pretrained,trainable",
    "untied/in=pretrained,trainable/out=pretrained,trainable",
    "untied/in=pretrained,frozen/out=pretrained,trainable",
    "untied/in=pretrained,frozen/out=random,trainable",
))


def apply_embedding_config(model, config: EmbeddingConfig, vectors=None, found=None) -> None:
    """Set up ``model.encoder`` (nn.Embedding) and ``model.decoder`` (nn.Linear, weight (V, E)) as ``config``.

    ``vectors`` (V, E) are pretrained vectors aligned to the model's vocabulary and ``found`` (V,) marks
    the rows that have one (``lmstudy.welch.embeddings.align_to_vocab``); rows without a vector keep the
    model's random initialisation. Pretrained sides copy the found rows; frozen sides get
    ``requires_grad=False`` (the loop leaves such parameters out of the optimizer). The decoder bias
    always stays trainable. Tying is the model's (built with ``tie_weights``): it must agree.
    """
    import torch

    tied = model.decoder.weight is model.encoder.weight
    if tied != config.tied:
        raise ValueError(f"configuration {config.name} needs a model built with tie_weights={config.tied}")
    if config.uses_pretrained:
        if vectors is None or found is None:
            raise ValueError(f"configuration {config.name} needs pretrained vectors and their found mask")
        if tuple(vectors.shape) != tuple(model.encoder.weight.shape):
            raise ValueError(f"pretrained vectors have shape {tuple(vectors.shape)}, the embeddings "
                             f"{tuple(model.encoder.weight.shape)}")
    sides = [(model.encoder.weight, config.input_init, config.input_frozen)]
    if not tied:
        sides.append((model.decoder.weight, config.output_init, config.output_frozen))
    with torch.no_grad():
        for weight, init, frozen in sides:
            if init == "pretrained":
                rows = found.to(weight.device).bool()
                weight[rows] = vectors.to(weight)[rows]
            weight.requires_grad_(not frozen)
    model.decoder.bias.requires_grad_(True)
