"""Model-FLOP utilisation (MFU) of training the shared base model, against the machine's fp32 matmul peak.

    OMP_NUM_THREADS=2 python benchmarks/bench_base_throughput.py     # the measurement (quiet machine)
    python benchmarks/bench_base_throughput.py --quick --out /tmp/q.csv  # tiny sizes: a smoke check, seconds
    python benchmarks/bench_base_throughput.py --threads 2 --compile off --steps 20

What is measured, per torch thread count (``--threads``, default 1 and 2):

- **sgemm**: fp32 ``torch.mm`` of two ``--sgemm-n`` square matrices (2048), ``--sgemm-reps`` timed products after
  two untimed ones; GFLOP/s = 2 n^3 / median seconds. This is the peak the model rate is compared with.
- **training** of the base model (``lmstudy.base``: the ``cpu`` preset's GPT-2, 4x256, context 256, 8,192-token
  vocabulary, batch 16; ``--n-layer``, ``--n-embd``, ``--n-head``, ``--seq-len``, ``--batch-size``,
  ``--vocab-size`` change it) on a random token stream (no corpus needed), with ``torch.compile(model)`` off and
  on (``--compile``), by each of (``--methods``):

  - ``bare``: a hand-written loop doing the same work as the package's loop: ``lm_loss`` (forward +
    cross-entropy), backward, ``clip_grad_norm_``, AdamW ``step`` (the very optimizer ``train()`` builds:
    ``lmstudy.training.build_optimizer`` with the base recipe's betas and weight decay), ``zero_grad``;
  - ``train``: ``lmstudy.training.train()`` with an ``LMTask``, the base recipe's ``TrainConfig`` (AdamW, cosine
    schedule, clip 1.0, a train log every 50 steps) with no evaluation and no checkpoint during the run, into
    a fresh run in a temporary ``LMSTUDY_RUNS``;
  - ``hf`` (not in the default run): as ``bare``, but the loss is Hugging Face's own ``model(input_ids=x,
    labels=x).loss`` (the "plain GPT-2 training" of the issue).

Timing: each way trains ``--warmup + --steps + 1`` steps on the same task class, which notes the moment each
batch is requested (``TimedLMTask`` of ``bench_training_loop.py``), i.e. the end of the previous step. The time
per step is the span from the request of batch ``--warmup`` to that of the last batch, over ``--steps`` steps:
model and optimizer construction, the warm-up steps (which include compilation when compile is on), and
``train()``'s fixed costs (accelerate setup; its final evaluation and final checkpoint, which ``train()``
always does after the last step) all fall outside that window, for every method alike. So the ``train`` row
measures the loop's steady state, which is what the base's 2.5-hour run consists of. (The final evaluation of a
compiled model runs on the uncompiled module, to spare a second compilation that is not timed anyway.)

Reported per row: tokens/s = batch x context / seconds per step; model GFLOP/s = tokens/s x
``lmstudy.base.flops_per_token`` (PaLM's 6(N + dV) + 12 L d T, the count the base's compute budget uses);
MFU = model GFLOP/s / sgemm GFLOP/s at the same thread count; ``vs_bare`` = 1 - tokens/s / tokens/s of ``bare``
at the same threads and compile setting (for ``train``: the loop's overhead). Issue goal: MFU >= 0.60 with 2
threads, overhead <= 0.05. ``--repeats`` > 1 repeats the whole grid and reports the median time per step.

Threads: one process measures every thread count, with ``torch.set_num_threads`` called before each
measurement's model and data are built (and before each sgemm); compiled kernels are generated for the
thread count current at compilation (each compiled measurement builds and compiles a fresh model). Start the
process with ``OMP_NUM_THREADS`` at least the largest ``--threads``. Rows that fail under ``torch.compile``
(no C++ compiler, an unsupported op) keep their error in the ``error`` column instead of stopping the run.
The table is printed and written as CSV to ``--out`` (default ``figures/base_throughput.csv``; ``--quick``
writes a CSV only when ``--out`` is given, so a smoke check never overwrites the measurement).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import os
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benchmark, also when imported

# Sets TQDM_DISABLE and HF_HUB_OFFLINE (before transformers loads) and gives the batch-stamping task.
from bench_training_loop import TimedLMTask  # noqa: E402

import torch  # noqa: E402

from lmstudy.base import BaseConfig, BaseDataConfig, BaseModelConfig, build_model, flops_per_token  # noqa: E402
from lmstudy.lm_batches import lm_loss  # noqa: E402
from lmstudy.runs import get_run  # noqa: E402
from lmstudy.scales import preset  # noqa: E402
from lmstudy.training import TrainConfig, build_optimizer, count_parameters, train  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "figures" / "base_throughput.csv"
METHODS = ("bare", "train", "hf")
QUICK = dict(n_layer=1, n_head=2, n_embd=32, seq_len=32, batch_size=4, vocab_size=512, steps=3, warmup=1,
             sgemm_n=256, sgemm_reps=3)
COLUMNS = ("method", "threads", "compile", "tokens_per_s", "ms_per_step", "model_gflops", "sgemm_gflops", "mfu",
           "vs_bare", "n_layer", "n_head", "n_embd", "seq_len", "batch_size", "vocab_size", "flops_per_token",
           "steps", "warmup", "repeats", "load_avg_1m", "error")


class Vocab:
    """Stands in for the tokenizer: ``gpt2_config`` reads only ``len()`` and ``eos_token_id``."""

    def __init__(self, size: int) -> None:
        self.size, self.eos_token_id = size, size - 1

    def __len__(self) -> int:
        return self.size


class BenchTask(TimedLMTask):
    """The batch-stamping LMTask; its (untimed) final evaluation runs on the uncompiled module."""

    def evaluate(self, model):
        return super().evaluate(getattr(model, "_orig_mod", model))


def sgemm_gflops(n: int, reps: int, dtype: torch.dtype = torch.float32) -> float:
    """Matmul rate (fp32 unless ``dtype``) at the current thread count: 2 n^3 / median seconds of ``reps`` products."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    out = torch.empty(n, n, dtype=dtype)
    for _ in range(2):
        torch.mm(a, b, out=out)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        torch.mm(a, b, out=out)
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times) / 1e9


def base_config(args) -> BaseConfig:
    """The cpu preset's base run with the command line's sizes."""
    params = preset("base", "cpu")
    model = BaseModelConfig(**{**params["model"], **{k: getattr(args, k) for k in ("n_layer", "n_head", "n_embd",
                                                                                    "seq_len")}})
    return BaseConfig(data=BaseDataConfig(vocab_size=args.vocab_size), model=model, batch_size=args.batch_size,
                      lr=params["lr"])


def bench_train_config(config: BaseConfig, total_steps: int) -> TrainConfig:
    """The base's recipe (``BaseConfig.train_config``: AdamW, betas, decay, cosine, clip, log every 50 steps),
    for ``total_steps`` steps, with no evaluation and no checkpoint before the end."""
    return replace(config.train_config(), max_steps=total_steps, eval_every=None, checkpoint_every=None,
                   keep_checkpoints=())


def make_task(config: BaseConfig, total_steps: int) -> BenchTask:
    """Random token ids; one epoch of exactly ``total_steps`` random-window batches; one validation window."""
    seq_len, vocab = config.model.seq_len, config.data.vocab_size
    generator = torch.Generator().manual_seed(0)
    train_ids = torch.randint(vocab, (max(100_000, 4 * config.tokens_per_step),), generator=generator)
    valid_ids = torch.randint(vocab, (seq_len + 1,), generator=generator)
    return BenchTask(train_ids, valid_ids, batch_size=config.batch_size, seq_len=seq_len,
                     batches_per_epoch=total_steps, eval_batch_size=1)


def hf_loss(model, x, y):
    return model(input_ids=x, labels=x).loss  # HF shifts the labels itself (one target fewer per window)


def bare_loop(model, task: BenchTask, config: TrainConfig, loss_fn) -> None:
    optimizer = build_optimizer(model, config)
    model.train()
    for x, y in itertools.islice(task.batches(0), config.max_steps):
        loss = loss_fn(model, x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def seconds_per_step(method: str, threads: int, compiled: bool, config: BaseConfig, args) -> float:
    """Steady-state seconds per training step of one method (module docstring: Timing)."""
    torch.set_num_threads(threads)
    total = args.warmup + args.steps + 1
    train_config = bench_train_config(config, total)
    task = make_task(config, total)
    model = build_model(config, Vocab(config.data.vocab_size))
    if compiled:
        torch._dynamo.reset()  # drop the previous measurement's graphs (compiled for its thread count)
        model = torch.compile(model)
    if method == "train":
        run = get_run("bench_base_throughput", {"train": train_config, "nonce": time.perf_counter_ns()})
        train(model, task, train_config, run)
    else:
        bare_loop(model, task, train_config, lm_loss if method == "bare" else hf_loss)
    if len(task.stamps) != total:
        raise RuntimeError(f"{method} requested {len(task.stamps)} batches, expected {total}")
    return task.seconds_per_step(args.warmup)


def measure(args) -> list[dict]:
    """Every (threads, compile, method) row; sgemm first at each thread count; whole grid ``--repeats`` times."""
    config = base_config(args)
    fpt = flops_per_token(config.model, config.data.vocab_size)
    sgemm: dict[int, list[float]] = {t: [] for t in args.threads}
    times: dict[tuple, list[float]] = {}
    errors: dict[tuple, str] = {}
    for _ in range(args.repeats):
        for threads in args.threads:
            torch.set_num_threads(threads)
            sgemm[threads].append(sgemm_gflops(args.sgemm_n, args.sgemm_reps))
            for mode, method in itertools.product(args.compile, args.methods):
                key = (method, threads, mode)
                if key in errors:
                    continue
                try:
                    times.setdefault(key, []).append(seconds_per_step(method, threads, mode == "on", config, args))
                except Exception as exc:  # only compiled runs may fail; eager failures are bugs
                    if mode != "on":
                        raise
                    traceback.print_exc(limit=3)
                    message = str(exc).strip().splitlines()
                    errors[key] = f"{type(exc).__name__}: {message[0] if message else ''}"[:300]
                print(f"  done: {method}, {threads} thread(s), compile {mode}", file=sys.stderr, flush=True)

    tokens_per_step = config.tokens_per_step
    rows = []
    for threads, mode, method in itertools.product(args.threads, args.compile, args.methods):
        key = (method, threads, mode)
        peak = statistics.median(sgemm[threads])
        row = {"method": method, "threads": threads, "compile": mode, "sgemm_gflops": peak,
               "n_layer": config.model.n_layer, "n_head": config.model.n_head, "n_embd": config.model.n_embd,
               "seq_len": config.model.seq_len, "batch_size": config.batch_size,
               "vocab_size": config.data.vocab_size, "flops_per_token": fpt, "steps": args.steps,
               "warmup": args.warmup, "repeats": args.repeats, "load_avg_1m": os.getloadavg()[0],
               "error": errors.get(key, "")}
        if key in times and key not in errors:
            step = statistics.median(times[key])
            tps = tokens_per_step / step
            row.update(tokens_per_s=tps, ms_per_step=1000 * step, model_gflops=tps * fpt / 1e9,
                       mfu=tps * fpt / 1e9 / peak)
        rows.append(row)
    for row in rows:
        bare = next((r for r in rows if r["method"] == "bare" and r["threads"] == row["threads"]
                     and r["compile"] == row["compile"]), None)
        if row["method"] != "bare" and bare and bare.get("tokens_per_s") and row.get("tokens_per_s"):
            row["vs_bare"] = 1 - row["tokens_per_s"] / bare["tokens_per_s"]
    return rows


def _fmt(value, spec: str) -> str:
    return "-" if value is None or value == "" else format(value, spec)


def print_table(rows: list[dict], args) -> None:
    first = rows[0]
    params = count_parameters(build_model(base_config(args), Vocab(args.vocab_size)))
    print(f"cpu ({os.cpu_count()} cores) | torch {torch.__version__} | OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', 'unset')} | load average {os.getloadavg()[0]:.2f}")
    print(f"base GPT-2 {first['n_layer']}x{first['n_embd']} ({first['n_head']} heads, {params:,} parameters), "
          f"vocab {first['vocab_size']:,}, batch {first['batch_size']}x{first['seq_len']} | "
          f"{first['flops_per_token'] / 1e6:.2f} MFLOP/token | {args.steps} timed steps after {args.warmup} "
          f"warm-up | sgemm {args.sgemm_n}^2 | median of {args.repeats}")
    print(f"{'method':<8}{'threads':>8}{'compile':>8}{'tokens/s':>10}{'ms/step':>10}{'model GF/s':>12}"
          f"{'sgemm GF/s':>12}{'MFU':>7}{'vs bare':>9}  error")
    for r in rows:
        print(f"{r['method']:<8}{r['threads']:>8}{r['compile']:>8}{_fmt(r.get('tokens_per_s'), ',.0f'):>10}"
              f"{_fmt(r.get('ms_per_step'), '.1f'):>10}{_fmt(r.get('model_gflops'), '.1f'):>12}"
              f"{r['sgemm_gflops']:>12.1f}{_fmt(r.get('mfu'), '.2f'):>7}{_fmt(r.get('vs_bare'), '+.3f'):>9}"
              f"  {r['error']}")
    for r in rows:
        if r["method"] == "train" and r["threads"] == 2 and r.get("mfu") is not None:
            print(f"goal, compile {r['compile']}: MFU {r['mfu']:.2f} (>= 0.60: {r['mfu'] >= 0.6}), "
                  f"overhead {_fmt(r.get('vs_bare'), '+.3f')} (<= 0.05: "
                  f"{r.get('vs_bare') is not None and r['vs_bare'] <= 0.05})")


def write_csv(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in
                             ((k, row.get(k, "")) for k in COLUMNS)})


def parse_args(argv=None) -> argparse.Namespace:
    model = preset("base", "cpu")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="timed steps per measurement (default 8)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first, compilation included (3)")
    parser.add_argument("--repeats", type=int, default=1, help="run the whole grid this many times; median")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--compile", nargs="+", choices=("off", "on"), default=["off", "on"])
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=["bare", "train"])
    for name in ("n_layer", "n_head", "n_embd", "seq_len"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=None,
                            help=f"default: the cpu preset's {model['model'][name]}")
    parser.add_argument("--batch-size", type=int, default=None, help=f"default {model['batch_size']}")
    parser.add_argument("--vocab-size", type=int, default=None, help=f"default {model['data']['vocab_size']}")
    parser.add_argument("--sgemm-n", type=int, default=None, help="matrix size of the sgemm peak (2048)")
    parser.add_argument("--sgemm-reps", type=int, default=None, help="timed sgemm products (10)")
    parser.add_argument("--out", type=Path, default=None, help=f"CSV (default {DEFAULT_OUT.relative_to(REPO_ROOT)})")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and steps: a smoke check in seconds")
    args = parser.parse_args(argv)
    defaults = dict(QUICK) if args.quick else dict(
        **model["model"], batch_size=model["batch_size"], vocab_size=model["data"]["vocab_size"], steps=8, warmup=3,
        sgemm_n=2048, sgemm_reps=10)
    for name, value in defaults.items():  # flags given explicitly win over --quick and the preset
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    if args.out is None and not args.quick:
        args.out = DEFAULT_OUT
    if args.steps < 1 or args.warmup < 0 or args.repeats < 1:
        parser.error("--steps and --repeats must be >= 1, --warmup >= 0")
    if args.n_embd % args.n_head:
        parser.error(f"--n-embd {args.n_embd} is not divisible by --n-head {args.n_head}")
    return args


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    cores = os.cpu_count() or 1
    if max(args.threads) > cores:
        print(f"warning: {max(args.threads)} threads on {cores} cores", file=sys.stderr)
    omp = os.environ.get("OMP_NUM_THREADS")
    if omp is not None and omp.isdigit() and int(omp) < max(args.threads):
        print(f"note: OMP_NUM_THREADS={omp} < {max(args.threads)}; torch.set_num_threads raises it per measurement",
              file=sys.stderr)
    previous_runs, previous_threads = os.environ.get("LMSTUDY_RUNS"), torch.get_num_threads()
    try:
        with tempfile.TemporaryDirectory() as runs_root:
            os.environ["LMSTUDY_RUNS"] = runs_root
            rows = measure(args)
    finally:
        if previous_runs is None:
            os.environ.pop("LMSTUDY_RUNS", None)
        else:
            os.environ["LMSTUDY_RUNS"] = previous_runs
        torch.set_num_threads(previous_threads)
    print_table(rows, args)
    if args.out is not None:
        write_csv(rows, args.out)
        print(f"wrote {args.out}")
    return rows


if __name__ == "__main__":
    main()
