"""Inference speed of Kronecker-compressed GPT-2s (Krony-PT) against their dense base, side by side in one run.

The base is the shared base model (``models/base``, or ``models/base-30pct`` while the full base is not exported
yet: a 3x192 GPT-2, vocab 8,192, context 256), loaded as float32. It is compressed on the fly into each size
class of the Krony study (``lmstudy.krony.classes.class_a_shape``: 96M B = (2, 1), 81M B = (4, 1), 67M tiny
balanced factors, and the 67M shapes with 4 factors + scalars as in Table 6), with the Van Loan init (no
training: speed does not depend on the values). Each compressed model is exported both ways with
``lmstudy.krony.export`` and loaded back from the folder, so what is timed is what a user loads:

- ``dense``: ``export_dense`` (factors folded back) read with ``AutoModelForCausalLM.from_pretrained``;
- ``factored``: ``export_factored`` read with ``load_factored``.

Timed, batch 1, in eval mode under ``torch.no_grad``:

- ``score tok/s``: one forward pass over a full context (``--seq-len``, default the model's ``n_positions``),
  what a perplexity evaluation does per window;
- ``generate tok/s``: new tokens per second of greedy decoding with the KV cache (``model.generate``),
  ``--new-tokens`` after a ``--prompt``-token prompt, every token forced (``min_new_tokens``).

``--clock cpu`` times the process's CPU time instead of elapsed time (on a machine shared with other jobs a
one-thread run's elapsed time includes waiting for a core). Also listed: ``parameters`` (unique, tied embeddings once) and ``weights MB`` (the exported safetensors file).
Models run interleaved, one repeat of each in turn, so that load from other processes hits all alike; times
are medians after one warm-up round, and ``speed-up`` is the median of the per-repeat ratios base / model.

    python benchmarks/bench_krony_inference.py                         # models/base, 1 thread
    python benchmarks/bench_krony_inference.py --out figures/03_krony_inference.csv
    python benchmarks/bench_krony_inference.py --gpt2-small --repeats 3  # random GPT-2 small, GPT-2's BPE
    python benchmarks/bench_krony_inference.py --model smollm2 --seq-len 1024 --out figures/03_krony_smollm2_inference.csv

A Llama (``--model smollm2``, fetched) is compressed at its own size classes (``lmstudy.krony.llama.llama_classes``:
the paper's parameter ratios, all three MLP matrices) instead of the GPT-2 classes.
"""

from __future__ import annotations

import argparse
import copy
import csv
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import transformers
from transformers.utils import logging as transformers_logging
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel

from lmstudy.krony.export import WEIGHTS_FILE, export_dense, export_factored, load_factored
from lmstudy.krony.model import KroneckerConfig, compress
from lmstudy.krony.classes import class_a_shape
from lmstudy.krony.llama import compress_llama, llama_classes
from lmstudy.pretrained import resolve_pretrained
from lmstudy.paths import models_dir
from lmstudy.training import count_parameters

BASE_FOLDERS = ("base", "base-30pct")  # the first that exists under models/
# (label, size class, factors, scalars)
VARIANTS = [("Krony 96M", "96M", 1, False), ("Krony 81M", "81M", 1, False), ("Krony 67M", "67M", 1, False),
            ("Krony 67M, 4 factors + scalars", "67M", 4, True)]
BASE_LABEL = "base (dense)"


def default_base_folder() -> Path:
    """``models/base`` if it exists, else ``models/base-30pct``."""
    for name in BASE_FOLDERS:
        if (models_dir() / name / "config.json").exists():
            return models_dir() / name
    raise FileNotFoundError(f"no shared base model in {models_dir()} ({' or '.join(BASE_FOLDERS)}); "
                            "export it with `python -m lmstudy base export --scale cpu` or pass --model")


def load_base(model: str | None, gpt2_small: bool):
    """(model in float32 eval mode, tokenizer, description) for ``--model`` / ``--gpt2-small`` / the default."""
    if gpt2_small:
        from lmstudy.tokenization import gpt2_tokenizer

        torch.manual_seed(0)
        config = GPT2Config(vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024)
        return GPT2LMHeadModel(config).eval(), gpt2_tokenizer(), "GPT-2 small, random weights"
    folder = resolve_pretrained(model) if model else default_base_folder()
    base = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    return base, AutoTokenizer.from_pretrained(str(folder)), os.path.relpath(folder)


def is_llama(model) -> bool:
    return hasattr(getattr(model, "model", None), "layers")


def variants(base) -> list[tuple[str, str, KroneckerConfig]]:
    """(label, size class, factors) of every compressed model: the GPT-2 study's classes, or a Llama's own."""
    if is_llama(base):
        return [(f"Krony {name}", name, kron) for name, kron in llama_classes(base.config).items()]
    return [(label, size_class, KroneckerConfig(class_a_shape(size_class, base.config.n_embd, base.config.n_inner),
                                                n_factors, scalars))
            for label, size_class, n_factors, scalars in VARIANTS]


def build_models(base: GPT2LMHeadModel, tokenizer, folder: Path) -> dict[str, dict]:
    """Label -> {model, form, class, factors, scalars, weights_bytes}: the base, then each class dense and factored."""
    base_file = folder / BASE_LABEL.split()[0]
    base.save_pretrained(str(base_file))  # the base's own float32 bytes, comparable with the exports
    models = {BASE_LABEL: dict(model=base, form="base", size_class="", factors=0, scalars=False,
                               weights_bytes=(base_file / "model.safetensors").stat().st_size)}
    for label, size_class, kron in variants(base):
        n_factors = kron.n_factors
        compressed = copy.deepcopy(base)
        (compress_llama if is_llama(base) else compress)(compressed, kron, "van_loan")
        dense_folder = export_dense(compressed, tokenizer, folder / f"{size_class}-{n_factors}-dense")
        factored_folder = export_factored(compressed, tokenizer, folder / f"{size_class}-{n_factors}-factored")
        common = dict(size_class=size_class, factors=n_factors, scalars=kron.scalars)
        models[f"{label} (dense)"] = dict(
            model=AutoModelForCausalLM.from_pretrained(str(dense_folder)).eval(), form="dense", **common,
            weights_bytes=(dense_folder / "model.safetensors").stat().st_size)
        models[f"{label} (factored)"] = dict(
            model=load_factored(factored_folder), form="factored", **common,
            weights_bytes=(factored_folder / WEIGHTS_FILE).stat().st_size)
    return models


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


@torch.no_grad()
def time_score(model: GPT2LMHeadModel, ids: torch.Tensor, clock=time.perf_counter) -> float:
    """Seconds for one forward pass over ``ids`` (1, seq_len)."""
    start = clock()
    model(input_ids=ids)
    return clock() - start


@torch.no_grad()
def time_generate(model: GPT2LMHeadModel, prompt: torch.Tensor, new_tokens: int, clock=time.perf_counter) -> float:
    """Seconds for greedy generation of exactly ``new_tokens`` tokens after ``prompt`` with the KV cache."""
    start = clock()
    out = model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                         use_cache=True, pad_token_id=0)
    elapsed = clock() - start
    assert out.size(1) == prompt.size(1) + new_tokens
    return elapsed


def measure(
    models: dict[str, dict], ids: torch.Tensor, prompt: torch.Tensor, new_tokens: int, repeats: int,
    clock=time.perf_counter,
) -> list[dict]:
    """Interleaved repeats of scoring and generation for every model; one result row per model."""
    score = {name: [] for name in models}
    generate = {name: [] for name in models}
    for repeat in range(repeats + 1):
        for name, entry in models.items():
            s, g = time_score(entry["model"], ids, clock), time_generate(entry["model"], prompt, new_tokens, clock)
            if repeat:  # the first round warms up
                score[name].append(s)
                generate[name].append(g)
    rows = []
    for name, entry in models.items():
        rows.append({
            "model": name, "form": entry["form"], "size_class": entry["size_class"], "factors": entry["factors"],
            "scalars": entry["scalars"], "parameters": count_parameters(entry["model"]),
            "weights_mb": entry["weights_bytes"] / 1e6,
            "score_tok_s": ids.numel() / statistics.median(score[name]),
            # Paired ratios: each pair ran close together in time, so drifts in load cancel.
            "score_speedup": statistics.median(b / s for b, s in zip(score[BASE_LABEL], score[name])),
            "generate_tok_s": new_tokens / statistics.median(generate[name]),
            "generate_speedup": statistics.median(b / g for b, g in zip(generate[BASE_LABEL], generate[name])),
        })
    return rows


def format_rows(rows: list[dict]) -> str:
    """The result table as text."""
    header = (f"{'model':<42} {'parameters':>11} {'weights MB':>10} {'score tok/s':>11} {'speed-up':>8} "
              f"{'generate tok/s':>14} {'speed-up':>8}")
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(f"{row['model']:<42} {row['parameters']:>11,} {row['weights_mb']:>10.2f} "
                     f"{row['score_tok_s']:>11,.0f} {row['score_speedup']:>8.2f} "
                     f"{row['generate_tok_s']:>14,.1f} {row['generate_speedup']:>8.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print the table (and write the CSV with ``--out``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a dense GPT-2 or Llama folder, or a fetched model's name such as smollm2 "
                        "(default: models/base, else models/base-30pct)")
    parser.add_argument("--gpt2-small", action="store_true", help="a random GPT-2 small instead (GPT-2's BPE)")
    parser.add_argument("--seq-len", type=int, help="tokens of the scored sequence (default: the model's context)")
    parser.add_argument("--prompt", type=int, default=16, help="prompt tokens before generation (default 16)")
    parser.add_argument("--new-tokens", type=int, default=64, help="greedy tokens generated (default 64)")
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats per model (median reported)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--clock", choices=list(CLOCKS), default="wall",
                        help="wall: elapsed time (default); cpu: this process's CPU time, not inflated by other jobs "
                             "on a shared machine (meaningful with one thread)")
    parser.add_argument("--out", type=Path, help="also write the rows to this CSV (e.g. figures/03_krony_inference.csv)")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    transformers_logging.disable_progress_bar()  # the loading bars of 9 models would bury the table
    base, tokenizer, source = load_base(args.model, args.gpt2_small)
    seq_len = args.seq_len or base.config.max_position_embeddings
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(base.config.vocab_size, (1, seq_len), generator=generator)
    prompt = torch.randint(base.config.vocab_size, (1, args.prompt), generator=generator)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder:
        models = build_models(base, tokenizer, Path(folder))
        print(f"torch {torch.__version__}, transformers {transformers.__version__}, threads {torch.get_num_threads()}; "
              f"{source}: {base.config.num_hidden_layers}x{base.config.hidden_size}, vocab {base.config.vocab_size}; "
              f"score 1 x {seq_len} tokens, generate {args.new_tokens} after {args.prompt} (batch 1, KV cache); "
              f"median of {args.repeats} after 1 warm-up, interleaved, {args.clock} clock; "
              f"load average {load_before:.2f}")
        rows = measure(models, ids, prompt, args.new_tokens, args.repeats, CLOCKS[args.clock])
    load_after = os.getloadavg()[0]
    print()
    print(format_rows(rows))
    print(f"\nload average (1 min) before / after: {load_before:.2f} / {load_after:.2f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        extra = dict(source=source, seq_len=seq_len, prompt=args.prompt, new_tokens=args.new_tokens,
                     repeats=args.repeats, clock=args.clock, threads=torch.get_num_threads(), torch=torch.__version__,
                     load_avg_1m=f"{max(load_before, load_after):.2f}")
        with open(args.out, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=[*rows[0], *extra])
            writer.writeheader()
            for row in rows:
                writer.writerow({**row, "weights_mb": f"{row['weights_mb']:.3f}",
                                 **{key: f"{row[key]:.2f}" for key in ("score_tok_s", "score_speedup",
                                                                        "generate_tok_s", "generate_speedup")},
                                 **extra})
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
