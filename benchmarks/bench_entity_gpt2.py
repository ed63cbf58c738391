"""Time per training step of GPT2E (entity attention in every block + entity memory) against GPT2 (the same
model without entity layers), at small sizes.

A step is what ``lmstudy.training.train`` does per batch, minus the loop's bookkeeping: the task's loss
(``EntityLMTask.loss``: forward with the entity memory read from, and written to, the carry; cross-entropy),
backward, gradient clipping to 1.0 and an AdamW step. Both models see the same batches, built by
``lmstudy.entity.data.stream_batches`` from synthetic documents (``--data synthetic``: random tokens, 25% of
sub-tokens in mentions of 30 entities per document: OntoGUM train has 25.7% and 30 entities per document
under our innermost rule) or from the first GUM training
documents (``--data gum``); ``--vocab`` sets the synthetic vocabulary (GPT-2's 50,257 by default; the
output layer then dominates a small model's step, so a smaller one shows the entity layers' share better).
GPT2 and GPT2E steps alternate (and which goes first alternates too), so machine load hits both alike; the reported
times are medians over ``--steps`` after ``--warmup`` steps, and the ratio is the median of the per-pair
ratios GPT2E / GPT2. The paper reports 0.298 s vs 0.290 s per step (1.03x) for GPT-2 small on a Titan V.
``--per-mention`` also times GPT2E with the memory written after each mention (two passes, the study's ablation).

    python benchmarks/bench_entity_gpt2.py
    python benchmarks/bench_entity_gpt2.py --threads 1 --vocab 8192
    python benchmarks/bench_entity_gpt2.py --data gum --device cuda --sizes 12x768
    OMP_NUM_THREADS=2 python benchmarks/bench_entity_gpt2.py --threads 2 --vocab 8192 --sizes 3x192 \
        --batch-size 8 --seq-len 256 --per-mention          # the cpu study's sizes
"""

from __future__ import annotations

import argparse
import os
import random
import statistics

import torch

from lmstudy.entity.data import EntityDocument, EntityLMTask, load_entity_documents
from lmstudy.entity.model import GPT2E, GPT2EConfig, training_flops_per_token
from lmstudy.entity.timing import compare_step_times
from lmstudy.training import count_parameters

GPT2_VOCAB = 50257  # the default: at small widths the output layer is a large share of a step


def synthetic_documents(n_docs: int, length: int, vocab: int, n_entities: int = 30, mention_share: float = 0.25,
                        seed: int = 0) -> list[EntityDocument]:
    """Random documents with mentions (runs of 1-3 sub-tokens) of ``n_entities`` entities."""
    rng = random.Random(seed)
    docs = []
    for index in range(n_docs):
        ids = [vocab - 1] + [rng.randrange(vocab - 1) for _ in range(length - 1)]
        entities = [0] * length
        position = 1
        while position < length:
            span = rng.randint(1, 3)
            if rng.random() < mention_share:  # spans of either kind have the same mean length
                entity = rng.randint(1, n_entities)
                for t in range(position, min(position + span, length)):
                    entities[t] = entity
            position += span
        docs.append(EntityDocument(f"synthetic-{index}", ids, entities, [-1] * length))
    return docs


def benchmark_size(n_layer: int, n_embd: int, docs, args, device) -> dict:
    n_head = max(1, n_embd // 64)
    common = dict(vocab_size=args.vocab, n_positions=args.seq_len, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                  bos_token_id=args.vocab - 1, eos_token_id=args.vocab - 1)
    torch.manual_seed(0)
    gpt2e = GPT2E(GPT2EConfig(**common)).to(device)
    gpt2 = GPT2E(GPT2EConfig(entity_layers=[], **common)).to(device)
    gpt2.load_state_dict(gpt2e.state_dict(), strict=False)  # the shared weights are the same
    models = {"gpt2": gpt2, "gpt2e": gpt2e}
    if args.per_mention:
        models["mention"] = GPT2E(GPT2EConfig(memory_update="mention", **common)).to(device)
        models["mention"].load_state_dict(gpt2e.state_dict())
    task = EntityLMTask(docs, docs[:1], batch_size=args.batch_size, seq_len=args.seq_len, pad_id=args.vocab - 1)
    # The study's timing (lmstudy.entity.timing): same batches, models alternating.
    times = compare_step_times(models, task, args.steps, warmup=args.warmup, device=device)
    row = {
        "size": f"{n_layer}x{n_embd}",
        "params_gpt2": count_parameters(gpt2),
        "params_gpt2e": count_parameters(gpt2e),
        "gpt2_ms": 1e3 * statistics.median(times["gpt2"]),
        "gpt2e_ms": 1e3 * statistics.median(times["gpt2e"]),
        "ratio": statistics.median(e / g for e, g in zip(times["gpt2e"], times["gpt2"])),
        "flop_ratio": training_flops_per_token(gpt2e.config, args.seq_len) / training_flops_per_token(gpt2.config,
                                                                                                      args.seq_len),
    }
    if args.per_mention:
        row["mention_ms"] = 1e3 * statistics.median(times["mention"])
        row["mention_ratio"] = statistics.median(m / g for m, g in zip(times["mention"], times["gpt2"]))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["2x64", "4x128"], help="LAYERSxWIDTH ...")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per model (median reported)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--vocab", type=int, default=GPT2_VOCAB, help="output vocabulary (synthetic data only)")
    parser.add_argument("--data", choices=("synthetic", "gum"), default="synthetic")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: every core allowed)")
    parser.add_argument("--per-mention", action="store_true", help="also time the per-mention memory (two passes)")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cpu":
        # One thread is steadier on a shared, busy machine (threads that wait on each other add noise).
        torch.set_num_threads(args.threads or len(os.sched_getaffinity(0)))
    if args.data == "gum":
        docs = load_entity_documents("gum", "train", limit=16)
        args.vocab = GPT2_VOCAB
    else:
        docs = synthetic_documents(n_docs=16, length=1000, vocab=args.vocab)
    in_mentions = sum(e != 0 for d in docs for e in d.entity_ids) / sum(len(d.entity_ids) for d in docs)
    print(f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, data {args.data} "
          f"({len(docs)} docs, {in_mentions:.0%} of sub-tokens in mentions), batch {args.batch_size}x{args.seq_len}, "
          f"vocab {args.vocab}, median of {args.steps} steps after {args.warmup} warm-up; step = loss + backward + "
          f"clip + AdamW")
    header = (f"{'size':<8} {'params GPT2':>12} {'params GPT2E':>13} {'GPT2 ms':>9} {'GPT2E ms':>9} "
              f"{'GPT2E/GPT2':>11} {'FLOP ratio':>11}" + (f" {'mention ms':>11} {'mention/GPT2':>13}"
                                                          if args.per_mention else ""))
    print(header)
    print("-" * len(header))
    for size in args.sizes:
        n_layer, n_embd = (int(part) for part in size.split("x"))
        row = benchmark_size(n_layer, n_embd, docs, args, device)
        print(f"{row['size']:<8} {row['params_gpt2']:>12,} {row['params_gpt2e']:>13,} {row['gpt2_ms']:>9.1f} "
              f"{row['gpt2e_ms']:>9.1f} {row['ratio']:>11.3f} {row['flop_ratio']:>11.3f}"
              + (f" {row['mention_ms']:>11.1f} {row['mention_ratio']:>13.3f}" if args.per_mention else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
