"""The Krony study's settings (notebook 03_kronecker): Krony-PT (Ayoub 2024) on the shared base, tested as a trend over how well the base is trained.

The paper compresses GPT-2 small (124M) by replacing both MLP matrices of every block with Kronecker products
(``lmstudy.krony.model``), in three size classes (96M, 81M, 67M), initialised with Van Loan, pruning or at
random, continues training, and claims its 81M model beats DistilGPT2 (82M). A claim about compressing a
*well-trained* model cannot show on a weak one, so we measure it from each of the three kept checkpoints of the
shared base (:func:`lmstudy.base.study_base`: 10%, 30% and 100% of its training tokens) and report the direction
the effect moves (``lmstudy.claims``). Run-cache study ``03_krony_shared``. The
study's design is in :mod:`lmstudy.krony.runs`, what runs in what order in :mod:`lmstudy.krony.order`. The earlier study on an older
Wikipedia base was retired; git tag ``legacy-old-base`` is the last commit that replays it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lmstudy.base import BaseConfig, final_config
from lmstudy.evaluation import EvalConfig
from lmstudy.krony.classes import CLASSES, max_factors
from lmstudy.krony.model import INITS
from lmstudy.scales import SCALES, preset

STUDY = "03_krony_shared"
STUDY_NOTEBOOK = "03_kronecker"  # the notebook whose scale presets configure the study
KINDS = ("krony", "distilled", "scratch", "narrowed")  # narrowed: the SmolLM2 study's (lmstudy.krony.smol)
FINETUNE_SEED_OFFSET = 1000  # continued-training windows: not the base's own (seed 0) windows replayed
LABELS = {"krony": "Krony", "distilled": "distilled", "scratch": "scratch, equal data",
          "narrowed": "narrowed, no teacher"}


@dataclass(frozen=True)
class KronyConfig:
    """The study's preset (``lmstudy.scales``, "03_kronecker"): which base, what to compress and compare, the
    continued-training budget and the protocol's slices (module docstring)."""

    base_scale: str  # the shared base of this scale (lmstudy.base)
    finetune_tokens: int  # continued-training budget of every model (whole steps of the base's batch)
    finetune_lr: float  # peak learning rate of the continued training
    fractions: list = field(default_factory=lambda: [0.1, 0.3, 1.0])  # the base's checkpoints the trend starts from
    classes: list = field(default_factory=lambda: list(CLASSES))
    inits: list = field(default_factory=lambda: list(INITS))
    compare_class: str = "81M"  # the class of the trend and the dense baselines (the paper's DistilGPT2 size)
    seeds: list = field(default_factory=lambda: [0, 1, 2])  # of the continued training, in the trend
    evals_per_run: int = 2  # validations during continued training (the best weights are kept)
    val_tokens: int = 0  # first tokens of the base's validation stream scored then; 0 = all
    table6_class: str = "67M"
    table6_factors: list = field(default_factory=lambda: [1, 2, 4])
    distill_alpha: float = 0.9  # weight of the KD term (DistilGPT2: 5.0 KD : 0.5 CE)
    distill_temperature: float = 2.0  # DistilGPT2's
    # the protocol's slices (lmstudy.evaluation.EvalConfig)
    wikitext_tokens: int = 0  # 0 = the whole WikiText-2 test set
    lambada_examples: int = 0  # 0 = all 5,153 passages
    domains: list | None = None  # held-out domains; None = all of the protocol's
    domain_documents: int = 20
    eval_batch_size: int = 8
    # changes to the shared base's preset (lmstudy.scales "base"; "data" and "model" merge key by key), e.g. a
    # paper-scale dry run's small budget (tests/test_paper_dry_run.py); {} = the preset as it is
    base_overrides: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.base_scale not in SCALES:
            raise ValueError(f"unknown base_scale {self.base_scale!r}; choose one of {', '.join(SCALES)}")
        unknown = {*self.classes, self.compare_class, self.table6_class} - set(CLASSES)
        if unknown:
            raise ValueError(f"unknown size class(es) {sorted(unknown)}; choose from {', '.join(CLASSES)}")
        if set(self.inits) - set(INITS) or not self.inits:
            raise ValueError(f"inits must be a non-empty subset of {INITS}, got {self.inits}")
        recipe = self.recipe
        kept = recipe.kept_steps()
        if not self.fractions or set(self.fractions) - set(kept):
            raise ValueError(f"fractions {self.fractions} must be among the {self.base_scale} base's kept "
                             f"checkpoints {sorted(kept)}")
        if not self.seeds:
            raise ValueError("seeds must hold at least one seed")
        if self.finetune_tokens < recipe.tokens_per_step:
            raise ValueError(f"finetune_tokens={self.finetune_tokens:,} is less than one step of the base's batch "
                             f"({recipe.batch_size} x {recipe.model.seq_len} = {recipe.tokens_per_step:,} tokens)")
        if self.evals_per_run < 1 or self.evals_per_run > self.finetune_steps:
            raise ValueError(f"evals_per_run must be between 1 and the {self.finetune_steps} steps, "
                             f"got {self.evals_per_run}")
        limit = max_factors(self.table6_class, recipe.model.n_embd)
        if any(not 1 <= n <= limit for n in self.table6_factors):
            raise ValueError(f"table6_factors {self.table6_factors}: the {self.table6_class} class allows 1 to {limit} "
                             f"factors at width {recipe.model.n_embd}")
        if not 0 <= self.distill_alpha <= 1 or self.distill_temperature <= 0:
            raise ValueError(f"need 0 <= distill_alpha <= 1 and distill_temperature > 0, got "
                             f"{self.distill_alpha}, {self.distill_temperature}")

    @property
    def recipe(self) -> BaseConfig:
        """The shared base's final run of ``base_scale`` (its batch, context, recipe and kept steps)."""
        return final_config(self.base_scale, **self.base_overrides)

    @property
    def finetune_steps(self) -> int:
        """Continued-training steps: ``finetune_tokens`` in whole batches of the base."""
        return self.finetune_tokens // self.recipe.tokens_per_step

    def eval_config(self) -> EvalConfig:
        """The protocol's slices."""
        return EvalConfig(batch_size=self.eval_batch_size, wikitext_tokens=self.wikitext_tokens,
                          lambada_examples=self.lambada_examples, domains=self.domains,
                          domain_documents=self.domain_documents)

    def protocol_identity(self) -> dict:
        """What of the config sets the scores (part of every run's identity)."""
        return {"wikitext_tokens": self.wikitext_tokens, "lambada_examples": self.lambada_examples,
                "domains": self.domains, "domain_documents": self.domain_documents}

    def finetune_identity(self) -> dict:
        """What of the config sets the continued training (part of every trained run's identity)."""
        return {"steps": self.finetune_steps, "tokens_per_step": self.recipe.tokens_per_step, "lr": self.finetune_lr,
                "evals": self.evals_per_run, "val_tokens": self.val_tokens, "seed_offset": FINETUNE_SEED_OFFSET}


@dataclass(frozen=True)
class ModelSpec:
    """One model of the study: a Krony compression of the base (``init``, ``n_factors``, ``scalars``) or a dense
    baseline of the class's matched width (``distilled``, ``scratch``)."""

    kind: str
    size_class: str
    init: str = ""
    n_factors: int = 1
    scalars: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown model kind {self.kind!r}; choose one of {', '.join(KINDS)}")
        if self.size_class not in CLASSES:
            raise ValueError(f"unknown size class {self.size_class!r}; choose one of {', '.join(CLASSES)}")
        if self.kind == "krony" and self.init not in INITS:
            raise ValueError(f"a Krony model needs an init in {INITS}, got {self.init!r}")
        if self.kind != "krony" and (self.init or self.n_factors != 1 or self.scalars):
            raise ValueError(f"a {self.kind} model is dense: no init, factors or scalars")

    @property
    def seeded_init(self) -> bool:
        """Whether the initial weights depend on the seed: random factors (also pruning's extra factors)."""
        return self.init == "random" or (self.init == "prune" and self.n_factors > 1)


def preset_config(scale: str, overrides: dict | None = None) -> KronyConfig:
    """Notebook 03's config at ``scale`` with ``overrides`` (parameter -> value), as ``lmstudy study 03_kronecker``
    gives its parameters cell; a ValueError names a key that is not a parameter (the command line prints it as one
    line). ``scale``, the notebook's own parameter, is not a config field and is ignored."""
    from dataclasses import fields

    overrides = {key: value for key, value in (overrides or {}).items() if key != "scale"}
    known = {f.name for f in fields(KronyConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"not a notebook 03 parameter: {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return KronyConfig(**{**preset(STUDY_NOTEBOOK, scale), **overrides})
