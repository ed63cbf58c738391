"""03_kronecker: Krony-PT (Ayoub 2024) on the shared base, tested as a trend over how well the base is trained.

The paper compresses GPT-2 small (124M) by replacing both MLP matrices of every block with Kronecker products
(``lmstudy.krony.model``), in three size classes (96M, 81M, 67M), initialised with Van Loan, pruning or at
random, continues training, and claims its 81M model beats DistilGPT2 (82M). A claim about compressing a
*well-trained* model cannot show on a weak one, so we measure it from each of the three kept checkpoints of the
shared base (:func:`lmstudy.base.study_base`: 10%, 30% and 100% of its training tokens) and report the direction
the effect moves (``lmstudy.claims``). Run-cache study ``03_krony_shared``. The earlier study on an older
Wikipedia base was retired; git tag ``legacy-old-base`` is the last commit that replays it.

Models (``ModelSpec``), all started from one base checkpoint and given the same continued training:

- **Krony** (``kind="krony"``): the base with both MLP matrices of every block factored. Size classes keep the
  paper's *factor shapes*, not its parameter counts (our dims differ): ``c_fc`` is ``(4d, d)`` in the paper's
  ``(out, in)`` orientation; the 96M class is ``B = (2, 1)`` (A = (2d, d): half the MLP), the 81M class
  ``B = (4, 1)`` (A = (d, d): a quarter), the 67M class a balanced pair with both factors tiny (A's sides the
  divisors nearest the square roots: (24, 12) at d = 192). ``size_ratio`` (parameters over the base's) is
  reported beside the paper's 95/124, 81/124, 67/124; our embeddings are a larger share of a small model, so the
  same shapes remove less. Inits: ``van_loan``, ``prune``, ``random`` (``lmstudy.krony.model``).
- **Distilled** (``kind="distilled"``, the DistilGPT2 analogue): a dense GPT-2 of the base's depth and width whose
  MLP hidden size (``matched_dense_inner``) gives the parameter count closest to the Krony model of the class,
  trained on the same continued-training tokens with Hinton's loss from the same base checkpoint as teacher
  (``DistillTask``: ``alpha * KL(p_t^T || p_s^T) * T^2 + (1 - alpha) * CE``, DistilGPT2's T = 2 and its 5.0 : 0.5
  KD : CE ratio as alpha = 0.9; DistilGPT2's third, cosine hidden-state term is left out).
  **Its initialisation is the teacher's own weights** (``narrowed_model``): the base with each MLP narrowed to the
  matched width, keeping in every block the hidden units with the largest ``||input weights|| * ||output
  weights||`` (``hidden_unit_scores``), everything else copied. Why: DistilGPT2 itself starts from GPT-2's weights
  (every second layer), and the Krony model inherits the base's attention, embeddings and an approximation of its
  MLPs; a student from random init given only the continued-training tokens (a fraction of a percent of the
  base's) would be a straw man, losing for want of data, not for want of Kronecker factors. Magnitude selection
  keeps the units that move the residual stream most, so the student starts as close to the teacher as a
  narrower dense MLP can without training.
- **Scratch, equal data** (``kind="scratch"``): the same narrowed dense GPT-2 from random init, trained with the
  base's exact recipe (``lmstudy.base.final_config(scale).train_config()``: same data stream and windows, batch,
  learning-rate schedule, and kept checkpoints at the base's kept steps) in ONE run (``scratch_pretraining``);
  its checkpoint at each kept step then gets the same continued training as the Krony model. At every point of
  the trend it has seen exactly the base's tokens plus the continued-training tokens: equal data, equal
  treatment. Its kept weights are rounded through float16 like the shipped base's (``study_base``).

Continued training (``continued_run``): ``finetune_tokens`` (the preset's stated budget, rounded down to whole
steps of the base's batch x context) of random windows of the base's own training stream
(:func:`lmstudy.base.base_streams`), drawn with seed ``FINETUNE_SEED_OFFSET + seed`` so they are not the base's
first windows replayed; the same batches for every model of a seed. The base's recipe otherwise (AdamW (0.9,
0.95), weight decay 0.1 on matrices, 2% warm-up, cosine to a tenth) with peak ``finetune_lr``; the validation
stream (its first ``val_tokens``) is scored ``evals_per_run`` times and the best weights are kept.

Evaluation: the shared protocol (:func:`lmstudy.evaluation.evaluate_model`) on the preset's slices: WikiText-2
test detokenised, per token (``wikitext_ppl``), per word (``wikitext_ppl_word``) and bits per byte
(``wikitext_bpb``), LAMBADA accuracy with its 95% Wilson interval (``lambada_acc``, ``_low``, ``_high``) and
target perplexity (``lambada_ppl``), each held-out domain (``<domain>_ppl``, ``_ppl_word``, ``_bpb``). Each model
is scored before (``initial_metrics``) and after continued training.

What runs:

1. ``base_table``: the base at each checkpoint, scored.
2. ``grid_table``: the full grid at the final checkpoint, seed 0: every class x init, plus the distilled and
   scratch models of ``compare_class``.
3. ``trend_table``: the central comparison, ``compare_class`` (81M), the Krony init of the grid with the lowest
   validation loss (``best_init``; never chosen on the test sets the verdicts read) vs distilled vs scratch,
   ``seeds`` of the continued training, from every checkpoint in ``fractions``; ``trend_gaps`` the per-seed
   Krony-minus-baseline gaps in WikiText-2 bits per byte (paired: one seed = the same continued-training
   batches), ``plot_trend`` the figure.
4. ``table6``: the paper's empty Table 6 at the final checkpoint, seed 0: ``table6_class`` shapes (the only
   class whose factors allow several Van Loan terms: B = (2, 1) and (4, 1) allow at most 2 and 4, and 4 terms of
   (4, 1) would rebuild W exactly), Van Loan init, ``table6_factors`` factors, each with and without scalars.
5. ``claims``: the paper's claims as it words them, verdicts through :mod:`lmstudy.claims`' one rule;
   ``published_claims``: the same from the committed cpu tables (``python -m lmstudy claims 03``).
6. ``reconstruction_errors``: Van Loan's error per layer against the SVD bound and a same-size low-rank fit.

Every run goes through the run cache (``lmstudy.runs.cached``), so a rerun reads finished runs back and an
interrupted one resumes from its last checkpoint.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from dataclasses import asdict, dataclass, field, replace

import pandas as pd
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.initialization import no_init_weights

from lmstudy.base import (
    BaseConfig, StudyBase, base_streams, checkpoint_identity, checkpoint_name, final_config, finished_data_run,
    gpt2_config, loaded_study_base,
)
from lmstudy.base import run_config as base_run_config
from lmstudy.claims import ClaimRow, Effect, Spread, by_seed, claims_table, differences, trend_rows, unpaired
from lmstudy.evaluation import EvalConfig, eval_domains, evaluate_model
from lmstudy.krony.model import (
    INITS, KroneckerConfig, compress, compressed_parameter_count, factor_pair_parameters, gpt2_parameter_count,
    partner_shape, van_loan,
)
from lmstudy.lm_batches import LMTask
from lmstudy.runs import Run, cached, config_hash, get_run
from lmstudy.paths import figures_dir
from lmstudy.scales import SCALES, preset
from lmstudy.tokenization import load_tokenizer
from lmstudy.training import TrainConfig, count_parameters, kept_checkpoint, train, train_and_restore

STUDY = "03_krony_shared"
STUDY_NOTEBOOK = "03_kronecker"  # the notebook whose scale presets configure the study
CLASSES = ("96M", "81M", "67M")
PAPER_RATIOS = {"96M": 95 / 124, "81M": 81 / 124, "67M": 67 / 124}  # the paper's sizes over GPT-2's 124M
KINDS = ("krony", "distilled", "scratch")
FINETUNE_SEED_OFFSET = 1000  # continued-training windows: not the base's own (seed 0) windows replayed
LABELS = {"krony": "Krony", "distilled": "distilled", "scratch": "scratch, equal data"}

# The paper's Table 4 (perplexity, GPT-2's tokenizer, the paper's own evaluation; "" where it has no number).
PAPER_TABLE4 = pd.DataFrame([
    {"parameters": "124M", "model": "GPT2", "wikitext103_ppl": 29.16, "wikitext2_ppl": 24.67, "lambada_ppl": 45.28},
    {"parameters": "82M", "model": "DistilGPT2", "wikitext103_ppl": 44.53, "wikitext2_ppl": 36.48,
     "lambada_ppl": 76.00},
    {"parameters": "81M", "model": "KronyPT-81M-1350", "wikitext103_ppl": 41.98, "wikitext2_ppl": 34.99,
     "lambada_ppl": math.nan},
    {"parameters": "81M", "model": "KronyPT-81M-3950", "wikitext103_ppl": math.nan, "wikitext2_ppl": math.nan,
     "lambada_ppl": 64.92},
])


# ---------------------------------------------------------------------------------------------------
# Shapes and sizes
# ---------------------------------------------------------------------------------------------------


def _nearest_divisor(n: int, target: float) -> int:
    return min((d for d in range(1, n + 1) if n % d == 0), key=lambda d: (abs(d - target), d))


def class_a_shape(name: str, n_embd: int, n_inner: int | None = None) -> tuple[int, int]:
    """A's shape for ``c_fc`` (paper orientation ``(out, in) = (4d, d)``) of a size class (module docstring)."""
    out, inp = n_inner or 4 * n_embd, n_embd
    if name == "96M":
        return partner_shape((out, inp), (2, 1))  # B = (2, 1): A = (out/2, in)
    if name == "81M":
        return partner_shape((out, inp), (4, 1))  # B = (4, 1): A = (out/4, in)
    if name == "67M":
        return _nearest_divisor(out, math.sqrt(out)), _nearest_divisor(inp, math.sqrt(inp))
    raise ValueError(f"unknown size class {name!r}; choose one of {', '.join(CLASSES)}")


def max_factors(name: str, n_embd: int) -> int:
    """The most Van Loan terms a class allows: the rank of the rearranged ``c_fc``, ``min(p*q, r*t)``."""
    a_shape = class_a_shape(name, n_embd)
    b_shape = partner_shape((4 * n_embd, n_embd), a_shape)
    return min(a_shape[0] * a_shape[1], b_shape[0] * b_shape[1])


def matched_dense_inner(model_config: GPT2Config, target_parameters: int) -> int:
    """The MLP hidden size whose dense GPT-2 has the parameter count closest to ``target_parameters`` (the
    smaller one on a tie), among 1 .. 4 x n_embd.

    The count is linear in the hidden size (each block's c_fc and c_proj), so two counts give the line and only
    the sizes beside its solution are compared (a scan of all 3,072 of GPT-2 small built 3,072 configs: a tenth
    of the paper dry run's time)."""
    def size(inner: int) -> int:
        return gpt2_parameter_count(GPT2Config(**{**model_config.to_dict(), "n_inner": inner}))
    first, per_unit = size(1), size(2) - size(1)
    solution = 1 + (target_parameters - first) // per_unit
    candidates = [inner for inner in (solution, solution + 1) if 1 <= inner <= 4 * model_config.n_embd]
    candidates = candidates or [1 if solution < 1 else 4 * model_config.n_embd]
    return min(candidates, key=lambda inner: abs(first + (inner - 1) * per_unit - target_parameters))


def class_width(model_config: GPT2Config, size_class: str) -> int:
    """The dense MLP width matched to the one-factor Krony model of ``size_class`` on ``model_config``."""
    kron = KroneckerConfig(a_shape=class_a_shape(size_class, model_config.n_embd, model_config.n_inner))
    return matched_dense_inner(model_config, compressed_parameter_count(model_config, kron))


# ---------------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------------
# The base and its data (loaded once per process)
# ---------------------------------------------------------------------------------------------------


def _overrides(config: KronyConfig) -> str:
    """``config.base_overrides`` as a cache key (JSON, sorted)."""
    return json.dumps(config.base_overrides, sort_keys=True)


def load_base(config: KronyConfig, fraction: float) -> StudyBase:
    """The base checkpoint ``fraction`` of ``config.base_scale``, with a private copy of its model."""
    base = _base(config, fraction)
    return StudyBase(model=copy.deepcopy(base.model), tokenizer=base.tokenizer, name=base.name,
                     fraction=base.fraction, tokens=base.tokens, identity=base.identity)


def _base(config: KronyConfig, fraction: float) -> StudyBase:
    """The shared base checkpoint ``fraction`` of ``config`` (its scale and overrides), loaded once per process."""
    return loaded_study_base(config.base_scale, fraction, config.base_overrides)


def _base_checkpoint(config: KronyConfig, fraction: float) -> tuple[dict, int]:
    """The identity and training tokens of the base checkpoint ``fraction``, without loading it."""
    return checkpoint_identity(config.base_scale, fraction, config.base_overrides)


def _base_streams(config: KronyConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """The training and validation streams of ``config``'s shared base, read once per process."""
    return _streams(config.base_scale, _overrides(config))


@functools.lru_cache(maxsize=1)
def _streams(scale: str, overrides: str = "{}") -> tuple[torch.Tensor, torch.Tensor]:
    return base_streams(scale, overrides=json.loads(overrides))  # ~0.9 GB of int64 at cpu scale: read once


def base_model_config(config: KronyConfig) -> GPT2Config:
    """The shared base's GPT-2 config: from its recipe and its data run's tokenizer where that run is built, so the
    scratch arm's pretraining needs no trained base (on a GPU it trains beside the base's own pretraining:
    scripts/gpu_paper_runs.sh); else from the base itself."""
    try:
        tokenizer = load_tokenizer(finished_data_run(config.recipe.data).path / "tokenizer")
    except FileNotFoundError:
        tokenizer = _base(config, config.fractions[0]).tokenizer
    return gpt2_config(config.recipe.model, tokenizer)


def dense_width(config: KronyConfig) -> int:
    """The MLP width of the dense baselines: matched to the one-factor Krony model of ``compare_class``."""
    return class_width(base_model_config(config), config.compare_class)


def dense_config(config: KronyConfig) -> GPT2Config:
    """The dense baselines' GPT-2: the base's, with the MLP ``dense_width`` wide."""
    return narrow_config(base_model_config(config), dense_width(config))


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def protocol_metrics(model: torch.nn.Module, tokenizer, config: KronyConfig) -> dict:
    """The shared protocol (:func:`lmstudy.evaluation.evaluate_model`) on ``config``'s slices, flattened:
    ``<name>_ppl`` (per token), ``_ppl_word``, ``_bpb`` for every benchmark (``wikitext`` for WikiText-2, as
    ``TextScore.metrics`` names it, ``lambada``, each domain) and ``lambada_acc`` with its Wilson interval
    ``lambada_acc_low`` / ``lambada_acc_high``."""
    table = evaluate_model(model, tokenizer, config.eval_config())
    metrics = {}
    for row in table.to_dict("records"):
        name = "wikitext" if row["benchmark"] == "wikitext2" else row["benchmark"]
        metrics.update({f"{name}_ppl": row["ppl_token"], f"{name}_ppl_word": row["ppl_word"],
                        f"{name}_bpb": row["bits_per_byte"]})
        if name == "lambada":
            metrics.update(lambada_acc=row["accuracy"], lambada_acc_low=row["accuracy_low"],
                           lambada_acc_high=row["accuracy_high"])
    return metrics


# ---------------------------------------------------------------------------------------------------
# The dense same-size models
# ---------------------------------------------------------------------------------------------------


def narrow_config(model_config: GPT2Config, n_inner: int) -> GPT2Config:
    """``model_config`` with the MLP hidden size ``n_inner``."""
    return GPT2Config(**{**model_config.to_dict(), "n_inner": n_inner})


def hidden_unit_scores(mlp: torch.nn.Module) -> torch.Tensor:
    """``(inner,)``: each MLP hidden unit's ``||input weights|| * ||output weights||``, how far it can move the
    residual stream for an input of a given size (the magnitude criterion of ``narrowed_model``)."""
    fan_in = mlp.c_fc.weight.detach().norm(dim=0)  # HF Conv1D (d, inner): column j feeds unit j
    fan_out = mlp.c_proj.weight.detach().norm(dim=1)  # (inner, d): row j is what unit j writes back
    return fan_in * fan_out


def _weights_to_load(model_config: GPT2Config) -> GPT2LMHeadModel:
    """A GPT-2 of ``model_config`` whose weights are about to be loaded (strictly): drawing initial ones is skipped
    (seconds for a 100M model), the output matrix tied to the embedding as initialisation would."""
    with no_init_weights():
        model = GPT2LMHeadModel(model_config)
    model.tie_weights()  # part of the initialisation skipped above
    return model


@torch.no_grad()
def narrowed_model(model: GPT2LMHeadModel, n_inner: int) -> GPT2LMHeadModel:
    """A dense copy of ``model`` whose every MLP keeps its ``n_inner`` highest-scoring hidden units
    (``hidden_unit_scores``, in their original order); every other weight is copied as it is."""
    inner = model.config.n_inner or 4 * model.config.n_embd
    if not 1 <= n_inner <= inner:
        raise ValueError(f"n_inner must be between 1 and the model's {inner} hidden units, got {n_inner}")
    state = model.state_dict()
    for index, block in enumerate(model.transformer.h):
        keep = hidden_unit_scores(block.mlp).topk(n_inner).indices.sort().values  # (n_inner,)
        prefix = f"transformer.h.{index}.mlp"
        state[f"{prefix}.c_fc.weight"] = block.mlp.c_fc.weight[:, keep]  # (d, n_inner)
        state[f"{prefix}.c_fc.bias"] = block.mlp.c_fc.bias[keep]  # (n_inner,)
        state[f"{prefix}.c_proj.weight"] = block.mlp.c_proj.weight[keep, :]  # (n_inner, d); c_proj.bias stays
    student = _weights_to_load(narrow_config(model.config, n_inner))
    student.load_state_dict(state)
    return student.to(model.device)


def scratch_pretraining(config: KronyConfig) -> dict:
    """Cached, resumable: the dense model of ``dense_width`` trained from random init with the shared base's exact
    recipe (same stream and windows, batch, schedule, kept checkpoints at the base's kept steps)."""
    recipe = config.recipe

    def fit(run: Run) -> dict:
        train_ids, valid_ids = _base_streams(config)
        torch.manual_seed(recipe.seed)  # as lmstudy.base.build_model
        model = GPT2LMHeadModel(dense_config(config))
        if recipe.compile:
            model.compile()  # as the base run: speed only, the weights' names stay GPT-2's
        # The task of lmstudy.base.train_base: the same random windows of the same stream, batch for batch.
        metrics = train(model, recipe.lm_task(train_ids, valid_ids), recipe.train_config(), run)
        return {**metrics, "parameters": count_parameters(model), "n_inner": model.config.n_inner,
                "tokens": metrics["steps"] * recipe.tokens_per_step}

    return cached(STUDY, _scratch_identity(config), fit)


def _scratch_identity(config: KronyConfig) -> dict:
    return {"stage": "scratch_pretraining", "recipe": base_run_config(config.recipe), "n_inner": dense_width(config)}


def scratch_checkpoint(config: KronyConfig, fraction: float) -> GPT2LMHeadModel:
    """The scratch model at the base's kept checkpoint ``fraction`` (training it that far first), float16-rounded
    as the shipped base is.

    A kept checkpoint is read as soon as it exists, before the scratch run ends: its weights are those of that
    step whatever follows (checkpoints are written whole, then renamed into place), so while ``lmstudy krony
    scratch`` trains in its own process the study continues from the 10% and 30% checkpoints meanwhile."""
    from safetensors.torch import load_model

    run = get_run(STUDY, _scratch_identity(config))
    step = config.recipe.kept_steps()[fraction]
    try:
        folder = kept_checkpoint(run, step)
    except FileNotFoundError:
        scratch_pretraining(config)  # trains it here, or waits for the process that does
        folder = kept_checkpoint(run, step)
    model = _weights_to_load(dense_config(config))
    load_model(model, str(folder / "model.safetensors"))
    return model.to(torch.float16).to(torch.float32).eval()


# ---------------------------------------------------------------------------------------------------
# Distillation
# ---------------------------------------------------------------------------------------------------


def distillation_loss(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, targets: torch.Tensor, alpha: float,
    temperature: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Hinton et al. (2015): ``alpha * KL(p_t^T || p_s^T) * T^2 + (1 - alpha) * CE(s, y)``, mean over tokens.

    Logits are ``(B, T, V)`` (or ``(N, V)``), targets ``(B, T)`` (or ``(N,)``); ``p^T = softmax(logits / T)``.
    The ``T^2`` keeps the KD gradients on the scale of the CE's as T changes (Hinton, Sec. 2). Returns the loss
    and its two terms, detached, for the training log.
    """
    vocab = student_logits.size(-1)
    student = student_logits.reshape(-1, vocab).float()  # (N, V); float32 softmax under autocast too
    teacher = teacher_logits.reshape(-1, vocab).float()  # (N, V)
    # KL(p_t || p_s) summed over the vocabulary, averaged over tokens ("batchmean" on (N, V)).
    kd = F.kl_div(F.log_softmax(student / temperature, dim=-1), F.log_softmax(teacher / temperature, dim=-1),
                  reduction="batchmean", log_target=True) * temperature**2
    ce = F.cross_entropy(student, targets.reshape(-1).long())
    return alpha * kd + (1 - alpha) * ce, {"kd": kd.detach(), "ce": ce.detach()}


@dataclass
class DistillTask(LMTask):
    """``LMTask`` whose training loss distils ``teacher`` into the model (``distillation_loss``).

    Batches and evaluation are ``LMTask``'s: validation (and so early stopping and ``best/``) is the student's
    plain cross-entropy. The teacher is frozen and kept in eval mode (no dropout); the loop never sees it.
    """

    teacher: torch.nn.Module | None = None
    alpha: float = 0.9
    temperature: float = 2.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.teacher is None:
            raise ValueError("DistillTask needs a teacher model")
        if not 0.0 <= self.alpha <= 1.0 or self.temperature <= 0:
            raise ValueError(f"need 0 <= alpha <= 1 and temperature > 0, got {self.alpha}, {self.temperature}")
        self.teacher.eval().requires_grad_(False)

    def loss(self, model, batch):
        x, y = batch
        student_logits = model(input_ids=x).logits  # (B, T, V)
        with torch.no_grad():
            teacher_logits = self.teacher.to(x.device)(input_ids=x).logits  # (B, T, V); .to: no-op after the first
        return distillation_loss(student_logits, teacher_logits, y, self.alpha, self.temperature)


# ---------------------------------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------------------------------


_LAST_INITIAL: dict[str, GPT2LMHeadModel] = {}  # the last initial model built, by the hash of its identity


def initial_model(config: KronyConfig, fraction: float, spec: ModelSpec, seed: int = 0) -> GPT2LMHeadModel:
    """The model of ``spec`` as continued training starts it, from the base checkpoint ``fraction``: a copy of the
    last one built when it is the same model (:func:`continued_run` and :func:`initial_metrics` both start from it:
    the base's copy and a Van Loan SVD per MLP matrix, once, not twice)."""
    key = config_hash(_identity(config, fraction, spec, "initial", seed if spec.seeded_init else None))
    if key not in _LAST_INITIAL:
        _LAST_INITIAL.clear()  # one model at a time: at paper dims each is hundreds of MB
        _LAST_INITIAL[key] = _build_initial_model(config, fraction, spec, seed)
    return copy.deepcopy(_LAST_INITIAL[key])


def _build_initial_model(config: KronyConfig, fraction: float, spec: ModelSpec, seed: int) -> GPT2LMHeadModel:
    base = load_base(config, fraction)
    if spec.kind == "krony":
        kron = KroneckerConfig(a_shape=class_a_shape(spec.size_class, base.model.config.n_embd),
                               n_factors=spec.n_factors, scalars=spec.scalars)
        return compress(base.model, kron, spec.init, generator=torch.Generator().manual_seed(seed))
    if spec.kind == "distilled":
        return narrowed_model(base.model, dense_width(config))
    return scratch_checkpoint(config, fraction)


def _identity(config: KronyConfig, fraction: float, spec: ModelSpec, stage: str, seed: int | None) -> dict:
    """A run's config: the base checkpoint, the model, the protocol, and what else sets its weights."""
    identity = {"stage": stage, "base": _base_checkpoint(config, fraction)[0], "model": asdict(spec),
                "seed": seed, "protocol": config.protocol_identity()}
    if spec.kind != "krony":
        identity["n_inner"] = dense_width(config)
    if spec.kind == "scratch":
        identity["scratch_run"] = config_hash(_scratch_identity(config))
    return identity


def initial_metrics(config: KronyConfig, fraction: float, spec: ModelSpec, seed: int = 0) -> dict:
    """Cached: the protocol's scores of ``spec`` before continued training (the seed matters for random
    Kronecker factors only, so deterministic inits are scored once for every seed)."""
    seed = seed if spec.seeded_init else None

    def fn(run: Run) -> dict:
        base = _base(config, fraction)
        model = initial_model(config, fraction, spec, seed or 0).to(_device())
        return {**protocol_metrics(model, base.tokenizer, config), "parameters": count_parameters(model)}

    return cached(STUDY, _identity(config, fraction, spec, "initial", seed), fn)


def finetune_train_config(config: KronyConfig, seed: int) -> TrainConfig:
    """The continued training: the base's recipe (optimizer, decay, warm-up share, cosine) over ``finetune_steps``."""
    recipe, steps = config.recipe, config.finetune_steps
    every = max(1, steps // config.evals_per_run)
    # The base's own TrainConfig (optimizer, betas, decay, schedule) with the continued training's length.
    return replace(recipe.train_config(), max_steps=steps, lr=config.finetune_lr,
                   warmup_steps=round(recipe.warmup_fraction * steps), eval_every=every, checkpoint_every=every,
                   log_every=max(1, min(10, every)), seed=seed, keep_checkpoints=())


def continued_run(config: KronyConfig, fraction: float, spec: ModelSpec, seed: int = 0) -> dict:
    """Cached, resumable: ``spec`` from the base checkpoint ``fraction``, continued training (seed ``seed``), the
    best validation weights scored by the protocol."""
    identity = {**_identity(config, fraction, spec, "continued", seed), "finetune": config.finetune_identity()}
    if spec.kind == "distilled":
        identity["distill"] = {"alpha": config.distill_alpha, "temperature": config.distill_temperature}

    def fn(run: Run) -> dict:
        base = load_base(config, fraction)
        model = initial_model(config, fraction, spec, seed)
        train_ids, valid_ids = _base_streams(config)
        task_args = dict(batch_size=config.recipe.batch_size, seq_len=config.recipe.model.seq_len,
                         eval_batch_size=2 * config.recipe.batch_size, max_eval_tokens=config.val_tokens or None,
                         seed=FINETUNE_SEED_OFFSET + seed)
        if spec.kind == "distilled":
            task = DistillTask(train_ids, valid_ids, teacher=base.model, alpha=config.distill_alpha,
                               temperature=config.distill_temperature, **task_args)
        else:
            task = LMTask(train_ids, valid_ids, **task_args)
        metrics = train_and_restore(model, task, finetune_train_config(config, seed), run,
                                    evaluate=lambda trained: protocol_metrics(trained, base.tokenizer, config))
        return {**metrics, "parameters": count_parameters(model),
                "finetune_tokens": metrics["steps"] * config.recipe.tokens_per_step}

    return cached(STUDY, identity, fn)


def base_metrics(config: KronyConfig, fraction: float) -> dict:
    """Cached: the protocol's scores of the base checkpoint ``fraction`` itself."""
    def fn(run: Run) -> dict:
        base = load_base(config, fraction)
        return {**protocol_metrics(base.model.to(_device()), base.tokenizer, config),
                "parameters": count_parameters(base.model)}

    identity = {"stage": "base", "base": _base_checkpoint(config, fraction)[0],
                "protocol": config.protocol_identity()}
    return cached(STUDY, identity, fn)


# ---------------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------------

METRICS = ["wikitext_bpb", "wikitext_ppl", "wikitext_ppl_word", "lambada_acc", "lambada_acc_low", "lambada_acc_high",
           "lambada_ppl"]


def _row(config: KronyConfig, spec: ModelSpec, initial: dict, trained: dict, base_parameters: int) -> dict:
    """One table row: the model, its size, its scores before (``before_*``) and after continued training, and
    each held-out domain's perplexity and bits per byte after. ``best_val_loss``: the validation loss (nats per
    token, the base's validation stream) of the weights kept, what :func:`best_init` chooses by."""
    domains = eval_domains() if config.domains is None else config.domains
    krony = spec.kind == "krony"
    return {"model": LABELS[spec.kind], "class": spec.size_class, "init": spec.init,
            "factors": spec.n_factors if krony else None, "scalars": spec.scalars if krony else None,
            "parameters": trained["parameters"],
            "size_ratio": trained["parameters"] / base_parameters, "paper_ratio": PAPER_RATIOS[spec.size_class],
            **{f"before_{key}": initial[key] for key in ("wikitext_bpb", "wikitext_ppl", "lambada_acc")},
            "best_val_loss": trained["best_val_loss"], **{key: trained[key] for key in METRICS},
            **{f"{d}_{unit}": trained[f"{d}_{unit}"] for d in domains for unit in ("ppl", "bpb")}}


def base_table(config: KronyConfig) -> pd.DataFrame:
    """The base at each checkpoint of ``fractions``: its training tokens and the protocol's scores."""
    rows = []
    for fraction in config.fractions:
        metrics = base_metrics(config, fraction)
        rows.append({"checkpoint": checkpoint_name(fraction), "fraction": fraction,
                     "base_tokens": _base_checkpoint(config, fraction)[1],
                     "parameters": metrics["parameters"], **{key: metrics[key] for key in METRICS}})
    return pd.DataFrame(rows)


def _models_at(config: KronyConfig, fraction: float, specs: list[ModelSpec], seed: int, desc: str) -> list[dict]:
    """Rows of ``specs`` from checkpoint ``fraction`` (training what is not cached), beside the base's size."""
    base_parameters = base_metrics(config, fraction)["parameters"]
    rows = []
    for spec in tqdm(specs, desc=desc, unit="model"):
        trained = continued_run(config, fraction, spec, seed)
        rows.append(_row(config, spec, initial_metrics(config, fraction, spec, seed), trained, base_parameters))
    return rows


def grid_specs(config: KronyConfig) -> list[ModelSpec]:
    """The grid's models: every class x init, then the dense baselines of ``compare_class``."""
    specs = [ModelSpec("krony", size_class, init) for size_class in config.classes for init in config.inits]
    return specs + [ModelSpec(kind, config.compare_class) for kind in ("distilled", "scratch")]


def table6_specs(config: KronyConfig) -> list[ModelSpec]:
    """Table 6's models: Van Loan, ``table6_class``, each of ``table6_factors`` without and with scalars."""
    return [ModelSpec("krony", config.table6_class, "van_loan", n, scalars)
            for n in config.table6_factors for scalars in (False, True)]


def trend_specs(config: KronyConfig, init: str) -> list[ModelSpec]:
    """The trend's models: the ``compare_class`` Krony model (``init``) and the two dense baselines of its size."""
    return [ModelSpec("krony", config.compare_class, init), ModelSpec("distilled", config.compare_class),
            ModelSpec("scratch", config.compare_class)]


def train_runs(config: KronyConfig) -> None:
    """Train (or find in the run cache) every run the tables below read: the Krony models first (the grid's pick
    the trend's init), then the dense baselines (:func:`baseline_runs`).

    The dense baselines can train in a second process meanwhile, ``lmstudy krony baselines``, which takes the same
    list from its other end: the two meet (a run one process is training, the other waits for through the run's
    lock, then reads back). The scratch arm's pretraining, a second base pretraining and the study's longest run,
    comes with the first scratch run."""
    final, first_seed = config.fractions[-1], config.seeds[0]
    grid = _models_at(config, final, [s for s in grid_specs(config) if s.kind == "krony"], first_seed, "grid")
    krony = ModelSpec("krony", config.compare_class, best_init(pd.DataFrame(grid), config.compare_class))
    _train(config, [(spec, final, first_seed) for spec in table6_specs(config)]
           + [(krony, fraction, seed) for fraction in config.fractions for seed in config.seeds], "table 6, trend")
    baseline_runs(config)


def baseline_runs(config: KronyConfig, from_the_end: bool = False) -> None:
    """The dense baselines' runs of the grid and the trend (the grid's are the trend's at the final checkpoint and
    first seed): distilled, then scratch, each lowest checkpoint first; ``from_the_end``: that list reversed
    (``lmstudy krony baselines``, beside the study's :func:`train_runs`)."""
    runs = [(ModelSpec(kind, config.compare_class), fraction, seed) for kind in ("distilled", "scratch")
            for fraction in config.fractions for seed in config.seeds]
    _train(config, runs[::-1] if from_the_end else runs, "dense baselines")


def _train(config: KronyConfig, runs: list[tuple[ModelSpec, float, int]], desc: str) -> None:
    """Train (or find cached) each ``(spec, fraction, seed)`` of ``runs`` in order, under one progress bar (a bar
    per run would flood a notebook's output channel: nbval then loses the cell's end)."""
    for spec, fraction, seed in tqdm(runs, desc=desc, unit="model"):
        continued_run(config, fraction, spec, seed)


def grid_table(config: KronyConfig) -> pd.DataFrame:
    """The full grid at the final checkpoint, seed 0: every class x init, then the dense baselines of
    ``compare_class``; a first row for the base itself."""
    fraction = config.fractions[-1]
    base = base_metrics(config, fraction)
    models = _models_at(config, fraction, grid_specs(config), config.seeds[0], "grid")
    base_row = {"model": "base", "parameters": base["parameters"], "size_ratio": 1.0,
                **{key: base[key] for key in models[0] if key in base}}
    return pd.DataFrame([base_row, *models]).reindex(columns=list(models[0]))  # the models' column order


def best_init(grid: pd.DataFrame, size_class: str, metric: str = "best_val_loss") -> str:
    """The Krony init of ``size_class`` with the lowest validation loss in ``grid`` (``grid_table``'s
    ``best_val_loss``: the continued training's validation stream, the base's own validation split).

    Chosen on validation, never on a test set: the trend's verdicts are read on WikiText-2 test, and an init
    picked by the score the verdict then reads would favour Krony by its luck on that test set. ``metric``:
    another column, only to report what it would have picked (:func:`claims`' note)."""
    krony = grid[(grid["model"] == LABELS["krony"]) & (grid["class"] == size_class)]
    if krony.empty:
        raise ValueError(f"the grid has no Krony row of class {size_class}")
    return krony.loc[krony[metric].idxmin(), "init"]


def table6(config: KronyConfig) -> pd.DataFrame:
    """The paper's empty Table 6 at the final checkpoint, seed 0: Van Loan init, ``table6_class`` shapes,
    ``table6_factors`` factors, each without and with per-factor scalars."""
    return pd.DataFrame(_models_at(config, config.fractions[-1], table6_specs(config), config.seeds[0], "table 6"))


def trend_table(config: KronyConfig, init: str) -> pd.DataFrame:
    """The central comparison from every checkpoint of ``fractions`` and every seed: the ``compare_class`` Krony
    model (``init``) vs the distilled and the scratch models; one row per checkpoint x seed x model."""
    rows = []
    for fraction in config.fractions:
        tokens = _base_checkpoint(config, fraction)[1]
        for seed in config.seeds:
            for row in _models_at(config, fraction, trend_specs(config, init), seed, f"trend {fraction:.0%} seed {seed}"):
                rows.append({"fraction": fraction, "base_tokens": tokens, "seed": seed, **row})
    return pd.DataFrame(rows)


def trend_gaps(trend: pd.DataFrame, metric: str = "wikitext_bpb") -> pd.DataFrame:
    """Per checkpoint and seed: Krony minus distilled and Krony minus scratch in ``metric`` (negative = Krony
    better for perplexities and bits), from ``trend_table``'s rows."""
    wide = trend.pivot_table(index=["fraction", "base_tokens", "seed"], columns="model", values=metric)
    krony = wide[LABELS["krony"]]
    return pd.DataFrame({"krony_minus_distilled": krony - wide[LABELS["distilled"]],
                         "krony_minus_scratch": krony - wide[LABELS["scratch"]]}).reset_index()


# ---------------------------------------------------------------------------------------------------
# Claims
# ---------------------------------------------------------------------------------------------------

# The practical thresholds, in % of the loss of the side compared against (bits per byte, or log perplexity:
# for one text and one tokenizer the two are proportional, so the same share reads both). Both come from the
# paper's smallest reported win, Krony-PT-81M over DistilGPT2 on WikiText-2 (34.99 vs 36.48 perplexity, Table 4):
# 1.16% of DistilGPT2's log perplexity.
NEGLIGIBLE_PERCENT = 0.1  # a tenth of that win: a real difference below it is negligible
SIMILAR_PERCENT = 1.0  # "do not help much", "no benefits": within ± 1%, just under the smallest win the paper reports


def _one(table: pd.DataFrame, **where) -> pd.Series | None:
    """The one row of ``table`` matching ``where`` (column = value), or None."""
    mask = pd.Series(True, index=table.index)
    for column, value in where.items():
        mask &= table[column] == value
    return table[mask].iloc[0] if mask.any() else None


def _losses(values: pd.Series, log: bool) -> pd.Series:
    """``values`` by seed without NaN, as losses: ``log``: perplexities, as log perplexities."""
    values = values.dropna().astype(float)
    return values.map(math.log) if log else values


def percent_ahead(claimed: pd.Series, other: pd.Series, log: bool = False) -> pd.Series:
    """Per seed (the seeds both sides have): how far ``claimed``'s loss is below ``other``'s, in % of ``other``'s:
    ``100 * (other - claimed) / other`` (positive: ``claimed`` better). ``log``: the values are perplexities,
    compared as log perplexities (the loss they come from)."""
    claimed, other = _losses(claimed, log), _losses(other, log)
    shared = claimed.index.intersection(other.index)
    return 100 * (other[shared] - claimed[shared]) / other[shared]


def percent_effect(claimed: pd.Series, other: pd.Series, log: bool = False) -> Effect:
    """:func:`percent_ahead` as an :class:`lmstudy.claims.Effect`, by the rule of :func:`lmstudy.claims.paired`:
    the paired t interval on two or more shared seeds, else Welch's t on the two sides (each in % of ``other``'s
    mean), which with a single value on a side gives the difference alone (*one seed*)."""
    per_seed = percent_ahead(claimed, other, log)
    if len(per_seed) >= 2:
        return differences(per_seed)
    claimed, other = _losses(claimed, log), _losses(other, log)
    scale = 100 / other.mean() if len(other) else math.nan
    return unpaired((claimed * scale).tolist(), (other * scale).tolist(), "lower")


def _values(table: pd.DataFrame, metric: str, seed: int, **where) -> pd.Series:
    """``metric`` of the one row of a one-seed table (the grid, Table 6) matching ``where``, as values by seed
    (``seed``: the seed it ran); empty when there is no such row."""
    row = _one(table, **where)
    return pd.Series({seed: row[metric]}, dtype=float) if row is not None else pd.Series(dtype=float)


def _compare(claim: str, claimed: pd.Series, other: pd.Series, names: tuple[str, str], unit: str, *,
             log: bool = False, similar: bool = False, value_digits: int = 4, **fields) -> ClaimRow:
    """One claim from two sides' values by seed: ``claimed`` (the side the paper says is better, or no worse)
    against ``other``; the effect in % of ``other``'s loss (:func:`percent_effect`); ``similar``: the claim is an
    equivalence (within ± ``SIMILAR_PERCENT``), else directional (``NEGLIGIBLE_PERCENT``). ``value_digits``: of
    the two sides' values in ``ours``; ``fields``: the :class:`lmstudy.claims.ClaimRow`'s others."""
    if claimed.dropna().empty or other.dropna().empty:
        note = fields.pop("note", "")
        return ClaimRow.not_run(claim, f"needs the rows of {names[0]} and {names[1]}" + (note and f"; {note}"),
                                **fields)
    ours = (f"{names[0]} {Spread.of(claimed).format(value_digits)} vs {names[1]} "
            f"{Spread.of(other).format(value_digits)} {unit}"
            + ("" if len(claimed.dropna()) > 1 else f" (seed {claimed.dropna().index[0]})"))
    return ClaimRow(claim, percent_effect(claimed, other, log), ours=ours,
                    negligible=0.0 if similar else NEGLIGIBLE_PERCENT,
                    similar_within=SIMILAR_PERCENT if similar else None, **fields)


def _trend_claim(claim: str, trend: pd.DataFrame, kind: str, metric: str, unit: str, *, log: bool = False,
                 value_digits: int = 4, **fields) -> list[ClaimRow]:
    """Krony against the ``kind`` baseline on ``metric`` at every base checkpoint of ``trend``, per seed (paired:
    a seed is the same continued-training batches), and the trend of the effect over the base's tokens."""
    levels = [int(tokens) for tokens in sorted(trend["base_tokens"].unique())]
    values, texts = [], []
    for tokens in levels:
        krony, other = (by_seed(trend, metric, model=LABELS[side], base_tokens=tokens) for side in ("krony", kind))
        values.append(percent_ahead(krony, other, log).tolist())
        texts.append(f"Krony {Spread.of(krony).format(value_digits)} vs {LABELS[kind]} "
                     f"{Spread.of(other).format(value_digits)} {unit}")
    return trend_rows(claim, levels, values, ours=texts, negligible=NEGLIGIBLE_PERCENT, **fields)


def _paper_table4(column: str, krony: str, what: str) -> str:
    """The paper's Table 4 numbers of ``krony`` and DistilGPT2 on ``column``, with the effect in our unit."""
    table = PAPER_TABLE4.set_index("model")[column]
    effect = percent_ahead(pd.Series([table[krony]]), pd.Series([table["DistilGPT2"]]), log=True).iloc[0]
    return (f"{krony} {table[krony]:.2f} vs DistilGPT2 {table['DistilGPT2']:.2f} {what} perplexity (Table 4): "
            f"{effect:+.2f}%")


def claims(config: KronyConfig, grid: pd.DataFrame, table6_rows: pd.DataFrame, trend: pd.DataFrame) -> pd.DataFrame:
    """The paper's claims, as the paper states them, through :mod:`lmstudy.claims`' rule.

    Every effect is in % of the loss of the side compared against (bits per byte; LAMBADA's target
    perplexities as log perplexities), positive = the paper's direction; thresholds ``NEGLIGIBLE_PERCENT`` (0.1%)
    and, for the two "not much" claims, the equivalence margin ``SIMILAR_PERCENT`` (± 1%): both from the
    paper's smallest reported win, 1.16% (module constants).

    - "Our 81M model variant outperforms distilgpt2 ... on all standard language modeling datasets" (Abstract,
      Sec. 4.3): the ``compare_class`` Krony model against the distilled model (the DistilGPT2 analogue) from
      every base checkpoint, per seed (paired), with the trend over the base's training tokens, on WikiText-2
      test (bits per byte) and LAMBADA (target perplexity); WikiText-103 is not run (its test text is WikiText-2's).
    - "A fair comparison would be to initialize all the parameters ... with random values" (Sec. 5.2): the same
      against the scratch model (random init, the same tokens), WikiText-2.
    - "Empirical evidence shows no benefits [of distillation] compared to only vanilla supervised learning"
      (Sec. 1): not run. Our shared-base runs have no model trained both with and without distillation; the
      old-base study (git tag ``legacy-old-base``) had one such pair, one seed, and was retired with that base.
    - Van Loan and pruning initialisation pass on the pre-training (Sec. 3.4, 5.2): each beats random init, per
      class (the grid: seed 0).
    - "Adding multiple factors do not help much, but adding scalars can during training improve model
      performance" (Sec. 4.4, Table 6 left empty): 2 and 4 factors against 1 (equivalence) and scalars against none
      at each factor count (``table6_class``, Van Loan, seed 0).
    - "The scalers in the case of 4 factors ... always do converge to around 4" (Sec. 4.5): not run.

    The grid and Table 6 ran seed 0 only: their rows read *one seed* (no interval, no verdict). The trend's Krony
    init is the grid's lowest validation loss (:func:`best_init`); its rows' note says which and what test bits
    per byte would have picked.
    """
    seed, size = config.seeds[0], config.compare_class
    rows: list[ClaimRow] = []

    # The central claim, from every checkpoint of the base.
    krony_init = sorted(set(trend.loc[trend["model"] == LABELS["krony"], "init"]))
    by_validation, by_test = best_init(grid, size), best_init(grid, size, metric="wikitext_bpb")
    krony = grid[(grid["model"] == LABELS["krony"]) & (grid["class"] == size)].set_index("init")["best_val_loss"]
    losses = ", ".join(f"{init} {loss:.3f}" for init, loss in krony.sort_values().items())
    chosen = (f"Krony init {', '.join(krony_init)}: the grid's lowest validation loss (nats/token, seed 0: {losses}); "
              + ("test bits per byte picks the same" if by_test == by_validation else f"test bits per byte would "
                 f"pick {by_test}"))
    if krony_init != [by_validation]:
        chosen += f"; the trend ran {', '.join(krony_init)}, not the validation choice {by_validation}: rerun it"
    outperforms = f"Our {size} model variant outperforms distilgpt2 on all standard language modeling datasets"
    rows += _trend_claim(outperforms, trend, "distilled", "wikitext_bpb", "bits/byte",
                         paper=_paper_table4("wikitext2_ppl", "KronyPT-81M-1350", "WikiText-2"),
                         dataset="WikiText-2 test", note=f"effect: % of distilled's bits per byte. {chosen}")
    rows += _trend_claim(outperforms, trend, "distilled", "lambada_ppl", "target ppl", log=True, value_digits=1,
                         paper=_paper_table4("lambada_ppl", "KronyPT-81M-3950", "LAMBADA"), dataset="LAMBADA",
                         note="effect: % of distilled's log perplexity of the last word (per token, "
                              f"{config.lambada_examples or 5153} passages); the paper's LAMBADA measure is not stated")
    rows.append(ClaimRow.not_run(
        outperforms, "the protocol scores WikiText-2 test, whose articles are WikiText-103's test set too; the "
        "paper's two numbers differ by its evaluation, which we do not reproduce", dataset="WikiText-103",
        paper=_paper_table4("wikitext103_ppl", "KronyPT-81M-1350", "WikiText-103")))
    rows += _trend_claim("A fair comparison would be to initialize all the parameters of the new compressed model "
                         "with random values (Sec. 5.2): Krony against that model, the same tokens", trend, "scratch",
                         "wikitext_bpb", "bits/byte", dataset="WikiText-2 test",
                         note="effect: % of the scratch model's bits per byte; the paper argues it, does not run it")

    # Distillation: no run of ours trains one model both with and without it.
    no_distillation = ("Distillation: empirical evidence shows no benefits compared to only vanilla supervised "
                       "learning")
    for dataset in ("WikiText-2 test", "LAMBADA"):
        rows.append(ClaimRow.not_run(
            no_distillation, "our shared-base runs have no model trained both with and without distillation; the "
            "old-base study (git tag legacy-old-base) had one such pair, one seed", dataset=dataset,
            paper="no number"))

    # Initialisation, per class (the grid, seed 0).
    final = grid[grid["model"] == LABELS["krony"]]
    wordings = {"van_loan": "Van Loan init passes on the pre-training ('VL is not a random initialization', Sec. 5.2)",
                "prune": "The pruning-based initialization (Sec. 3.4.2) passes on the pre-training"}
    for size_class in config.classes:
        for init in [init for init in ("van_loan", "prune") if init in config.inits and "random" in config.inits]:
            rows.append(_compare(
                f"{wordings[init]}: beats random init, {size_class} class",
                _values(final, "wikitext_bpb", seed, **{"class": size_class, "init": init}),
                _values(final, "wikitext_bpb", seed, **{"class": size_class, "init": "random"}), (init, "random"),
                "bits/byte", dataset="WikiText-2 test", paper="no number",
                note="the grid ran seed 0 only (the trend's other seeds are of one init: random has none to pair)"))

    # Table 6: several factors, scalars (seed 0).
    for n in config.table6_factors:
        if n > 1:
            rows.append(_compare(
                f"Adding multiple factors do not help much (Sec. 4.4): {n} factors vs 1, {config.table6_class} class",
                _values(table6_rows, "wikitext_bpb", seed, factors=n, scalars=False),
                _values(table6_rows, "wikitext_bpb", seed, factors=1, scalars=False), (f"{n} factors", "1"),
                "bits/byte", similar=True, dataset="WikiText-2 test", paper="Table 6 left empty",
                note=f"equivalence within ± {SIMILAR_PERCENT:g}% of 1 factor's bits per byte; Van Loan init, no "
                     "scalars; the paper compares 4 factors at 92.2M with its 96M class"))
    for n in config.table6_factors:
        rows.append(_compare(
            f"Adding scalars can during training improve model performance (Sec. 4.4): {n} factor(s), "
            f"{config.table6_class} class",
            _values(table6_rows, "wikitext_bpb", seed, factors=n, scalars=True),
            _values(table6_rows, "wikitext_bpb", seed, factors=n, scalars=False), ("scalars", "none"), "bits/byte",
            dataset="WikiText-2 test", paper="Table 6 left empty", note="Van Loan init; Table 6 ran one seed",
            digits=3))
    rows.append(ClaimRow.not_run(
        "The scalers in the case of 4 factors, no matter what the initialization is, always do converge to around 4 "
        "(Sec. 4.5)", "the archived runs keep metrics and logs, not weights, and the log does not record the scalars; "
        "reading them needs the 4-factor run retrained with its weights kept", paper="about 4"))
    return claims_table(rows)


def published_claims() -> pd.DataFrame:
    """The published claims table (``figures/03_krony_claims.csv``, ``python -m lmstudy claims 03``) from the
    committed tables of the cpu run only (``figures/03_krony_grid.csv``, ``_table6.csv``, ``_trend.csv``, written
    from the archived runs ``results/runs/03_krony_shared``):
    :func:`claims` with the cpu preset, nothing trained or loaded."""
    figures = figures_dir()
    grid, rows6, trend = (pd.read_csv(figures / f"03_krony_{name}.csv") for name in ("grid", "table6", "trend"))
    return claims(KronyConfig(**preset(STUDY_NOTEBOOK, "cpu")), grid, rows6, trend)


# ---------------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------------


def plot_trend(gaps: pd.DataFrame, title: str = ""):
    """Krony minus each baseline in WikiText-2 bits per byte against the base's training tokens: every seed
    (dots) and the mean with its seed std (error bars); below zero, Krony is better."""
    from lmstudy.plots import gap_trend

    return gap_trend(gaps, "base_tokens", {"krony_minus_distilled": "Krony − distilled",
                                           "krony_minus_scratch": "Krony − scratch, equal data"},
                     xlabel="base training tokens", ylabel="gap in WikiText-2 bits per byte",
                     title=title or "Krony minus same-size dense models (below 0: Krony better)")


def plot_grid(grid: pd.DataFrame, title: str = ""):
    """WikiText-2 bits per byte before and after continued training for every model of the grid; the base and
    the dense baselines' scores after training as lines."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid")
    krony = grid[grid["model"] == LABELS["krony"]]
    long = pd.concat([krony.assign(stage="after compression", bpb=krony["before_wikitext_bpb"]),
                      krony.assign(stage="after continued training", bpb=krony["wikitext_bpb"])])
    long = long.assign(label=long["class"] + " " + long["init"])
    figure, axis = plt.subplots(figsize=(8, 3.8))
    sns.barplot(data=long, x="label", y="bpb", hue="stage", ax=axis)
    others = grid[~grid["model"].isin([LABELS["krony"]])]
    for (_, row), colour in zip(others.iterrows(), sns.color_palette("dark", len(others))):
        name = row["model"] if row["model"] == "base" else f"{row['model']} ({row['class']})"
        axis.axhline(row["wikitext_bpb"], color=colour, linestyle="--" if row["model"] == "base" else ":", label=name)
    # A random init's score before training would flatten every other bar: clip the axis above the rest.
    top = min(long["bpb"].max(), 1.25 * long["bpb"].median()) * 1.02
    axis.set_ylim(min(long["bpb"].min(), others["wikitext_bpb"].min()) * 0.95, top)
    axis.set(xlabel="", ylabel="WikiText-2 bits per byte", title=title)
    axis.tick_params(axis="x", rotation=30)
    axis.legend(fontsize=8)
    figure.tight_layout()
    return figure


# ---------------------------------------------------------------------------------------------------
# Reconstruction error
# ---------------------------------------------------------------------------------------------------


def _squared_singular_values(matrix: torch.Tensor) -> torch.Tensor:
    """The squared singular values of ``matrix``, largest first, as the eigenvalues of its smaller Gram matrix.

    Only tail sums are needed (the error of the best rank-k fit is ``sqrt(sum(sigma[k:]**2))``), and in float64 the
    Gram route gives them to rounding: GPT-2 small's ``c_fc`` is a 768 x 768 ``eigvalsh`` instead of a 3072 x 768
    SVD, a third of the time (the SVD was a seventh of notebook 03's paper dry run).
    """
    gram = matrix.T @ matrix if matrix.shape[0] >= matrix.shape[1] else matrix @ matrix.T
    return torch.linalg.eigvalsh(gram).flip(0).clamp(min=0)  # ascending -> largest first; rounding can dip below 0


def reconstruction_errors(model: GPT2LMHeadModel, classes: list[str]) -> pd.DataFrame:
    """Per block, MLP matrix and size class: the relative Frobenius error ``||W - A ⊗ B|| / ||W||`` of the rank-1
    Van Loan factors, the Eckart–Young bound from the singular values of the rearranged ``R(W)`` (they coincide:
    Van Loan is optimal) and, as a reference, the best truncated SVD of ``W`` with at most the pair's parameters."""
    rows = []
    n_embd = model.config.n_embd
    for index, block in enumerate(model.transformer.h):
        for matrix in ("c_fc", "c_proj"):
            weight = getattr(block.mlp, matrix).weight.detach().T.double()  # HF (in, out) -> paper (out, in)
            norm = weight.norm()
            squared_singular_values = _squared_singular_values(weight)  # W's, the same for every class
            for size_class in classes:
                kron = KroneckerConfig(a_shape=class_a_shape(size_class, n_embd, model.config.n_inner))
                a_shape = kron.a_shape_for(matrix)
                b_shape = partner_shape(tuple(weight.shape), a_shape)
                a, b = van_loan(weight, a_shape, b_shape)
                error = (weight - torch.kron(a[0], b[0])).norm() / norm
                (p, q), (r, t) = a_shape, b_shape
                rearranged = weight.reshape(p, r, q, t).permute(0, 2, 1, 3).reshape(p * q, r * t)  # R(W): (p*q, r*t)
                # Eckart–Young: the error of the best rank-1 approximation of R(W)
                bound = _squared_singular_values(rearranged)[1:].sum().sqrt() / norm
                # Truncated SVD of W itself with at most the pair's parameter count (k * (out + in) <= p*q + r*t).
                k = factor_pair_parameters(a_shape, b_shape) // sum(weight.shape)
                lowrank = squared_singular_values[k:].sum().sqrt() / norm
                rows.append({"layer": index, "matrix": matrix, "class": size_class,
                             "van_loan_error": error.item(), "svd_bound": bound.item(),
                             "lowrank_same_params_error": lowrank.item(), "lowrank_rank": k})
    return pd.DataFrame(rows)


def plot_reconstruction(errors: pd.DataFrame, title: str = ""):
    """Van Loan error per layer (markers) against the SVD bound (line), one panel per MLP matrix."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid")
    figure, axes = plt.subplots(1, 2, figsize=(9, 3.5), sharey=True)
    for axis, matrix in zip(axes, ("c_fc", "c_proj")):
        part = errors[errors["matrix"] == matrix]
        sns.lineplot(data=part, x="layer", y="svd_bound", hue="class", ax=axis, legend=False)
        sns.scatterplot(data=part, x="layer", y="van_loan_error", hue="class", marker="o", s=50, ax=axis)
        sns.scatterplot(data=part, x="layer", y="lowrank_same_params_error", hue="class", marker="x", s=50,
                        ax=axis, legend=False)
        axis.set(xlabel="block", ylabel="relative Frobenius error", title=f"mlp.{matrix}")
        axis.set_xticks(sorted(part["layer"].unique()))
    figure.suptitle(title or "Van Loan (o) vs SVD bound (line) vs low-rank, same parameters (x)")
    figure.tight_layout()
    return figure
