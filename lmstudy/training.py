"""The one training loop of lmstudy: every model (AWD-LSTM, GPT-2 variants, Kronecker GPT-2, CTRL)
is trained by ``train(model, task, config, run)``.

Built on ``accelerate.Accelerator``, so the same code runs on CPU, one GPU or several, with mixed
precision when asked. What a model needs beyond "forward, backward, step" lives in its
``TrainTask`` (the batches, the loss, the evaluation, and optional hooks), never in the loop.

The task contract (subclass ``TrainTask``):

- ``batches(epoch)``: an iterable of batches. It must be *deterministic* for a given epoch (seed
  it from the task's seed and ``epoch``): after an interruption the loop fast-forwards through
  the current epoch's first batches to reach the exact batch where training stopped.
- ``loss(model, batch)`` -> loss tensor, or ``(loss, extras)`` with a dict of floats to log.
  Stateful tasks (AWD-LSTM carries its hidden state from batch to batch) set ``stateful = True``
  and implement ``loss(model, batch, carry) -> (loss, extras, carry)``: ``carry`` is ``None`` at
  the start of every epoch, is otherwise what the previous call returned, and must come back
  detached from the graph. It may be a tensor or nested tuples/lists of tensors, and is saved in
  checkpoints so that resuming mid-epoch is exact.
- ``evaluate(model)`` -> ``{"val_loss": ..., ...}``: called in eval mode under ``torch.no_grad``.
- ``on_eval(state, metrics, optimizer)`` (optional): called after each periodic evaluation. To
  change the optimizer (AWD-LSTM's NT-ASGD switches from SGD to averaged SGD when validation
  stops improving) return a new ``torch.optim`` optimizer over the model's parameters; the loop
  adopts it, and checkpoints record its class, hyperparameters and state. ``state.history``
  lists every evaluation so far, so such decisions need no state of the task's own (attributes
  of the task are not checkpointed).
- ``eval_weights(model)`` (optional): a context manager inside which the model holds the weights
  to evaluate *and* to keep as ``best/`` (AWD-LSTM: ASGD's running averages once it has switched);
  by default the model's own weights. Evaluation and the best-weights save both run inside it, so
  ``best/`` always holds the weights its validation score was measured with.
- ``task.optimizer`` is set by the loop to the optimizer in use (also after a resume or a
  switch), e.g. for ``eval_weights`` to swap in ASGD's averaged weights.
- ``batch_lr(lr, batch)`` (optional): the learning rate of the step on ``batch`` given the scheduled one
  (AWD-LSTM scales it by the window length); by default the scheduled one.
- ``batch_weight(batch)`` (optional): how much a part of a batch counts in the batch's mean loss when the
  loop cuts batches into parts (below): for a loss averaged over a varying number of tokens (padding), that
  number; ``None`` (the default) when every part counts the same.
- Every tensor of a batch holds the batch's rows on dimension 0 (tuples, lists, dicts and dataclasses of
  tensors are fine), and so does every tensor of a stateful task's carry.

Decisions:

- A *step* is one optimizer update on one batch. ``eval_every``/``checkpoint_every``/``log_every``
  count steps; early-stopping patience counts evaluations (those the task's ``patience_counts()`` lets
  count: AWD-LSTM's only once NT-ASGD has switched). Training ends at ``max_steps`` or
  after ``max_epochs`` passes over ``batches``, whichever comes first, or when early stopping
  fires. A final evaluation and a final checkpoint are always made.
- The learning-rate schedule is a function of the step (``lr_multiplier``) applied to each param
  group's ``initial_lr`` before every step, not a torch scheduler object: its only state is the
  step, and it survives a task replacing the optimizer. The loop owns ``group["lr"]``; a task that
  wants to rescale the learning rate changes ``group["initial_lr"]``.
- Weight decay applies to parameters with two or more dimensions (matrices, embeddings), not to
  biases and norm gains (nanoGPT / HF convention). Frozen parameters (``requires_grad=False``)
  are not given to the optimizer.
- A checkpoint (``run.checkpoint_dir/step-NNNNNNNNN/``, written by ``lmstudy.checkpoints``, which says how)
  holds the weights, the optimizer's state, every process's RNG states and carry, and the ``TrainState`` and
  ``TrainConfig`` (JSON; nothing is ever unpickled); the latest complete checkpoint always exists. On resume
  ``log.jsonl`` is cut back to the checkpoint's step, so the log never holds a step twice, and a checkpoint
  written with another ``TrainConfig`` is refused. The checkpoint of a finished run (the
  final one) has no optimizer state: nothing steps again (a longer run is another config, another
  run), and for AdamW it would be twice the weights, written in seconds per 100M parameters.
  Reading a finished run back through ``train`` builds a fresh optimizer in its place.
- The best weights (lowest ``early_stopping_metric`` seen at an evaluation) are kept in
  ``run.best_dir/model.safetensors`` whenever evaluations report that metric; ``load_weights``
  reads them (or the last checkpoint) back for test-set evaluation. ``train`` returns the final
  evaluation's metrics, the same metrics prefixed ``best_`` for the best evaluation, and
  ``steps``, ``epochs`` (completed passes), ``best_step``, ``stopped_early``. After ``train`` the
  model object holds the *final* weights; ``train_and_restore`` (what the studies call) trains, loads
  the best weights back and optionally merges an evaluation of them into the metrics.
- Several processes and gradient accumulation (``TrainConfig.grad_accum_steps``): a batch of
  ``batches(epoch)`` is always the *global* batch of one step. Every process builds the same batches and
  cuts each into ``processes x grad_accum_steps`` equal parts along dimension 0 (``split_batch``, what
  accelerate's ``split_batches=True`` does to a DataLoader's batches, also for dataclass batches, and
  without sending batches between processes); process r trains on parts ``r*A .. r*A+A-1`` one after the
  other inside ``accelerator.accumulate`` (A = grad_accum_steps), and DDP averages the gradients. A
  part's loss is scaled by its ``batch_weight`` share, so the update is that of the whole batch on one
  process (within float rounding: the sums are ordered differently). A stateful task keeps one carry per
  part (row r of a part continues row r of the same part of the previous batch). Every process gets its
  own seed (``seed + process index``, so dropout masks differ between parts) and its RNG states and carries
  are gathered into the checkpoint, so a run resumes exactly with the same number of processes (another
  number is refused). Every process evaluates; the main process's metrics are broadcast, so NT-ASGD and
  early stopping decide the same everywhere. The logged loss and extras are the whole batch's (summed over
  processes). Only the main process writes logs, checkpoints and best weights.
  Launch: ``accelerate launch --multi_gpu --num_processes N script.py`` (CPU: with ``ACCELERATE_USE_CPU=1``,
  gloo; see docs/scaling-up.md, "Several processes").

Log records (``log.jsonl``, one JSON object a line): ``{"kind": "train", "step", "epoch", "train_s",
"lr", "loss", "grad_norm", **extras}`` every ``log_every`` steps (``train_s``: seconds spent in ``train()``
up to that step, summed over resumes) and ``{"kind": "eval", "step", "epoch",
**metrics}`` at each evaluation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import (GradientAccumulationPlugin, broadcast_object_list, gather_object, send_to_device,
                               set_seed)
from accelerate.utils.operations import honor_type
from tqdm.auto import tqdm

from lmstudy.checkpoints import (latest_checkpoint, load_weights, read_checkpoint, restore_checkpoint, rng_state,
                                 save_best, save_checkpoint)
from lmstudy.runs import Run, atomic_write_text, process_state, read_log_records, to_jsonable

OPTIMIZERS = ("adamw", "sgd")
LR_SCHEDULES = ("constant", "cosine")
MIXED_PRECISION = ("no", "fp16", "bf16")


@dataclass
class TrainConfig:
    """How to train (the task holds what to train on: batch size, sequence length, data)."""

    max_steps: int | None = None
    max_epochs: int | None = None
    lr: float = 1e-3
    weight_decay: float = 0.0
    optimizer: str = "adamw"  # "adamw" | "sgd"
    betas: tuple[float, float] = (0.9, 0.999)  # adamw
    momentum: float = 0.0  # sgd
    grad_clip: float | None = 1.0  # max global L2 norm of the gradients; None: no clipping
    lr_schedule: str = "constant"  # "constant" | "cosine" (cosine decays to lr * min_lr_ratio)
    warmup_steps: int = 0  # linear warm-up, for either schedule
    min_lr_ratio: float = 0.1  # nanoGPT: min_lr = lr / 10
    eval_every: int | None = None  # steps; None: evaluate only at the end
    checkpoint_every: int | None = None  # steps; None: checkpoint only at the end
    early_stopping_patience: int | None = None  # evaluations without improvement; None: never stop
    early_stopping_metric: str = "val_loss"  # lower is better; also selects the best/ weights
    seed: int = 0
    log_every: int = 10
    mixed_precision: str = "no"  # "no" | "fp16" | "bf16"
    # Steps whose checkpoints are written and never deleted (the shared base keeps 10%/30%/100%).
    keep_checkpoints: tuple[int, ...] = ()
    # Optimizer steps are taken on the whole batch in this many parts, one after the other (same update,
    # less memory); the task's batch size must be a multiple of grad_accum_steps x processes.
    grad_accum_steps: int = 1

    def __post_init__(self) -> None:
        if self.max_steps is None and self.max_epochs is None:
            raise ValueError("TrainConfig needs max_steps or max_epochs (or both)")
        for name in ("max_steps", "max_epochs", "eval_every", "checkpoint_every", "log_every",
                     "early_stopping_patience", "grad_accum_steps"):
            value = getattr(self, name)
            if (value is not None or name == "grad_accum_steps") and (not isinstance(value, int) or value < 1):
                raise ValueError(f"TrainConfig.{name} must be a positive integer or None, got {value!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"TrainConfig.optimizer {self.optimizer!r} is not one of {OPTIMIZERS}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"TrainConfig.lr_schedule {self.lr_schedule!r} is not one of {LR_SCHEDULES}")
        if self.lr_schedule == "cosine" and self.max_steps is None:
            raise ValueError("the cosine schedule decays over max_steps: set TrainConfig.max_steps")
        if self.mixed_precision not in MIXED_PRECISION:
            raise ValueError(
                f"TrainConfig.mixed_precision {self.mixed_precision!r} is not one of {MIXED_PRECISION}"
            )
        if self.early_stopping_patience is not None and self.eval_every is None:
            raise ValueError("early stopping needs periodic evaluations: set TrainConfig.eval_every")
        if self.warmup_steps < 0:
            raise ValueError(f"TrainConfig.warmup_steps must be >= 0, got {self.warmup_steps}")
        if any(not isinstance(step, int) or step < 1 for step in self.keep_checkpoints):
            raise ValueError(f"TrainConfig.keep_checkpoints must hold positive step numbers, got {self.keep_checkpoints}")
        self.keep_checkpoints = tuple(sorted(set(self.keep_checkpoints)))


@dataclass
class TrainState:
    """Where training stands; saved in every checkpoint (JSON)."""

    step: int = 0  # optimizer updates done
    epoch: int = 0  # current pass over task.batches (= passes completed)
    batch_in_epoch: int = 0  # batches of the current epoch already trained on
    best_metric: float | None = None
    best_step: int | None = None
    best_metrics: dict = field(default_factory=dict)
    evals_since_best: int = 0
    last_eval_step: int | None = None
    last_metrics: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)  # {"step": ..., **metrics} per evaluation
    stopped_early: bool = False
    train_seconds: float = 0.0  # wall-clock time inside train() up to ``step``, summed over resumes


class TrainTask:
    """What a model plugs into ``train``; see the module docstring for the contract."""

    stateful: bool = False
    optimizer: torch.optim.Optimizer | None = None  # set by train(): the optimizer in use

    def batches(self, epoch: int) -> Iterable[Any]:
        raise NotImplementedError(f"{type(self).__name__} must implement batches(epoch)")

    def loss(self, model, batch, *carry):
        raise NotImplementedError(f"{type(self).__name__} must implement loss(model, batch)")

    def evaluate(self, model) -> dict[str, float]:
        raise NotImplementedError(f"{type(self).__name__} must implement evaluate(model)")

    def on_eval(self, state: TrainState, metrics: dict[str, float], optimizer) -> torch.optim.Optimizer | None:
        return None

    def eval_weights(self, model) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def patience_counts(self) -> bool:
        """Whether an evaluation without improvement counts towards early stopping now (a task in a phase that
        must run its course first says no)."""
        return True

    def batch_lr(self, lr: float, batch) -> float:
        """The learning rate of the step on ``batch`` (the whole batch) given the scheduled ``lr``."""
        return lr

    def batch_weight(self, batch) -> float | None:
        """How much this part of a batch counts in the batch's mean loss; None: every part the same."""
        return None


# --------------------------------------------------------------------------------------------
# optimizer and schedule


def build_optimizer(model: torch.nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """AdamW or SGD over the trainable parameters; weight decay on matrices/embeddings only."""
    trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    if not trainable:
        raise ValueError("the model has no trainable parameters (all have requires_grad=False)")
    decay = [p for _, p in trainable if p.dim() >= 2]
    no_decay = [p for _, p in trainable if p.dim() < 2]
    groups = [
        {"params": params, "weight_decay": wd}
        for params, wd in ((decay, config.weight_decay), (no_decay, 0.0))
        if params
    ]
    if config.optimizer == "adamw":
        return adamw(groups, lr=config.lr, betas=tuple(config.betas))
    return torch.optim.SGD(groups, lr=config.lr, momentum=config.momentum)


def adamw(params, **options) -> torch.optim.AdamW:
    """``torch.optim.AdamW`` with torch's fused kernel where it has one (CPU and CUDA): one pass over each tensor
    instead of a dozen. On the CPU with one thread a step over GPT-2 small's 124M parameters takes 0.09 s instead
    of 0.69 (``benchmarks/bench_optimizer.py``). The results differ from the unfused loop in the last bits of a
    float."""
    params = list(params)
    tensors = [p for group in params for p in (group["params"] if isinstance(group, dict) else [group])]
    fused = all(p.device.type in ("cpu", "cuda") for p in tensors)
    return torch.optim.AdamW(params, fused=fused, **options)


def lr_multiplier(step: int, config: TrainConfig) -> float:
    """Factor applied to the base learning rate for the update that follows ``step`` updates."""
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    if config.lr_schedule == "constant":
        return 1.0
    progress = min(1.0, (step - config.warmup_steps) / max(1, config.max_steps - config.warmup_steps))
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return config.min_lr_ratio + (1.0 - config.min_lr_ratio) * cosine


def _adopt(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    # The schedule scales each group's initial_lr; a new optimizer starts from its own lr.
    for group in optimizer.param_groups:
        group.setdefault("initial_lr", group["lr"])
    return optimizer


def _set_lr(optimizer, config: TrainConfig, step: int, task: TrainTask, batch) -> float:
    """Set every group's lr for the step on ``batch``; returns the scheduled lr of the first group."""
    factor = lr_multiplier(step, config)
    for group in optimizer.param_groups:
        group["lr"] = task.batch_lr(group["initial_lr"] * factor, batch)
    return optimizer.param_groups[0]["initial_lr"] * factor


def _unwrap_optimizer(optimizer) -> torch.optim.Optimizer:
    # accelerate wraps optimizers in AcceleratedOptimizer; hooks and checkpoints want the real one.
    return getattr(optimizer, "optimizer", optimizer)


# --------------------------------------------------------------------------------------------
# checkpoints (their files: lmstudy.checkpoints)


def _load_checkpoint(path: Path, model, config: TrainConfig, rank: int = 0, processes: int = 1):
    """Restore weights and process ``rank``'s RNG; returns (optimizer, state, carry of ``rank``)."""
    payload = read_checkpoint(path, processes)
    # A field added to TrainConfig after the checkpoint was written counts as its default there.
    defaults = {f.name: to_jsonable(f.default) for f in dataclasses.fields(TrainConfig)
                if f.default is not dataclasses.MISSING}
    saved = {**defaults, **payload["train_config"]}
    changed = sorted(k for k, v in to_jsonable(config).items() if saved.get(k) != v)
    if changed:
        raise ValueError(
            f"checkpoint {path} was written with another TrainConfig (differs in {changed}): "
            "train with the original config or start a new run"
        )
    optimizer, carry = restore_checkpoint(path, payload, model, rank)
    if optimizer is None:  # a finished run's checkpoint: nothing will step again
        optimizer = build_optimizer(model, config)
    return optimizer, TrainState(**payload["train_state"]), carry


def count_parameters(model: torch.nn.Module) -> int:
    """Number of distinct parameters (``parameters()`` yields a tied embedding once)."""
    return sum(parameter.numel() for parameter in model.parameters())


# --------------------------------------------------------------------------------------------
# the loop


def _truncate_log(path: Path, step: int) -> None:
    """Keep only records of steps <= ``step`` (those the checkpoint being resumed has seen)."""
    if not path.exists():
        return
    kept = [r for r in read_log_records(path) if r.get("step", 0) <= step]
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in kept))


def split_batch(batch: Any, parts: int) -> list[Any]:
    """``batch`` cut into ``parts`` equal parts along dimension 0 of every tensor it holds.

    Tensors are cut with ``torch.chunk`` (views, no copy); tuples (named ones too), lists, dicts and dataclasses
    are cut field by field; anything else (numbers, strings, 0-d tensors) is shared by every part. One part is
    the batch itself.
    """
    if parts == 1:
        return [batch]
    if isinstance(batch, torch.Tensor):
        if batch.dim() == 0:
            return [batch] * parts
        if batch.size(0) % parts:
            raise ValueError(
                f"a batch of {batch.size(0)} rows cannot be cut into {parts} equal parts (processes x "
                f"TrainConfig.grad_accum_steps): make the task's batch size a multiple of {parts}"
            )
        return list(batch.chunk(parts))
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        fields = {f.name: split_batch(getattr(batch, f.name), parts) for f in dataclasses.fields(batch) if f.init}
        return [dataclasses.replace(batch, **{name: cut[i] for name, cut in fields.items()}) for i in range(parts)]
    if isinstance(batch, (tuple, list)):
        cuts = [split_batch(value, parts) for value in batch]
        return [honor_type(batch, (cut[i] for cut in cuts)) for i in range(parts)]
    if isinstance(batch, dict):
        cuts = {key: split_batch(value, parts) for key, value in batch.items()}
        return [type(batch)({key: cut[i] for key, cut in cuts.items()}) for i in range(parts)]
    return [batch] * parts


def _part_scales(task: TrainTask, parts: list[Any]) -> list[float] | None:
    """Factors that make the mean of the parts' scaled losses the whole batch's loss (None: all 1)."""
    if len(parts) == 1:
        return None
    weights = [task.batch_weight(part) for part in parts]
    if any(weight is None for weight in weights):
        return None
    weights = [float(weight) for weight in weights]
    total = sum(weights)
    if total <= 0:  # nothing to learn from in the whole batch: every part's loss counts the same (zero)
        return None
    return [len(parts) * weight / total for weight in weights]


def _compute_loss(task: TrainTask, model, batch, carry):
    if task.stateful:
        loss, extras, carry = task.loss(model, batch, carry)
        return loss, extras, carry
    out = task.loss(model, batch)
    if isinstance(out, tuple):
        loss, extras = out
        return loss, extras, None
    return out, {}, None


def _finished(state: TrainState, config: TrainConfig) -> bool:
    return (
        state.stopped_early
        or (config.max_steps is not None and state.step >= config.max_steps)
        or (config.max_epochs is not None and state.epoch >= config.max_epochs)
    )


def _final_metrics(state: TrainState) -> dict:
    metrics = {"steps": state.step, "epochs": state.epoch, "stopped_early": state.stopped_early}
    metrics.update(state.last_metrics)
    if state.best_step is not None:
        metrics["best_step"] = state.best_step
        metrics.update({f"best_{k}": v for k, v in state.best_metrics.items()})
    return metrics


def process_device() -> torch.device:
    """The device of this process as accelerate assigns it: ``cuda:<local rank>`` under ``accelerate launch``
    on GPUs, ``cuda`` / ``mps`` on one, else ``cpu``. What ``train`` trains on."""
    return process_state().device


def _make_accelerator(mixed_precision: str, grad_accum_steps: int) -> Accelerator:
    previous = AcceleratorState._shared_state.get("_mixed_precision")
    if previous not in (None, mixed_precision) and process_state().num_processes == 1:
        # accelerate allows one precision per process and asks for a restart otherwise; a notebook
        # that trains an fp32 model and then a bf16 one should not have to. In a single process
        # nothing of the previous Accelerator is used any more, so its shared state can go.
        AcceleratorState._reset_state()
    asked = os.environ.get("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "")
    if asked.isdigit() and int(asked) != grad_accum_steps:
        raise ValueError(
            f"ACCELERATE_GRADIENT_ACCUMULATION_STEPS={asked} but TrainConfig.grad_accum_steps is {grad_accum_steps}: "
            "set TrainConfig.grad_accum_steps (part of the run's config) and unset the variable"
        )
    # An explicit plugin: the number of parts is the run's config, never an environment variable.
    return Accelerator(mixed_precision=mixed_precision,
                       gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=grad_accum_steps))


def train(model: torch.nn.Module, task: TrainTask, config: TrainConfig, run: Run) -> dict:
    """Train ``model`` on ``task`` into ``run`` (resuming from its checkpoint); returns final metrics."""
    accelerator = _make_accelerator(config.mixed_precision, config.grad_accum_steps)
    main = accelerator.is_main_process
    rank, processes, accum = accelerator.process_index, accelerator.num_processes, config.grad_accum_steps
    parts = processes * accum  # each global batch is cut into this many parts; this process trains `accum`
    # python, numpy, torch (+ CUDA); seed + process index, so the processes' dropout masks differ. A
    # checkpoint's RNG states (each process its own) override it.
    set_seed(config.seed, device_specific=processes > 1)

    checkpoint = latest_checkpoint(run)
    if checkpoint is None:
        optimizer, state, carry = build_optimizer(model, config), TrainState(), None
    else:
        optimizer, state, carry = _load_checkpoint(checkpoint, model, config, rank, processes)
    # One carry per part this process trains (one-part checkpoints keep the bare carry, as they always did).
    carries = [carry] if accum == 1 else list(carry or [None] * accum)
    if main:
        if run.checkpoint_dir.is_dir():  # temp folders of a checkpoint write that was cut short
            for tmp in run.checkpoint_dir.glob(".tmp-*"):
                shutil.rmtree(tmp, ignore_errors=True)
        _truncate_log(run.log_path, state.step)
    saved_at = state.step if checkpoint is not None else None

    model, optimizer = accelerator.prepare(model, _adopt(optimizer))
    task.optimizer = _unwrap_optimizer(optimizer)
    # keep_fp32_wrapper=False: under mixed precision prepare() patches the model's forward with autocast, in
    # place; left there, every score after training (and the caller's model) would be a bf16 one. The
    # training step autocasts explicitly (accelerator.autocast below), evaluation runs in full precision.
    unwrapped = accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    carries = [send_to_device(c, accelerator.device) for c in carries]
    model.train()

    log_file = open(run.log_path, "a", encoding="utf-8") if main else None

    def log(record: dict) -> None:
        if log_file is not None:
            log_file.write(json.dumps(record) + "\n")
            log_file.flush()  # a killed run keeps every line written so far

    def evaluate(periodic: bool) -> dict:
        model.eval()
        with torch.no_grad(), task.eval_weights(unwrapped):
            metrics = {k: float(v) for k, v in task.evaluate(unwrapped).items()}
            if processes > 1:  # one set of numbers decides everywhere (NT-ASGD, early stopping, best)
                metrics = broadcast_object_list([metrics])[0]
            _track_best(metrics, periodic)
        model.train()
        return metrics

    def _track_best(metrics: dict, periodic: bool) -> None:
        state.last_eval_step, state.last_metrics = state.step, metrics
        state.history.append({"step": state.step, **metrics})
        log({"kind": "eval", "step": state.step, "epoch": state.epoch, **metrics})
        name = config.early_stopping_metric
        if name not in metrics:
            if config.early_stopping_patience is not None:
                raise KeyError(f"early stopping watches {name!r} but evaluate() returned only {sorted(metrics)}")
            return
        if state.best_metric is None or metrics[name] < state.best_metric:  # NaN never improves
            state.best_metric, state.best_step, state.best_metrics = metrics[name], state.step, metrics
            state.evals_since_best = 0
            if main:
                save_best(run, unwrapped, {"step": str(state.step), name: repr(state.best_metric)})
        elif task.patience_counts():
            state.evals_since_best += 1
            patience = config.early_stopping_patience
            # The final evaluation (periodic=False) only tracks the best; training is over anyway.
            if periodic and patience is not None and state.evals_since_best >= patience:
                state.stopped_early = True

    def make_checkpoint() -> None:
        nonlocal saved_at
        accelerator.wait_for_everyone()
        mine = {"rng": rng_state(), "carry": send_to_device(carries[0] if accum == 1 else carries, "cpu")}
        ranks = gather_object([mine]) if processes > 1 else [mine]  # every process's RNG states and carries
        if main:
            # A finished run's checkpoint has no optimizer state (see the module docstring).
            kept_optimizer = None if _finished(state, config) else _unwrap_optimizer(optimizer)
            save_checkpoint(run, unwrapped, kept_optimizer, state.step,
                            {"train_state": dataclasses.asdict(state), "train_config": to_jsonable(config)},
                            ranks, config.keep_checkpoints)
        saved_at = state.step

    def batch_means(loss_sum, extras_sum: dict) -> tuple[float, dict]:
        """The whole batch's loss and extras from this process's sums of its parts' scaled values."""
        if parts == 1:
            return loss_sum.item(), {k: float(v) for k, v in extras_sum.items()}
        names = sorted(extras_sum)
        values = torch.stack([torch.as_tensor(v, dtype=torch.float64, device=accelerator.device).reshape(())
                              for v in (loss_sum, *(extras_sum[k] for k in names))])
        values = (accelerator.reduce(values, "sum") / parts).tolist()
        return values[0], dict(zip(names, values[1:]))

    clock = time.monotonic() - state.train_seconds  # time already spent before a resume counts too
    progress = tqdm(total=config.max_steps, initial=state.step, desc=f"{run.study}/{run.hash}",
                    **({} if main else {"disable": True}))
    try:
        while not _finished(state, config):
            # After a resume, skip the batches of this epoch the checkpoint has already trained on.
            batches = itertools.islice(task.batches(state.epoch), state.batch_in_epoch, None)
            for batch in batches:
                lr = _set_lr(optimizer, config, state.step, task, batch)
                pieces = split_batch(batch, parts)
                scales = _part_scales(task, pieces)
                loss_sum, extras_sum, grad_norm = 0.0, {}, None
                for k in range(accum):  # this process's parts, one after the other
                    index = rank * accum + k
                    with accelerator.accumulate(model):
                        piece = send_to_device(pieces[index], accelerator.device)
                        with accelerator.autocast():
                            loss, extras, carries[k] = _compute_loss(task, model, piece, carries[k])
                        if scales is not None:
                            loss = loss * scales[index]
                            extras = {name: value * scales[index] for name, value in extras.items()}
                        accelerator.backward(loss)  # divides by accum; DDP averages over processes
                        if accelerator.sync_gradients and config.grad_clip is not None:
                            grad_norm = accelerator.clip_grad_norm_(model.parameters(), config.grad_clip)
                        optimizer.step()  # accelerate steps (and zeroes) only on the last part
                        optimizer.zero_grad(set_to_none=True)
                    loss_sum = loss_sum + loss.detach()
                    for name, value in extras.items():
                        extras_sum[name] = extras_sum.get(name, 0.0) + value
                state.step += 1
                state.batch_in_epoch += 1
                state.train_seconds = time.monotonic() - clock
                progress.update(1)

                if state.step % config.log_every == 0:  # .item() syncs with the GPU: only here
                    loss_value, extras_values = batch_means(loss_sum, extras_sum)
                    record = {"kind": "train", "step": state.step, "epoch": state.epoch,
                              "train_s": state.train_seconds, "lr": lr, "loss": loss_value,
                              "grad_norm": None if grad_norm is None else float(grad_norm)}
                    record.update(extras_values)
                    log(record)
                    progress.set_postfix(loss=f"{record['loss']:.4f}", refresh=False)
                if config.eval_every is not None and state.step % config.eval_every == 0:
                    metrics = evaluate(periodic=True)
                    replacement = task.on_eval(state, metrics, _unwrap_optimizer(optimizer))
                    if replacement is not None:
                        optimizer = accelerator.prepare(_adopt(replacement))
                        task.optimizer = replacement
                if (config.checkpoint_every is not None and state.step % config.checkpoint_every == 0
                        or state.step in config.keep_checkpoints):
                    make_checkpoint()
                if _finished(state, config):
                    break
            else:  # the epoch ran out of batches
                if state.batch_in_epoch == 0:
                    raise ValueError(f"{type(task).__name__}.batches({state.epoch}) yielded no batches")
                state.epoch += 1
                state.batch_in_epoch = 0
                carries = [None] * accum  # stateful tasks start every epoch afresh

        if state.last_eval_step != state.step:
            evaluate(periodic=False)
        if saved_at != state.step:
            make_checkpoint()
    finally:
        progress.close()
        if log_file is not None:
            log_file.close()
    return _final_metrics(state)


def train_and_restore(model: torch.nn.Module, task: TrainTask, config: TrainConfig, run: Run,
                      evaluate: Callable[[torch.nn.Module], dict] | None = None) -> dict:
    """``train`` (or resume, or just read back a finished run), then load the run's best weights into ``model``.

    The "train, restore the best weights, evaluate" sequence of every study. The best weights are those of
    the lowest ``config.early_stopping_metric`` (``load_weights(model, run, "best")``); a run whose
    evaluations never reported that metric has no best weights, so ``model`` keeps the last ones (those of
    the final checkpoint, which ``train`` leaves in it). Returns ``train``'s metrics, merged with
    ``evaluate(model)``'s (computed with the restored weights) when ``evaluate`` is given.
    """
    metrics = train(model, task, config, run)
    load_weights(model, run, "best" if "best_step" in metrics else "last")
    if evaluate is not None:
        metrics = {**metrics, **evaluate(model)}
    return metrics
