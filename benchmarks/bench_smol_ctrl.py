"""LoRA (+ the code rows) against full fine-tuning of SmolLM2 with the 21 control codes, per CPU-hour (issue 48).

    python benchmarks/bench_smol_ctrl.py       # ~7 minutes alone on the 2-core machine

Each method trains ``--steps`` steps on the same coded batches (``lmstudy.ctrl.data``'s mixture, seed 0) with a
bare loop (forward, ``lm_loss``, backward, clip 1.0, the package's AdamW): what is timed is the step, not
``train()``'s bookkeeping. The model is ``lmstudy.ctrl.smol_ctrl``'s (codes as new tokens, LoRA + code rows).
Writes ``figures/04_smol_ctrl_lora_vs_full.csv`` (``--out``); the decision it supports is in that module's docstring
and ``docs/study-04-ctrl.md``. Needs the fetched model (``python -m lmstudy models fetch smollm2``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
import torch

from lmstudy.ctrl.data import MixtureConfig, build_task, load_coded_texts
from lmstudy.ctrl.smol_ctrl import base_with_codes, code_ids_of, with_lora
from lmstudy.lm_batches import lm_loss
from lmstudy.training import adamw, count_parameters
from lmstudy.weights_precision import native_bfloat16

REPO_ROOT = Path(__file__).resolve().parent.parent


def measure_lora_vs_full(base: str = "smollm2", steps: int = 30, batch_size: int = 4, seq_len: int = 256,
                         threads: int = 2, lr_lora: float = 2e-3, lr_full: float = 1e-4, train_docs: int = 30,
                         out: str | Path | None = "figures/04_smol_ctrl_lora_vs_full.csv",
                         methods: tuple[str, ...] = ("lora", "full", "lora_frozen_codes")):
    """Train LoRA (+ code rows) and full fine-tuning of ``base`` + the 21 codes for ``steps`` steps each on the
    same coded batches (:class:`lmstudy.ctrl.data.MixtureTask`, uniform mixture, seed 0) and time them; bfloat16
    autocast where the CPU computes in it natively (:func:`lmstudy.weights_precision.native_bfloat16`), else
    float32. Returns (and writes to ``out``) one row per method: tokens/s (steps 3 on), the mean training loss of
    the first and last 5 steps, and the loss after training on 4 further batches drawn from the same training
    streams (epoch 1 of the task: not held out). ``methods``: ``lora`` (LoRA + code rows), ``full``, and the
    diagnostic ``lora_frozen_codes`` (LoRA alone: what the code-row adapter on the tied 49k-row head costs)."""
    torch.set_num_threads(threads)
    texts = load_coded_texts(MixtureConfig(train_docs=train_docs, eval_docs=2, max_doc_chars=3000))
    bf16 = native_bfloat16()
    rows = []
    for method in methods:
        model, tokenizer = base_with_codes(base, texts.codes)
        task = build_task(texts, tokenizer, batch_size, seq_len, seed=0)
        batches = list(zip(range(steps), task.batches(0)))
        probe = [batch for _, batch in zip(range(4), task.batches(1))]
        ids = code_ids_of(tokenizer, texts.codes)
        if method in ("lora", "lora_frozen_codes"):
            model, lr = with_lora(model, ids if method == "lora" else []), lr_lora
        elif method == "full":
            lr = lr_full
        else:
            raise ValueError(f"unknown method {method!r}: lora, full or lora_frozen_codes")
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = adamw(params, lr=lr)
        losses, seconds = [], []
        for _, (x, y) in batches:
            start = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = lm_loss(model, x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            seconds.append(time.perf_counter() - start)
            losses.append(loss.item())
        model.eval()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            after = sum(float(lm_loss(model, x, y)) for x, y in probe) / len(probe)
        timed = seconds[2:]  # the first steps warm up the allocator and kernels
        rows.append({"method": method, "trainable_parameters": sum(p.numel() for p in params),
                     "parameters": count_parameters(model), "steps": steps, "batch_size": batch_size,
                     "seq_len": seq_len, "threads": threads, "autocast": "bf16" if bf16 else "no", "lr": lr,
                     "tokens_per_s": round(batch_size * seq_len * len(timed) / sum(timed), 1),
                     "s_per_step": round(sum(timed) / len(timed), 3),
                     "loss_first5": round(sum(losses[:5]) / 5, 4), "loss_last5": round(sum(losses[-5:]) / 5, 4),
                     "loss_after_4_new_batches": round(after, 4)})
        del model, optimizer
    table = pd.DataFrame(rows)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(out, index=False)
    return table


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="smollm2", help="a fetched model name or folder")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "figures" / "04_smol_ctrl_lora_vs_full.csv")
    args = parser.parse_args(argv)
    table = measure_lora_vs_full(args.base, steps=args.steps, threads=args.threads, out=args.out)
    print(table.to_string(index=False))
    return table


if __name__ == "__main__":
    main()
