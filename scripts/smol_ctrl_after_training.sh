#!/usr/bin/env bash
# Issue 48 on the 2-core machine, after the first seed of `python -m lmstudy ctrl train-smol --scale cpu`: export it,
# measure the app on the new default model and on the demo, load-test it, retake the browser screenshot, compare the
# two models on every part, then train the other seeds and measure them on the parts that rest on training. Each step
# alone on the machine (never two torch jobs at once). Resumable: training runs and the comparison's parts already
# done are skipped, so rerun it after an interruption. Outputs: models/ctrl-smollm2, results/ctrl_smollm2/,
# figures/04_app_speed.csv, figures/app_screenshot.png, figures/04_smol_ctrl_*.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=2
python -m lmstudy ctrl train-smol --scale cpu --seeds 0     # cached: exports models/ctrl-smollm2
if [ ! -f results/ctrl_smollm2/app_load.txt ]; then  # the app checks, once (delete the file to redo them)
    python benchmarks/bench_smollm2.py --parts app --repeats 5 --app-models models/ctrl-smollm2 models/ctrl-demo \
        --out figures/04_app_speed.csv
    LMSTUDY_UPDATE_SCREENSHOT=1 python -m pytest tests/test_app_browser.py -q -p no:cacheprovider || true
    mkdir -p results/ctrl_smollm2
    LMSTUDY_LOAD_MODEL=models/ctrl-smollm2 python -m pytest tests/test_app_load.py -q -s -p no:cacheprovider \
        2>&1 | tee results/ctrl_smollm2/app_load.tmp && mv results/ctrl_smollm2/app_load.tmp results/ctrl_smollm2/app_load.txt
fi
python -m lmstudy ctrl compare --models ctrl-smollm2 ctrl-demo
if [ -n "${LMSTUDY_CHECK_CLONE:-}" ]; then  # the CI of main on a fresh clone, while the machine is between jobs
    rm -rf /tmp/fresh && git clone -q . /tmp/fresh && (cd /tmp/fresh && CI=true bash .ci/run) \
        > logs/fresh_ci.log 2>&1 || echo "fresh-clone CI failed: logs/fresh_ci.log"
fi
for seed in 1 2; do  # the other seeds, each measured as soon as trained (a resumed run picks up where it stopped)
    python -m lmstudy ctrl train-smol --scale cpu --seeds "$seed"
    python -m lmstudy ctrl compare --models "ctrl-smollm2/seed-$seed"
done
python -m lmstudy ctrl compare   # every part there: draws figures/04_smol_ctrl_*
