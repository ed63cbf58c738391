"""One tiny training run per study task kind, the same under one process and under ``accelerate launch``: what the
multi-process and gradient-accumulation tests of test_multiprocess.py compare.

    python tests/train_multi.py KIND RUNS_DIR [--batch 8] [--accum 1] [--steps 12] [--dropout]
    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 tests/train_multi.py KIND RUNS_DIR ...

KIND: ``lstm`` (a tiny LSTM on ``LMTask`` random windows), ``awd`` (AWD-LSTM on its stateful task with variable
BPTT, the lr scaled by the window and NT-ASGD), ``gpt2e`` (a tiny GPT2E on ``EntityLMTask``: stateful, padded
rows, a loss averaged over a varying number of tokens), or ``all`` (the three, one after the other, in one launch).
``--batch`` is the global batch (every process and
accumulation part trains on its share). Trains into the run cache under RUNS_DIR (study ``multi-KIND``),
resuming from a checkpoint; the main process prints the final metrics as JSON. Each process writes its pid to
``RUNS_DIR/pid-RANK`` (the kill test kills one of them). Dropout is off unless ``--dropout``: one process and
two draw different masks, so only runs without dropout can give the same losses.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

torch.set_num_threads(1)  # bit-identical CPU results between runs, and fair to a shared machine

sys.path.insert(0, str(Path(__file__).parent))
from train_tiny import VOCAB, TinyLSTMLM, synthetic_stream  # noqa: E402

from lmstudy.runs import cached, leave_process_group  # noqa: E402
from lmstudy.training import TrainConfig, train  # noqa: E402

KINDS = ("lstm", "awd", "gpt2e")


def build(kind: str, batch: int, dropout: bool, seed: int = 1234):
    """(model, task, TrainConfig fields) of one tiny run of ``kind`` with global batch ``batch``."""
    torch.manual_seed(seed)
    data = synthetic_stream(6000, seed=0)
    if kind == "lstm":
        from lmstudy.lm_batches import LMTask

        model = TinyLSTMLM()
        model.drop.p = 0.1 if dropout else 0.0
        task = LMTask(data[:5000], data[5000:], batch_size=batch, seq_len=16, batches_per_epoch=10, seed=seed)
        return model, task, dict(lr=3e-3, lr_schedule="cosine", warmup_steps=4, weight_decay=0.1)
    if kind == "awd":
        from lmstudy.welch.awd_lstm import AWDLSTM, AWDLSTMConfig, AWDLSTMTask

        p = 0.2 if dropout else 0.0
        model = AWDLSTM(AWDLSTMConfig(vocab_size=VOCAB, emb_size=16, hidden_size=24, n_layers=2, dropout=p,
                                      dropouth=p, dropouti=p, dropoute=p, wdrop=p, tie_weights=True))
        task = AWDLSTMTask(data[:3000], data[5000:5400], batch_size=batch, bptt=12, eval_batch_size=4, nonmono=1,
                           seed=seed)
        # Evaluations every 3 steps: validation stalls by step 9, so NT-ASGD switches to averaged SGD mid-run.
        return model, task, dict(optimizer="sgd", lr=20.0, grad_clip=0.25, weight_decay=1.2e-6, eval_every=3)
    if kind == "gpt2e":
        from lmstudy.entity.data import EntityDocument, EntityLMTask
        from lmstudy.entity.model import GPT2E, GPT2EConfig

        def document(i: int) -> EntityDocument:
            n = 9 + (7 * i) % 23  # lengths differ: rows end at different steps, parts carry padding
            ids = [96] + [(5 * j + i) % 90 for j in range(n - 1)]
            entities = [0] + [1 + (j // 3) % 4 if j % 3 == 0 else 0 for j in range(n - 1)]
            return EntityDocument(f"d{i}", ids, entities, [-1] * n)

        p = 0.1 if dropout else 0.0
        model = GPT2E(GPT2EConfig(vocab_size=97, n_positions=32, n_embd=32, n_layer=2, n_head=4, bos_token_id=96,
                                  eos_token_id=96, resid_pdrop=p, embd_pdrop=p, attn_pdrop=p))
        docs = [document(i) for i in range(14)]
        task = EntityLMTask(docs[:12], docs[12:], batch_size=batch, seq_len=6, pad_id=96, seed=seed)
        return model, task, dict(lr=3e-3, warmup_steps=2)
    raise ValueError(f"kind {kind!r} is not one of {KINDS}")


def main(kind: str, runs_dir: str, batch: int = 8, accum: int = 1, steps: int = 12, dropout: bool = False,
         checkpoint_every: int = 4, eval_every: int = 4) -> dict:
    """Train (or resume, or read back) the run; returns its final metrics."""
    os.environ["LMSTUDY_RUNS"] = runs_dir
    Path(runs_dir).mkdir(parents=True, exist_ok=True)
    (Path(runs_dir) / f"pid-{os.environ.get('RANK', '0')}").write_text(str(os.getpid()))
    model, task, fields = build(kind, batch, dropout)
    config = TrainConfig(**{"max_steps": steps, "eval_every": eval_every, "checkpoint_every": checkpoint_every,
                            "log_every": 1, "seed": 1234, "grad_accum_steps": accum, **fields})
    identity = {"kind": kind, "batch": batch, "dropout": dropout, "train": config}
    return cached(f"multi-{kind}", identity, lambda run: train(model, task, config, run))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=(*KINDS, "all"))
    parser.add_argument("runs_dir")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--accum", type=int, default=1)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--checkpoint-every", type=int, default=4)
    parser.add_argument("--dropout", action="store_true")
    args = parser.parse_args()
    for kind in KINDS if args.kind == "all" else (args.kind,):
        metrics = main(kind, args.runs_dir, args.batch, args.accum, args.steps, args.dropout, args.checkpoint_every)
        if int(os.environ.get("RANK", "0")) == 0:
            print(json.dumps({"kind": kind, **metrics}), flush=True)
    leave_process_group()
    # Skip the interpreter's teardown: even after leaving the group, one launch in eight aborted there on the
    # 2-core machine ("terminate called without an active exception", a C++ thread of torch.distributed), after
    # every result had been written; 12 launches in a row ended cleanly with this exit.
    sys.stdout.flush()
    os._exit(0)
