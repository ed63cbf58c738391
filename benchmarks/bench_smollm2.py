"""SmolLM2-135M on this machine: training throughput against the matmul peak, and the app's generation speed.

    OMP_NUM_THREADS=2 python benchmarks/bench_smollm2.py                 # everything (quiet machine, ~25 min)
    python benchmarks/bench_smollm2.py --parts generate quality          # only the app's side
    python benchmarks/bench_smollm2.py --quick --out /tmp/q.csv          # a tiny random Llama: a smoke check

Needs the fetched model (``python -m lmstudy models fetch smollm2``; ``--quick`` does not). One process, 2 torch
threads (``--threads``), so every row is measured side by side on the same machine state. Parts (``--parts``):

- **peak**: fp32 ``torch.mm`` of two 2048x2048 matrices (the peak MFU is measured against, as in
  ``bench_base_throughput.py``) and the same in bfloat16 (for reference: this CPU has AVX-512 BF16).
- **train**: ``lmstudy.training.train()`` on SmolLM2 (AdamW, clip 1.0, no evaluation or checkpoint inside the
  timed window; batch ``--batch-size`` x ``--seq-len`` = 8 x 256 random token ids), for each of eager and
  ``torch.compile``, float32 and bfloat16 autocast (``TrainConfig.mixed_precision``). Time per step from the
  ``--warmup``-th batch request to the last (``TimedLMTask``). Model FLOPs per token: 6 N + 12 L d T (N: every
  parameter once, the tied output projection included; L d T: attention scores and values, PaLM's count);
  MFU = model FLOP/s / fp32 peak.
- **generate**: what the app does for one request: ``lmstudy.ctrl.serving.prepare_comparison`` +
  ``stream_comparison`` (one batch, one KV cache) with 4 columns x ``--new-tokens`` (128) new tokens, greedy
  (a column that writes its end-of-text token stops: the table gives the tokens written); per weights form (float32 and bfloat16,
  ``lmstudy.weights_precision``'s, and int8, PyTorch's dynamic quantisation of the linear layers, which the app
  does not offer): time to the first tokens on screen and to all of them, median of ``--repeats``.
- **app**: the same request through the running app (``python app.py --model smollm2``, its default
  ``--weights auto``, a process of its own on a local port, as ``make demo`` runs it) from a ``gradio_client``
  here, which looks for updates every 20 ms: time to the first streamed update and to the last, median of
  ``--repeats`` (Gradio's queue and streaming included; a browser's drawing not).
- **quality**: WikiText-2 bits per byte of each weights form on the first ``--quality-tokens`` tokens of the
  detokenised test set (the protocol's scoring, the model's context), and the change against float32.

Prints the tables and writes them as CSV (``--out``, default ``figures/smollm2_speed.csv``).
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benchmarks

from bench_base_throughput import sgemm_gflops  # noqa: E402
from bench_training_loop import TimedLMTask  # noqa: E402

import torch  # noqa: E402

from lmstudy.training import count_parameters  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "figures" / "smollm2_speed.csv"
PARTS = ("peak", "train", "generate", "app", "quality")
PROMPT = "The history of the city begins"
CODES = ["Wikipedia:", "Books:", "News:", "Reviews:"]  # plain-text prefixes: SmolLM2 has no control codes
CONTROL_CODES = ["Wikipedia", "Books", "News", "Reviews"]  # the same domains as a control-code model's codes


def load_model(quick: bool):
    """(model, tokenizer): SmolLM2 from its fetched folder, or with ``quick`` a tiny random Llama."""
    from lmstudy.pretrained import load_pretrained

    if not quick:
        model, tokenizer, _ = load_pretrained("smollm2")
        return model, tokenizer
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(REPO_ROOT / "models" / "base")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, bos_token_id=tokenizer.eos_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    return LlamaForCausalLM(config).eval(), tokenizer


def flops_per_token(model, seq_len: int) -> float:
    """Training FLOPs per token: 6 N + 12 L d T (module docstring)."""
    config = model.config
    attention_width = config.num_attention_heads * getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
    parameters = count_parameters(model)  # tied embeddings counted once: the output matmul
    return 6 * parameters + 12 * config.num_hidden_layers * attention_width * seq_len


def peak(args) -> list[dict]:
    return [{"part": "peak", "mode": "sgemm fp32", "gflops": sgemm_gflops(args.sgemm_n, args.sgemm_reps)},
            {"part": "peak", "mode": "gemm bf16", "gflops": sgemm_gflops(args.sgemm_n, args.sgemm_reps, torch.bfloat16)}]


def train_seconds_per_step(args, compiled: bool, precision: str) -> float:
    from lmstudy.runs import get_run
    from lmstudy.training import TrainConfig, train

    model, tokenizer = load_model(args.quick)
    total = args.warmup + args.steps + 1
    vocab = model.config.vocab_size
    ids = torch.randint(vocab, (max(100_000, 4 * args.batch_size * args.seq_len),), generator=torch.Generator().manual_seed(0))
    task = TimedLMTask(ids, ids[: args.seq_len + 1], batch_size=args.batch_size, seq_len=args.seq_len,
                       batches_per_epoch=total, eval_batch_size=1)
    config = TrainConfig(max_steps=total, lr=3e-4, weight_decay=0.1, betas=(0.9, 0.95), grad_clip=1.0,
                         log_every=50, mixed_precision=precision)
    if compiled:
        torch._dynamo.reset()
        model = torch.compile(model)
    run = get_run("bench_smollm2", {"train": config, "nonce": time.perf_counter_ns()})
    try:
        train(model.train(), task, config, run)
    finally:
        shutil.rmtree(run.path, ignore_errors=True)  # its final checkpoint: weights and AdamW state, 1.6 GB
    return task.seconds_per_step(args.warmup)


def train_rows(args, fp32_peak: float) -> list[dict]:
    rows = []
    model, _ = load_model(args.quick)
    fpt = flops_per_token(model, args.seq_len)
    del model
    for compiled in [mode == "on" for mode in args.compile]:
        for precision in ("no", "bf16"):
            mode = f"{'compiled' if compiled else 'eager'}, {'fp32' if precision == 'no' else 'bf16 autocast'}"
            try:
                step = train_seconds_per_step(args, compiled, precision)
            except Exception as error:  # a compile failure is a row, not the end of the run
                if not compiled:
                    raise
                rows.append({"part": "train", "mode": mode, "error": f"{type(error).__name__}: {error}"[:200]})
                continue
            tokens_per_s = args.batch_size * args.seq_len / step
            gflops = tokens_per_s * fpt / 1e9
            rows.append({"part": "train", "mode": mode, "tokens_per_s": tokens_per_s, "seconds": step,
                         "gflops": gflops, "mfu": gflops / fp32_peak})
            print(f"  train {mode}: {tokens_per_s:.0f} tokens/s, MFU {gflops / fp32_peak:.2f}", file=sys.stderr)
    return rows


def model_with_weights(model, weights: str):
    """The app's forms (``lmstudy.weights_precision``: float32, bfloat16) and ``int8``, which the app does not
    offer: PyTorch's dynamic quantisation of every ``nn.Linear`` (per-channel int8 weights, activations quantised
    per batch), measured here to show why."""
    if weights != "int8":
        from lmstudy.weights_precision import with_weights

        return with_weights(model, weights)
    import warnings

    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():  # torch.ao's notices that quantisation moves to torchao
        warnings.simplefilter("ignore")
        return quantize_dynamic(model.eval(), {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)


def generate_rows(args) -> list[dict]:
    from lmstudy.ctrl.serving import ServedModel, prepare_comparison, stream_comparison

    rows = []
    for weights in args.weights:
        model, tokenizer = load_model(args.quick)
        served = ServedModel("bench", model_with_weights(model, weights), tokenizer, "plain", CODES)
        first, total = [], []
        for repeat in range(args.repeats + 1):  # the first request warms up (not counted)
            comparison = prepare_comparison(served, PROMPT, CODES, "greedy", 1.0, 0, 1.0, "none", 1.2,
                                            args.new_tokens, 0, True)
            start = time.perf_counter()
            first_at, tokens = None, 0
            for columns in stream_comparison(served, comparison):
                first_at = first_at or time.perf_counter() - start
                tokens = sum(len(column.token_ids) for column in columns)
            if repeat:
                first.append(first_at)
                total.append(time.perf_counter() - start)
        rows.append({"part": "generate", "mode": weights, "first_token_s": statistics.median(first),
                     "seconds": statistics.median(total), "new_tokens": tokens,
                     "tokens_per_s": tokens / statistics.median(total)})
        print(f"  generate {weights}: first {rows[-1]['first_token_s']:.2f} s, all {tokens} in "
              f"{rows[-1]['seconds']:.2f} s", file=sys.stderr)
    return rows


def app_rows(args) -> list[dict]:
    """The same request through the running app: ``python app.py --model NAME`` (its default weights; each of
    ``--app-models``, default smollm2) started as a process of its own on a free local port, as ``make demo`` runs
    it, and a ``gradio_client`` in this one: time to the first streamed update and to the last. A control-code
    model (a folder such as ``models/ctrl-smollm2``) gets its own codes for the same four domains."""
    return [app_row(args, name) for name in args.app_models]


def app_row(args, name: str) -> dict:
    import socket
    import subprocess

    import gradio_client

    if args.quick:
        model, tokenizer = load_model(True)
        name = str(args.scratch / "tiny-llama")
        model.save_pretrained(name)
        tokenizer.save_pretrained(name)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    codes = CONTROL_CODES if (REPO_ROOT / name / "control_codes.json").is_file() else CODES
    server = subprocess.Popen([sys.executable, str(REPO_ROOT / "app.py"), "--model", name, "--port", str(port)],
                              cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first, total = [], []
    try:
        deadline = time.monotonic() + 300
        while True:  # the app loads its model before it listens
            try:
                client = gradio_client.Client(f"http://127.0.0.1:{port}/", verbose=False, download_files=False)
                break
            except Exception:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"python app.py --model {name} did not start (exit code {server.poll()})")
                time.sleep(1)
        for repeat in range(args.repeats + 1):  # the first request warms up (not counted)
            start = time.perf_counter()
            job = client.submit(name, PROMPT, len(codes), *codes, "greedy", 1.0, 0, 1.0, "none", 1.2,
                                args.new_tokens, 0, True, api_name="/compare")
            first_at = None
            while not job.done():  # polled every 20 ms: iterating a Job busy-waits (1 ms sleeps), stealing a core
                if first_at is None and job.outputs():
                    first_at = time.perf_counter() - start
                time.sleep(0.02)
            job.result()
            first_at = first_at or time.perf_counter() - start
            if repeat:
                first.append(first_at)
                total.append(time.perf_counter() - start)
    finally:
        server.terminate()
        server.wait(timeout=60)
    row = {"part": "app", "mode": "app, default weights", "model": name, "first_token_s": statistics.median(first),
           "seconds": statistics.median(total), "new_tokens": len(codes) * args.new_tokens}
    print(f"  app {name}: first {row['first_token_s']:.2f} s, all in {row['seconds']:.2f} s", file=sys.stderr)
    return row


def quality_rows(args) -> list[dict]:
    from lmstudy.evaluation import context_size, score_texts, wikitext2_test_articles

    rows = []
    for weights in args.weights:
        model, tokenizer = load_model(args.quick)
        model = model_with_weights(model, weights)
        seq_len = context_size(model)
        score = score_texts(model, tokenizer, wikitext2_test_articles(), seq_len, batch_size=1,
                            max_tokens=args.quality_tokens)
        rows.append({"part": "quality", "mode": weights, "bits_per_byte": score.bits_per_byte,
                     "tokens": args.quality_tokens})
    for row in rows:
        row["vs_float32"] = row["bits_per_byte"] / rows[0]["bits_per_byte"] - 1
    return rows


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--app-models", nargs="+", default=["smollm2"],
                        help="the app part's models: fetched names or control-code folders (models/ctrl-smollm2)")
    parser.add_argument("--weights", nargs="+", default=["float32", "bfloat16", "int8"],
                        help="weights forms for generate and quality (float32 first: the reference)")
    parser.add_argument("--compile", nargs="+", choices=("off", "on"), default=["off", "on"],
                        help="train eager (off) and with torch.compile (on)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=4, help="timed training steps per mode")
    parser.add_argument("--warmup", type=int, default=2, help="untimed training steps first (compilation)")
    parser.add_argument("--new-tokens", type=int, default=128, help="new tokens per column (4 columns)")
    parser.add_argument("--repeats", type=int, default=3, help="timed requests per weights form (median)")
    parser.add_argument("--quality-tokens", type=int, default=50_000)
    parser.add_argument("--sgemm-n", type=int, default=2048)
    parser.add_argument("--sgemm-reps", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="a tiny random Llama, a few steps: a smoke check")
    parser.add_argument("--out", type=Path, default=None, help=f"CSV (default {DEFAULT_OUT.relative_to(REPO_ROOT)})")
    args = parser.parse_args(argv)
    if args.weights[0] != "float32":
        parser.error("--weights must start with float32 (the reference the others are compared with)")
    if args.quick:
        vars(args).update(batch_size=2, seq_len=32, steps=2, warmup=1, new_tokens=8, repeats=1,
                          quality_tokens=300, sgemm_n=256, sgemm_reps=2)
    return args


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    # One scratch folder for everything this run writes (train()'s runs, --quick's app model), deleted at the end;
    # the environment is restored too, so that a caller (the test suite) keeps its own LMSTUDY_RUNS.
    with tempfile.TemporaryDirectory(prefix="bench_smollm2_") as scratch:
        environment = {"TQDM_DISABLE": os.environ.get("TQDM_DISABLE", "1"),
                       "LMSTUDY_RUNS": os.environ.get("LMSTUDY_RUNS", scratch)}
        args.scratch = Path(scratch)
        with mock.patch.dict(os.environ, environment):
            return measure(args)


def measure(args) -> list[dict]:
    """Every part of ``args.parts``: printed as a table and written to ``--out`` (the default file unless --quick)."""
    torch.set_num_threads(args.threads)
    rows = peak(args)
    fp32_peak = rows[0]["gflops"]
    if "train" in args.parts:
        rows += train_rows(args, fp32_peak)
    if "generate" in args.parts:
        rows += generate_rows(args)
    if "app" in args.parts:
        rows += app_rows(args)
    if "quality" in args.parts:
        rows += quality_rows(args)
    columns = ["part", "mode", "model", "tokens_per_s", "seconds", "gflops", "mfu", "first_token_s", "new_tokens",
               "bits_per_byte", "vs_float32", "tokens", "error"]
    for row in rows:
        row.setdefault("threads", args.threads)
    print(f"{'part':<9}{'mode':<26}{'tokens/s':>10}{'s':>8}{'GFLOP/s':>9}{'MFU':>6}{'first s':>9}{'bits/byte':>10}"
          f"{'vs fp32':>9}")
    for row in rows:
        def cell(key, spec):
            return format(row[key], spec) if row.get(key) is not None else "-"
        print(f"{row['part']:<9}{row['mode']:<26}{cell('tokens_per_s', ',.1f'):>10}{cell('seconds', '.2f'):>8}"
              f"{cell('gflops', '.1f'):>9}{cell('mfu', '.2f'):>6}{cell('first_token_s', '.2f'):>9}"
              f"{cell('bits_per_byte', '.4f'):>10}{cell('vs_float32', '+.2%'):>9}  {row.get('error', '')}")
    out = args.out or (None if args.quick else DEFAULT_OUT)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "w", newline="", encoding="utf-8") as file:
            writer = csv.DictWriter(file, fieldnames=columns + ["threads"], extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        print(f"written: {out}")
    return rows


if __name__ == "__main__":
    main()
