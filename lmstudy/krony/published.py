"""The published cpu run of 03_kronecker on the OLD base, kept so its archived runs replay byte for byte.

Before the shared base (:mod:`lmstudy.base`) existed, the Krony-PT study pretrained its own 4x256 GPT-2 on
2M Wikipedia tokens (:mod:`lmstudy.wiki_base`) and compared its compressed models with a dense same-size model
and a distilled student trained *from scratch* on the same total token budget. That run is archived in
``results/runs/03_kronecker`` and its tables are ``figures/03_kronecker_results.csv`` and
``figures/03_kronecker_table6.csv`` (README, "Krony-PT"); ``tests/test_published_runs.py`` replays these table
builders with the run cache answered from the archive. The study itself moved to the shared base
(:mod:`lmstudy.krony.study`, run-cache study ``03_krony_shared``); nothing here changes, because a changed run
config would no longer find its archived run.

- ``PUBLISHED_CPU``: the preset the run was published with (the old ``03_kronecker`` cpu preset), frozen here;
- ``compressed_run``: compress the base (one class, one init), evaluate, continue training, evaluate again;
- ``dense_baseline_run`` / ``distilled_run``: the same-size dense model from scratch on the total token budget,
  plain or distilled from the base (``DistillTask``), from the same random initial weights;
- ``results_table`` / ``table6``: the published tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import torch
from transformers import GPT2LMHeadModel

from lmstudy.krony.model import KroneckerConfig, compress
from lmstudy.krony.study import CLASSES, PAPER_RATIOS, DistillTask, class_a_shape, matched_dense_inner
from lmstudy.runs import Run, cached
from lmstudy.scales import WIKI_BASE
from lmstudy.training import count_parameters
from lmstudy.wiki_base import STUDY, WikiBaseConfig, evaluate, gpt2_config, load_base, pretrain_base, train_on

# The published run's preset: the Wikipedia cpu base and 150 steps of continued training for each of the 9
# (class, init) models and Table 6's two; the dense and distilled comparisons for the 81M class only.
PUBLISHED_CPU: dict = dict(
    **WIKI_BASE["cpu"], classes=["96M", "81M", "67M"], inits=["van_loan", "prune", "random"],
    finetune_steps=150, finetune_lr=3e-4, table6_class="67M", table6_factors=4, baseline_classes=["81M"],
    distill_alpha=0.9, distill_temperature=2.0,
)


@dataclass(frozen=True)
class PublishedConfig(WikiBaseConfig):
    """The old study's fields: the Wikipedia base's (``WikiBaseConfig``) and its compression grid."""

    classes: list = field(default_factory=lambda: list(CLASSES))
    inits: list = field(default_factory=lambda: ["van_loan", "prune", "random"])
    finetune_steps: int = 100
    finetune_lr: float = 1e-3
    table6_class: str = "67M"  # "" skips Table 6
    table6_factors: int = 4
    baseline_classes: list = field(default_factory=lambda: list(CLASSES))
    distill_alpha: float = 0.9
    distill_temperature: float = 2.0

    def __post_init__(self) -> None:
        unknown = {*self.classes, *self.baseline_classes, *([self.table6_class] if self.table6_class else [])} - set(CLASSES)
        if unknown:
            raise ValueError(f"unknown size class(es) {sorted(unknown)}; choose from {', '.join(CLASSES)}")


def published_config() -> PublishedConfig:
    """The config of the published cpu run."""
    return PublishedConfig(**PUBLISHED_CPU)


def compressed_run(config: PublishedConfig, size_class: str, init: str, n_factors: int = 1,
                   scalars: bool = False) -> dict:
    """Cached: compress the base, evaluate, continue training, evaluate again."""
    run_config = {"stage": "compressed", "base": config.base_config(), "class": size_class, "init": init,
                  "n_factors": n_factors, "scalars": scalars, "finetune_steps": config.finetune_steps,
                  "finetune_lr": config.finetune_lr, "eval_every": config.eval_every,
                  "wikitext_tokens": config.wikitext_tokens, "lambada_examples": config.lambada_examples}

    def fn(run: Run) -> dict:
        model, data = load_base(config)
        base_parameters = count_parameters(model)
        kron = KroneckerConfig(a_shape=class_a_shape(size_class, config.n_embd), n_factors=n_factors, scalars=scalars)
        compress(model, kron, init, generator=torch.Generator().manual_seed(config.seed))
        before = {f"before_{key}": value for key, value in evaluate(model, data, config).items()}
        metrics = train_on(model, data, config, run, config.finetune_steps, config.finetune_lr)
        return {**metrics, **before, **evaluate(model, data, config), "parameters": count_parameters(model),
                "size_ratio": count_parameters(model) / base_parameters, "a_shape": list(kron.a_shape)}

    return cached(STUDY, run_config, fn)


def _matched_dense_model(config: PublishedConfig, data, target_parameters: int) -> tuple[GPT2LMHeadModel, int]:
    """A freshly initialised (seeded) dense GPT-2 whose MLP width gives ~``target_parameters``, and that width."""
    inner = matched_dense_inner(gpt2_config(config, len(data.tokenizer)), target_parameters)
    torch.manual_seed(config.seed)
    return GPT2LMHeadModel(gpt2_config(config, len(data.tokenizer), n_inner=inner)), inner


def dense_baseline_run(config: PublishedConfig, target_parameters: int) -> dict:
    """Cached: a dense GPT-2 with ~``target_parameters``, from scratch, on the total token budget."""
    run_config = {"stage": "dense", "base": config.base_config(), "target_parameters": target_parameters,
                  "finetune_steps": config.finetune_steps, "eval_every": config.eval_every,
                  "wikitext_tokens": config.wikitext_tokens, "lambada_examples": config.lambada_examples}

    def fn(run: Run) -> dict:
        _, data = load_base(config)
        model, inner = _matched_dense_model(config, data, target_parameters)
        metrics = train_on(model, data, config, run, config.pretrain_steps + config.finetune_steps, config.lr)
        return {**metrics, **evaluate(model, data, config), "parameters": count_parameters(model), "n_inner": inner}

    return cached(STUDY, run_config, fn)


def distilled_run(config: PublishedConfig, target_parameters: int) -> dict:
    """Cached: the dense model of ``dense_baseline_run`` (same size, init, budget), distilled from the base."""
    run_config = {"stage": "distilled", "base": config.base_config(), "target_parameters": target_parameters,
                  "finetune_steps": config.finetune_steps, "eval_every": config.eval_every,
                  "alpha": config.distill_alpha, "temperature": config.distill_temperature,
                  "wikitext_tokens": config.wikitext_tokens, "lambada_examples": config.lambada_examples}

    def fn(run: Run) -> dict:
        teacher, data = load_base(config)
        model, inner = _matched_dense_model(config, data, target_parameters)  # the dense baseline's initial weights
        task = DistillTask(data.train, data.valid, batch_size=config.batch_size, seq_len=config.seq_len,
                           seed=config.seed, teacher=teacher, alpha=config.distill_alpha,
                           temperature=config.distill_temperature)
        metrics = train_on(model, data, config, run, config.pretrain_steps + config.finetune_steps, config.lr, task)
        return {**metrics, **evaluate(model, data, config), "parameters": count_parameters(model), "n_inner": inner}

    return cached(STUDY, run_config, fn)


RESULT_COLUMNS = ["model", "class", "init", "parameters", "n_inner", "size_ratio", "paper_ratio",
                  "before_wikitext_ppl", "wikitext_ppl", "before_lambada_ppl", "lambada_ppl",
                  "before_lambada_acc", "lambada_acc"]


def results_table(config: PublishedConfig) -> pd.DataFrame:
    """Every model of the published run as one row (``figures/03_kronecker_results.csv``).

    ``model`` is "base (dense)", "Krony", "dense, same size" or "distilled"; ``n_inner`` is the MLP width of
    the dense rows (the base's is ``4 * n_embd``).
    """
    base = pretrain_base(config)
    rows = [{"model": "base (dense)", "class": "", "init": "", "parameters": base["parameters"], "size_ratio": 1.0,
             **{key: base[key] for key in ("wikitext_ppl", "lambada_ppl", "lambada_acc")}}]
    for size_class in config.classes:
        sizes = []
        for init in config.inits:
            metrics = compressed_run(config, size_class, init)
            sizes.append(metrics["parameters"])
            rows.append({"model": "Krony", "class": size_class, "init": init,
                         "paper_ratio": PAPER_RATIOS[size_class],
                         **{key: metrics[key] for key in RESULT_COLUMNS if key in metrics}})
        if size_class in config.baseline_classes and sizes:
            for model, run_fn, init in (("dense, same size", dense_baseline_run, "scratch"),
                                        ("distilled", distilled_run, "scratch, KD from base")):
                metrics = run_fn(config, sizes[0])
                rows.append({"model": model, "class": size_class, "init": init,
                             "parameters": metrics["parameters"], "n_inner": metrics["n_inner"],
                             "size_ratio": metrics["parameters"] / base["parameters"],
                             **{key: metrics[key] for key in ("wikitext_ppl", "lambada_ppl", "lambada_acc")}})
    return pd.DataFrame(rows).reindex(columns=RESULT_COLUMNS)


def table6(config: PublishedConfig) -> pd.DataFrame:
    """The published Table 6 (``figures/03_kronecker_table6.csv``): Van Loan init, ``table6_class`` shapes,
    1 factor, ``table6_factors`` factors without and with scalars, the same continued training."""
    rows = []
    for n_factors, scalars in ((1, False), (config.table6_factors, False), (config.table6_factors, True)):
        metrics = compressed_run(config, config.table6_class, "van_loan", n_factors, scalars)
        rows.append({"factors": n_factors, "scalars": scalars, "parameters": metrics["parameters"],
                     **{key: metrics[key] for key in ("before_wikitext_ppl", "wikitext_ppl", "lambada_ppl",
                                                      "lambada_acc")}})
    return pd.DataFrame(rows)
