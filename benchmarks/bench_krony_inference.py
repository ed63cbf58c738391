"""Inference speed and weight bytes of Kronecker-compressed GPT-2s (Krony-PT) against the dense base model.

For a dense ``GPT2LMHeadModel`` and the same model compressed into each size class of the Krony study
(``lmstudy.krony.study.class_a_shape``: 96M B = (2, 1), 81M B = (4, 1), 67M tiny balanced factors, and the
67M shapes with 4 factors + scalars as in Table 6), this measures

- ``score tok/s``: tokens per second of one forward pass over a batch of ``--batch x --seq-len`` tokens (what a
  perplexity evaluation or a prompt prefill does), in eval mode under ``torch.no_grad``;
- ``generate tok/s``: new tokens per second of greedy decoding with the KV cache (``model.generate``), batch 1,
  ``--new-tokens`` tokens after a ``--prompt``-token prompt, every token forced (``min_new_tokens``);
- ``weights MB``: the size of the model's ``model.safetensors`` (``safetensors.torch.save_model``, float32, tied
  embeddings stored once), the bytes a compressed checkpoint takes on disk.

The weights are random (Van Loan factors of a random dense model): speed and size do not depend on the values.
Models run interleaved (one repeat of each in turn) so that load from other processes hits all alike; times are
medians after one warm-up. ``speed-up`` is the median of the per-repeat ratios base / compressed.

    python benchmarks/bench_krony_inference.py                   # cpu-study dims (4x256, vocab 8192), 1 thread
    python benchmarks/bench_krony_inference.py --size gpt2 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_model
from transformers import GPT2Config, GPT2LMHeadModel

from lmstudy.krony.model import KroneckerConfig, compress
from lmstudy.training import count_parameters
from lmstudy.krony.study import class_a_shape

SIZES = {
    "cpu": dict(vocab_size=8192, n_embd=256, n_layer=4, n_head=4, n_positions=128),  # the cpu preset's base
    "gpt2": dict(vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024),  # GPT-2 small
}
# (label, size class, factors, scalars)
VARIANTS = [("Krony 96M", "96M", 1, False), ("Krony 81M", "81M", 1, False), ("Krony 67M", "67M", 1, False),
            ("Krony 67M, 4 factors + scalars", "67M", 4, True)]


def build_models(size: str) -> dict[str, GPT2LMHeadModel]:
    config = GPT2Config(**SIZES[size], bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    base = GPT2LMHeadModel(config).eval()
    models = {"base (dense)": base}
    for label, size_class, n_factors, scalars in VARIANTS:
        model = GPT2LMHeadModel(config)
        model.load_state_dict(base.state_dict())
        kron = KroneckerConfig(class_a_shape(size_class, config.n_embd), n_factors=n_factors, scalars=scalars)
        models[label] = compress(model, kron, "van_loan").eval()
    return models


def weight_bytes(model: torch.nn.Module) -> int:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.safetensors"
        save_model(model, str(path))
        return path.stat().st_size


@torch.no_grad()
def time_score(model: GPT2LMHeadModel, ids: torch.Tensor) -> float:
    start = time.perf_counter()
    model(input_ids=ids)
    return time.perf_counter() - start


@torch.no_grad()
def time_generate(model: GPT2LMHeadModel, prompt: torch.Tensor, new_tokens: int) -> float:
    start = time.perf_counter()
    out = model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                         pad_token_id=0)
    elapsed = time.perf_counter() - start
    assert out.size(1) == prompt.size(1) + new_tokens
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=list(SIZES), default="cpu")
    parser.add_argument("--batch", type=int, default=16, help="sequences per scored batch (default 16)")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per scored sequence (default 128)")
    parser.add_argument("--prompt", type=int, default=16, help="prompt tokens before generation (default 16)")
    parser.add_argument("--new-tokens", type=int, default=64, help="greedy tokens generated (default 64)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per model (median reported)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as the cpu study)")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    models = build_models(args.size)
    vocab = models["base (dense)"].config.vocab_size
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(vocab, (args.batch, args.seq_len), generator=generator)
    prompt = torch.randint(vocab, (1, args.prompt), generator=generator)
    print(f"torch {torch.__version__}, {args.size} dims {SIZES[args.size]}, threads {torch.get_num_threads()}; "
          f"score {args.batch} x {args.seq_len} tokens, generate {args.new_tokens} after {args.prompt}, "
          f"median of {args.repeats} after 1 warm-up, interleaved")

    score = {name: [] for name in models}
    generate = {name: [] for name in models}
    for repeat in range(args.repeats + 1):
        for name, model in models.items():
            s, g = time_score(model, ids), time_generate(model, prompt, args.new_tokens)
            if repeat:  # the first round warms up
                score[name].append(s)
                generate[name].append(g)

    base = "base (dense)"
    header = (f"{'model':<32} {'parameters':>12} {'weights MB':>10} {'score tok/s':>12} {'speed-up':>8} "
              f"{'generate tok/s':>15} {'speed-up':>8}")
    print()
    print(header)
    print("-" * len(header))
    for name, model in models.items():
        score_speedup = statistics.median(b / s for b, s in zip(score[base], score[name]))
        generate_speedup = statistics.median(b / g for b, g in zip(generate[base], generate[name]))
        print(f"{name:<32} {count_parameters(model):>12,} {weight_bytes(model) / 1e6:>10.2f} "
              f"{ids.numel() / statistics.median(score[name]):>12,.0f} {score_speedup:>8.2f} "
              f"{args.new_tokens / statistics.median(generate[name]):>15,.1f} {generate_speedup:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
