"""A second worker for notebook 01 (Welch et al.): trains the notebook's runs in the opposite order, in the same
run cache, so that two one-thread processes share the grid. The notebook (started first) walks Table 1's grid and
then the freezing trend; this worker walks the grid backwards and then the trend backwards, so that Table 1 (the
short runs) is complete first. The run cache's lock (``lmstudy.runs.cached``) keeps the two from training one run
twice; whichever reaches a run second reads it back.

    OMP_NUM_THREADS=1 python -m lmstudy study 01_embedding_init --scale cpu &
    OMP_NUM_THREADS=1 PYTHONPATH=. python scripts/welch_worker.py --scale cpu

The numbers come from the notebook alone (it reads every run back); this script only shares the training.
"""

from __future__ import annotations

import argparse

from lmstudy.scales import preset
from lmstudy.welch.study import run
from lmstudy.welch.tables import grid_configs
from lmstudy.welch.trend import study_trend_configs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--settings", nargs="+", help="Table 1's data settings (default: the preset's)")
    args = parser.parse_args()
    params = preset("01_embedding_init", args.scale)
    settings = args.settings or params["settings"]
    grid = grid_configs(**{**params, "settings": settings})
    trend = study_trend_configs(params)
    configs = grid[::-1] + trend[::-1]
    for index, config in enumerate(configs, 1):
        print(f"[{index}/{len(configs)}] {config.embedding} {config.domain} K={config.unk_cutoff} seed {config.seed}",
              flush=True)
        run(config)


if __name__ == "__main__":
    main()
