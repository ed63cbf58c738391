#!/usr/bin/env bash
# Notebook 03's tables of the third lease (three seeds) from its runs' metrics (the lease's notebook was stopped at its
# time cap with 30 of its 31 runs trained; the unfinished one, a scratch seed, is named and left out):
# results/gpu-2026-11-27-third/tables/. Needs the base's data run with its tokenizer, which
# `scripts/gpu_paper_runs.sh pack` builds in the run cache (the lease brought back its config and metrics only).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=$(mktemp -d)
cp -r results/gpu-2026-11-27-third/runs/. "$runs/"
BASE="{data: {data_fraction: 0.1, valid_tokens_per_domain: 20000}, compute: 8.0e+15, compile: false,
       eval_every_fraction: 0.1}"
data=$(python - "$BASE" <<'PY'
import sys
from lmstudy.base import final_config, finished_data_run
from lmstudy.notebook_runner import parse_value
print(finished_data_run(final_config("paper", **parse_value(sys.argv[1])).data).path)
PY
)
rm -rf "$runs/base_data/$(basename "$data")" && cp -r "$data" "$runs/base_data/"
LMSTUDY_RUNS=$runs python scripts/gpu_krony_tables.py results/gpu-2026-11-27-third/tables -p base_overrides "$BASE" \
    -p fractions "[0.1, 0.3, 1.0]" -p classes "[81M]" -p inits "[van_loan]" -p compare_class 81M \
    -p seeds "[0, 1, 2]"     -p table6_class 81M -p table6_factors "[1]" -p finetune_tokens 1048576 -p evals_per_run 2 -p val_tokens 65536 \
    -p wikitext_tokens 65536 -p lambada_examples 1000 -p domains "[news]" -p domain_documents 10
rm -rf "$runs"
