"""Turn the archived base of study 03 (the old 2M-token base every transformer study started from) into a
Hugging Face folder, so that the evaluation protocol can score it like any model:

    python -m lmstudy runs restore results/runs            # or point RUN at the archived folder itself
    python scripts/krony_base_to_hf.py results/runs/03_kronecker/417fab95e33e /tmp/krony-base
    python -m lmstudy eval /tmp/krony-base

The weights are the run's ``best/`` (safetensors); the GPT-2 config is rebuilt from the run's config.json
exactly as ``lmstudy.wiki_base.gpt2_config`` builds it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from safetensors.torch import load_model
from transformers import GPT2LMHeadModel

from lmstudy.wiki_base import WikiBaseConfig, gpt2_config
from lmstudy.tokenization import load_tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a 03_kronecker run folder with stage=base (config.json, best/, tokenizer/)")
    parser.add_argument("out", type=Path, help="the Hugging Face folder to write")
    args = parser.parse_args()
    config = json.loads((args.run / "config.json").read_text())
    if config.pop("stage", None) != "base":
        raise SystemExit(f"{args.run} is not a base run of study 03 (its config has no stage=base)")
    tokenizer = load_tokenizer(args.run / "tokenizer")
    model = GPT2LMHeadModel(gpt2_config(WikiBaseConfig(**config), len(tokenizer)))
    load_model(model, str(args.run / "best" / "model.safetensors"))
    model.save_pretrained(str(args.out))
    tokenizer.save_pretrained(str(args.out))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
