"""``python -m lmstudy eval PATH``: the evaluation protocol's table for a local Hugging Face causal LM folder
(or a fetched pretrained model's name, ``smollm2``).

Kept apart from :mod:`lmstudy.evaluation` so that building the command line (``--help``) does not import
torch; the handler imports it. The model and tokenizer load from ``PATH`` only (``local_files_only``:
never the hub). Defaults: the whole WikiText-2 test and LAMBADA, 20 test documents of each held-out
domain (reading a big domain's test part streams its corpus until they pass: seconds for 20, minutes
for all of wikipedia, imdb, reddit with ``--domain-docs 0``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

DTYPES = ("float32", "bfloat16", "float16", "auto")


def register(subparsers) -> None:
    """Add ``eval PATH`` to the ``lmstudy`` command line."""
    parser = subparsers.add_parser(
        "eval", help="perplexity per token / word / byte on WikiText-2, LAMBADA and held-out domains",
        description="Score a local Hugging Face causal LM folder with lmstudy's evaluation protocol "
        "(lmstudy/evaluation.py): detokenised WikiText-2 test, LAMBADA (OpenAI's test set), the test part of "
        "each held-out domain; prints one row per benchmark.",
    )
    parser.add_argument("path", help="a folder with config.json, weights and tokenizer files (save_pretrained), or "
                        "a fetched model's name (smollm2: python -m lmstudy models fetch smollm2)")
    parser.add_argument("--seq-len", type=int, default=None,
                        help="window length in tokens (default: the model's positions)")
    parser.add_argument("--stride", type=int, default=None,
                        help="sliding-window stride (default: seq-len, non-overlapping windows)")
    parser.add_argument("--batch-size", type=int, default=4, help="windows per forward pass (default: 4)")
    parser.add_argument("--wikitext-tokens", type=int, default=0, metavar="N",
                        help="score the first N tokens of WikiText-2 test (default 0: all); -1 skips it")
    parser.add_argument("--lambada", type=int, default=0, metavar="N",
                        help="first N LAMBADA passages (default 0: all 5,153); -1 skips it")
    parser.add_argument("--domains", nargs="*", default=None, metavar="DOMAIN",
                        help="held-out domains (default: wikipedia imdb reddit irc books news; none if empty)")
    parser.add_argument("--domain-docs", type=int, default=20, metavar="N",
                        help="test documents per domain (default 20; 0: all, minutes for the big corpora)")
    parser.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    parser.add_argument("--dtype", choices=DTYPES, default="float32",
                        help="weights' dtype (default float32: half precision is slow on a CPU; 'auto': as saved)")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT",
                        help="also write the table and the settings to this JSON file")
    parser.set_defaults(handler=run)


def load_local_model(path: str | Path, device: str | None = None, dtype: str = "float32"):
    """``(model, tokenizer)`` from a local Hugging Face folder or a fetched model's name (``smollm2``:
    :func:`lmstudy.pretrained.load_pretrained`), the model in eval mode on ``device``."""
    import torch

    from lmstudy.pretrained import load_pretrained

    model, tokenizer, _ = load_pretrained(str(path), dtype)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(device).eval(), tokenizer


def run(args: argparse.Namespace) -> int:
    """``eval PATH``: score the model folder with the protocol, print the table (and write ``--json``); returns 0."""
    from lmstudy.evaluation import EvalConfig, context_size, evaluate_model, format_table

    started = time.perf_counter()
    model, tokenizer = load_local_model(args.path, args.device, args.dtype)
    seq_len = args.seq_len or context_size(model)
    config = EvalConfig(
        seq_len=seq_len, stride=args.stride or seq_len, batch_size=args.batch_size,
        wikitext_tokens=max(args.wikitext_tokens, 0), wikitext=args.wikitext_tokens >= 0,
        lambada_examples=args.lambada, domains=args.domains, domain_documents=args.domain_docs,
    )
    table = evaluate_model(model, tokenizer, config)
    device = str(next(model.parameters()).device)
    print(f"{args.path}: device {device}, seq_len {config.seq_len}, stride {config.stride}")
    print(format_table(table))
    if args.json:
        settings = {"device": device, "dtype": args.dtype, **vars(config)}
        payload = {"model": str(args.path), "command": _command_line(args), "seconds": round(time.perf_counter() - started),
                   "settings": settings, "rows": json.loads(table.to_json(orient="records"))}
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        print(f"written: {args.json}")
    return 0


def _command_line(args: argparse.Namespace) -> str:
    """The command as typed (``lmstudy.__main__.main`` keeps its argv), for the JSON file's record."""
    argv = getattr(args, "argv", None) or sys.argv[1:]
    return shlex.join(["python", "-m", "lmstudy", *argv])
