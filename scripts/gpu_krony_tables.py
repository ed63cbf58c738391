"""Notebook 03's tables that read run metrics only (the bases, the grid, Table 6, the trend and the claims), drawn
from a GPU lease's run cache when the lease's notebook was stopped before them. A lease brings back every run's config,
metrics and log but no weights (scripts/gpu_paper_runs.sh), so the notebook itself cannot run here: its Van Loan
reconstruction cell reads the base's weights. Every number comes from a finished run, read back; nothing is run.

    LMSTUDY_RUNS=RUNS python scripts/gpu_krony_tables.py OUT_DIR [--scale paper] -p KEY VALUE ...

RUNS: the lease's runs (`gpu_paper_runs.sh unpack`), plus the base's data run with its tokenizer (`pack` built it
here), which the dense baselines' width is read from; -p: the lease's notebook 03 values (its log.txt).
Written to OUT_DIR: 03_krony_{bases,grid,table6,trend,trend_gaps,claims}.csv and 03_krony_trend.png.
"""
from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path
from unittest.mock import patch

from lmstudy.krony import baselines, runs, study_tables
from lmstudy.krony.claims import claims
from lmstudy.krony.config import preset_config
from lmstudy.krony.plots import plot_trend
from lmstudy.notebook_runner import parse_overrides
from lmstudy.plots import save_figure
from lmstudy.runs import get_run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--scale", default="paper", help="the preset the -p values change (default: paper)")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"))
    args = parser.parse_args(argv)
    try:
        config = preset_config(args.scale, parse_overrides(args.parameter))
    except ValueError as error:
        parser.error(str(error))

    def read_back(study_name: str, identity: dict, fn) -> dict:
        """The run cache's metrics, never a run: the scores before continued training that the lease's notebook
        did not reach are NaN (the ``before_*`` columns), and so is a continued run that the lease's time cap
        stopped (named here; its seed is left out of its checkpoint's spread: ``Spread.of`` drops NaN); any other
        missing run is an error."""
        run = get_run(study_name, identity)
        if run.done:
            return run.metrics
        if identity.get("stage") == "continued":
            model, seed = identity.get("model", {}), identity.get("seed")
            print(f"not finished, left out: {run.path.name} ({model.get('kind')} {model.get('size_class')}, seed "
                  f"{seed}, from base checkpoint {identity.get('base')})")
        if identity.get("stage") in ("initial", "continued"):
            return defaultdict(lambda: float("nan"))
        raise RuntimeError(f"run {run.path} is not finished in this run cache ({identity.get('stage')})")

    with patch.object(runs, "cached", read_back), patch.object(baselines, "cached", read_back):
        args.out.mkdir(parents=True, exist_ok=True)
        bases = study_tables.base_table(config)
        grid = study_tables.grid_table(config)
        rows6 = study_tables.table6(config)
        init = study_tables.best_init(grid, config.compare_class)
        trend = study_tables.trend_table(config, init)
        gaps = study_tables.trend_gaps(trend)
        verdicts = claims(config, grid, rows6, trend)
        tables = {"bases": bases, "grid": grid, "table6": rows6, "trend": trend, "trend_gaps": gaps, "claims": verdicts}
        for name, table in tables.items():
            table.to_csv(args.out / f"03_krony_{name}.csv", index=False)
    title = f"{config.compare_class} Krony ({init}) minus same-size dense ({args.scale})"
    save_figure(plot_trend(gaps, title=title), args.out / "03_krony_trend.png")
    print(gaps.round(4).to_string(index=False))
    print(verdicts.to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
