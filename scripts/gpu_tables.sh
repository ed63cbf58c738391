#!/usr/bin/env bash
# Notebook 03's tables of a GPU lease from its runs' metrics, for a lease whose notebook was stopped at its time cap
# after the runs had trained (scripts/gpu_krony_tables.py: nothing is trained or scored again; a run the cap left
# unfinished is named and left out). Written to FOLDER/tables/.
#
#   scripts/gpu_tables.sh FOLDER
#   scripts/gpu_tables.sh results/gpu/2026-11-27                                   # the second lease, one seed
#   KRONY_SEEDS="[0, 1, 2]" scripts/gpu_tables.sh results/gpu/2026-11-27-third     # the third lease, three seeds
#
# FOLDER: a lease's results (scripts/gpu_paper_runs.sh unpack), whose runs/ are read. KRONY_SEEDS: the lease's seeds,
# as given to gpu_paper_runs.sh ("[0]" by default, as there). BASE and the -p values below are the values those
# leases ran with (gpu_paper_runs.sh's BASE and KRONY); they are spelled out here, not read from that script, so
# the tables stay those of the leases if the script's values change. Needs the base's data run with its tokenizer
# (the dense baselines' width is read from it), which `scripts/gpu_paper_runs.sh pack` builds in the run cache: a
# lease brings back its runs' configs and metrics only.
set -euo pipefail
if [ $# -ne 1 ] || [ ! -d "$1/runs" ]; then
    echo "usage: [KRONY_SEEDS=\"[0, 1, 2]\"] scripts/gpu_tables.sh FOLDER  (a lease's folder with runs/)" >&2
    exit 2
fi
folder=$(cd "$1" && pwd)
cd "$(dirname "$0")/.."
PY=${PY:-python}
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
cp -r "$folder/runs/." "$runs/"
BASE="{data: {data_fraction: 0.1, valid_tokens_per_domain: 20000}, compute: 8.0e+15, compile: false,
       eval_every_fraction: 0.1}"
data=$($PY - "$BASE" <<'PY'
import sys
from lmstudy.base import final_config, finished_data_run
from lmstudy.notebook_runner import parse_value
print(finished_data_run(final_config("paper", **parse_value(sys.argv[1])).data).path)
PY
)
rm -rf "$runs/base_data/$(basename "$data")" && cp -r "$data" "$runs/base_data/"
LMSTUDY_RUNS=$runs $PY scripts/gpu_krony_tables.py "$folder/tables" -p base_overrides "$BASE" \
    -p fractions "[0.1, 0.3, 1.0]" -p classes "[81M]" -p inits "[van_loan]" -p compare_class 81M \
    -p seeds "${KRONY_SEEDS:-[0]}" -p table6_class 81M -p table6_factors "[1]" -p finetune_tokens 1048576 \
    -p evals_per_run 2 -p val_tokens 65536 -p wikitext_tokens 65536 -p lambada_examples 1000 -p domains "[news]" \
    -p domain_documents 10
