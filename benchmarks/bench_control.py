"""Speed of batched multi-code generation and batched source attribution (the control-code study).

Generation: one prompt continued under K control codes, ``--new-tokens`` tokens each (eos does not stop
a row, so every variant produces the same number of tokens), timed three ways:

- ``batched``: ``lmstudy.ctrl.generation.generate_codes``: the K rows in one batch, one forward pass
  per new token for all of them, one KV cache;
- ``sequential generate()``: K calls of transformers' ``model.generate`` (KV cache, greedy or sampling
  as configured), one per code, which is what one would write without the batched loop;
- ``sequential ours``: K calls of ``generate_codes`` with one code each (isolates the batching from any
  difference between our loop and ``generate``).

Attribution: ``log p(x | c)`` for every code of the model for one text, ``batched`` (one forward pass
over K rows: ``attribution.code_log_likelihoods`` with all codes) against one forward pass per code
(the same function called with one code at a time).

The variants alternate within each repeat so machine load hits all alike; times are medians over
``--repeats`` after one warm-up round, and the ratio is sequential / batched (above 1: batching wins).

    python benchmarks/bench_control.py                        # models/ctrl-demo, K = 4, 100 new tokens
    python benchmarks/bench_control.py --model runs/04_control_codes/<hash>/model --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import transformers

from lmstudy.ctrl.attribution import code_log_likelihoods
from lmstudy.ctrl.data import code_id
from lmstudy.ctrl.generation import generate_codes
from lmstudy.ctrl.model import load_control_model
from lmstudy.ctrl.sampling import SamplingConfig
from lmstudy.paths import models_dir
from lmstudy.training import count_parameters

TEXT = ("The film was a long and slow affair, but the actors carried it well and the last half hour "
        "made up for much of what came before. I would watch it again.")


def default_model() -> Path:
    for path in (models_dir() / "ctrl-demo", models_dir("smoke") / "ctrl-demo"):
        if path.is_dir():
            return path
    raise SystemExit("no control model found: pass --model DIR, or run "
                     "`python -m lmstudy study 04_control_codes --scale smoke` to make one")


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="a save_control_model folder (default: the demo)")
    parser.add_argument("--codes", type=int, default=4, help="K, the number of codes generated side by side")
    parser.add_argument("--new-tokens", type=int, default=100)
    parser.add_argument("--prompt", default="The")
    parser.add_argument("--sample", action="store_true", help="nucleus sampling (p = 0.9) instead of greedy")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    path = args.model or default_model()
    ctrl = load_control_model(path)
    model, tokenizer = ctrl.model, ctrl.tokenizer
    codes = ctrl.codes[: args.codes]
    sampling = SamplingConfig(top_p=0.9) if args.sample else SamplingConfig(greedy=True)
    prompt_ids = tokenizer(args.prompt, add_special_tokens=False)["input_ids"]
    # A row is [code] + prompt + new tokens: keep it within the model's context (the smoke model's is 64).
    n = min(args.new_tokens, model.config.n_positions - 1 - len(prompt_ids))

    def batched_generation():
        generate_codes(model, tokenizer, args.prompt, codes, sampling, n, seed=0, stop_at_eos=False)

    def sequential_generate():
        for code in codes:
            ids = torch.tensor([[code_id(tokenizer, code)] + prompt_ids])
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                           do_sample=args.sample, top_p=0.9 if args.sample else None, top_k=0 if args.sample else None,
                           pad_token_id=tokenizer.eos_token_id)

    def sequential_ours():
        for code in codes:
            generate_codes(model, tokenizer, args.prompt, [code], sampling, n, seed=0, stop_at_eos=False)

    def batched_attribution():
        code_log_likelihoods(model, tokenizer, TEXT, ctrl.codes)

    def sequential_attribution():
        for code in ctrl.codes:
            code_log_likelihoods(model, tokenizer, TEXT, [code])

    variants = {"generation: batched": batched_generation, "generation: sequential generate()": sequential_generate,
                "generation: sequential ours": sequential_ours, "attribution: batched": batched_attribution,
                "attribution: one pass per code": sequential_attribution}
    times = {name: [] for name in variants}
    for repeat in range(args.repeats + 1):
        for name, fn in variants.items():
            seconds = timed(fn)
            if repeat:  # the first round warms up
                times[name].append(seconds)
    median = {name: statistics.median(values) for name, values in times.items()}

    parameters = count_parameters(model)
    print(f"model {path} ({parameters / 1e6:.2f}M parameters, {len(ctrl.codes)} codes), "
          f"torch {torch.__version__}, transformers {transformers.__version__}, {args.threads} thread(s), "
          f"{'nucleus p=0.9' if args.sample else 'greedy'}; K = {len(codes)}, {n} new tokens, "
          f"attribution of {len(tokenizer(TEXT)['input_ids'])} tokens; median of {args.repeats}")
    print(f"{'variant':36s} {'seconds':>9s}")
    for name, seconds in median.items():
        print(f"{name:36s} {seconds:9.3f}")
    batched = median["generation: batched"]
    print(f"generation speed-up, batched vs sequential generate(): {median['generation: sequential generate()'] / batched:.2f}x; "
          f"vs sequential ours: {median['generation: sequential ours'] / batched:.2f}x")
    print(f"attribution speed-up, batched vs one pass per code: "
          f"{median['attribution: one pass per code'] / median['attribution: batched']:.2f}x")


if __name__ == "__main__":
    main()
