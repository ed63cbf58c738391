#!/usr/bin/env bash
# Issue 48, after `python -m lmstudy ctrl train-smol --scale cpu`: export every seed, measure the app on the new
# default model and on the demo, load-test it, retake the browser screenshot, then the side-by-side comparison.
# Each step alone on the machine (the 2-core box: never two torch jobs at once). Resumable: training and the
# comparison's parts that are already done are skipped. Outputs: models/ctrl-smollm2, results/ctrl_smollm2/,
# figures/04_app_speed.csv, figures/app_screenshot.png. About 1 h 15 min after training.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=2
python -m lmstudy ctrl train-smol --scale cpu                 # cached: exports the seeds
python benchmarks/bench_smollm2.py --parts app --repeats 5 --app-models models/ctrl-smollm2 models/ctrl-demo \
    --out figures/04_app_speed.csv
mkdir -p results/ctrl_smollm2
LMSTUDY_LOAD_MODEL=models/ctrl-smollm2 python -m pytest tests/test_app_load.py -q -s -p no:cacheprovider \
    2>&1 | tee results/ctrl_smollm2/app_load.txt
LMSTUDY_UPDATE_SCREENSHOT=1 python -m pytest tests/test_app_browser.py -q -p no:cacheprovider
python -m lmstudy ctrl compare
