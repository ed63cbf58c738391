"""Time per training step of every entity-study model (Table 2's time, the paper's "small computational cost").

:func:`step_time_run`: every variant on the same batches, steps alternating (and which goes first too) so that
machine load hits all alike; median seconds of forward + backward + clipping + AdamW (:func:`timed_step`, also used
by ``benchmarks/bench_entity_gpt2.py``), beside the analytic FLOP ratio
(:func:`lmstudy.entity.model.training_flops_per_token`): the gap between the two is implementation cost.
"""

from __future__ import annotations

import statistics
import time

import pandas as pd
import torch

from lmstudy.entity.config import STUDY, VARIANTS, EntityStudyConfig, load_base
from lmstudy.entity.data import EntityLMTask
from lmstudy.entity.documents import study_documents
from lmstudy.entity.model import training_flops_per_token
from lmstudy.entity.runs import initial_model
from lmstudy.runs import Run, cached
from lmstudy.training import adamw, process_device


# mixed_precision (TrainConfig's) -> the autocast dtype of the training step's forward pass
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def timed_step(model, task, batch, carry, optimizer, device, mixed_precision: str = "no") -> tuple[float, object]:
    """Seconds of one training step (task loss with the carry, backward, clip to 1.0, AdamW) and the new carry; the
    forward pass under autocast when ``mixed_precision`` is ``bf16``/``fp16``, as the training loop runs it."""
    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    synchronize()
    start = time.perf_counter()
    dtype = AUTOCAST_DTYPES.get(mixed_precision)
    with torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        loss, _, carry = task.loss(model, batch, carry)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    synchronize()
    return time.perf_counter() - start, carry


def compare_step_times(models: dict[str, torch.nn.Module], task: EntityLMTask, steps: int, warmup: int = 1,
                       device=None, mixed_precision: str = "no") -> dict[str, list[float]]:
    """Seconds per step of each model on the same batches, models alternating (and which goes first too), after
    ``warmup`` untimed steps each (the first step allocates the activations and AdamW's state); the optimizer
    holds the trainable weights only (a frozen base has no AdamW state)."""
    device = torch.device(device or "cpu")
    batches = task.batches(0)
    optimizers = {name: adamw([p for p in m.parameters() if p.requires_grad], lr=1e-5)  # as training's
                  for name, m in models.items()}
    carries = {name: None for name in models}
    times = {name: [] for name in models}
    names = list(models)
    for step in range(warmup + steps):
        if step % len(batches) == 0:
            carries = {name: None for name in models}  # a new pass over the documents
        batch = batches[step % len(batches)]
        for name in names if step % 2 == 0 else names[::-1]:
            models[name].train()
            seconds, carries[name] = timed_step(models[name], task, batch, carries[name], optimizers[name], device,
                                                mixed_precision)
            if step >= warmup:
                times[name].append(seconds)
    return times


def step_time_run(config: EntityStudyConfig) -> dict:
    """Median seconds per training step of every variant at the study's sizes, measured side by side in one
    run (cached: measured once), with the analytic training FLOPs per token of each. ``overhead_pct``: the
    median per-step ratio to GPT2, minus one; ``flops_overhead_pct``: the same for FLOPs."""
    run_config = {"stage": "step_time", **config.finetune_identity(), "models": list(VARIANTS),
                  "timing_steps": config.timing_steps}

    def fn(run: Run) -> dict:
        base = load_base(config)
        device = process_device()  # this process's device, as training uses (cuda:<local rank> under a launch)
        docs = study_documents(config, base.tokenizer)
        task = EntityLMTask(docs["train"], docs["valid"], batch_size=config.batch_size, seq_len=config.seq_len,
                            pad_id=base.tokenizer.eos_token_id)
        models = {name: initial_model(base.model, name, 0, config).to(device) for name in VARIANTS}
        times = compare_step_times(models, task, config.timing_steps, device=device,
                                   mixed_precision=config.mixed_precision)
        flops = {name: training_flops_per_token(model.config, config.seq_len) for name, model in models.items()}
        return {"seconds": {name: statistics.median(values) for name, values in times.items()},
                "overhead_pct": {name: 100 * (statistics.median(t / g for t, g in zip(values, times["GPT2"])) - 1)
                                 for name, values in times.items()},
                "flops_per_token": flops,
                "flops_overhead_pct": {name: 100 * (value / flops["GPT2"] - 1) for name, value in flops.items()},
                "steps": config.timing_steps, "threads": torch.get_num_threads(), "device": str(device),
                "mixed_precision": config.mixed_precision,
                "batch": [config.batch_size, config.seq_len]}

    return cached(STUDY, run_config, fn)


def step_time_table(timing: dict) -> pd.DataFrame:
    """Seconds per training step of every variant (:func:`step_time_run`) and the FLOP ratio beside the
    measured one, then the paper's GPT2 / GPT2E."""
    where = f"{timing['device']}, {timing['threads']} thread(s), batch {timing['batch'][0]} x {timing['batch'][1]}"
    if timing.get("mixed_precision", "no") != "no":  # runs timed before the option was kept ran in float32
        where += f", {timing['mixed_precision']} autocast"
    rows = [{"model": name, "s/step": seconds, "time overhead %": timing["overhead_pct"][name],
             "FLOPs/token": timing["flops_per_token"][name], "FLOP overhead %": timing["flops_overhead_pct"][name],
             "where": where} for name, seconds in timing["seconds"].items()]
    rows += [{"model": f"paper {name}", "s/step": seconds, "time overhead %": 100 * (seconds / 0.290 - 1),
              "where": "Titan V, GPT-2 small, batch 1"} for name, seconds in (("GPT2", 0.290), ("GPT2E", 0.298))]
    return pd.DataFrame(rows)
