"""A second worker for a study: ``python -m lmstudy study NAME --scale S --second-worker``.

Beside the study's notebook, a second process trains the study's runs from the other end of their list, in the
same run cache. The run cache's lock (:func:`lmstudy.runs.cached`) keeps the two from training one run twice: a run
one process is training, the other waits for, then reads back. The two meet in the list; the numbers come from the
notebook alone (it reads every run back), the worker only shares the training.

Each study that has one exposes its run list (:data:`RUN_LISTS`): a function of the notebook's parameters (its scale
preset, the ``-p`` overrides and ``scale``) that returns the runs in *stages*, each a list of :class:`StudyRun` in
the order the notebook trains them. The worker walks every stage from its end, stages in order, so that an earlier
stage (a table the notebook needs first) is complete before the worker starts on a later one.

Why a separate process, not threads: the training loop holds the interpreter, and a run is minutes to hours. The
two processes share the cores: each gets half (``OMP_NUM_THREADS``) unless the caller set it; two processes each
using every core starved one another (the GPU lease of 2026-11-27, scripts/gpu_paper_runs.sh).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

from lmstudy.scales import preset

# notebook name -> "module:function" of the study's run list (the core names the papers' functions by path only,
# as lmstudy.published_claims does: the core imports no paper folder)
RUN_LISTS = {
    "01_embedding_init": "lmstudy.welch.trend:study_run_list",
    "02_entity_transformer": "lmstudy.entity.runs:study_run_list",
    "03_kronecker": "lmstudy.krony.order:study_run_list",
}


@dataclass(frozen=True)
class StudyRun:
    """One cached run of a study: the line the worker prints for it, and the call that trains it (or reads it back
    from the run cache)."""

    label: str
    train: Callable[[], object]


def run_list(notebook: str, parameters: dict) -> list[list[StudyRun]]:
    """The stages of runs of ``notebook`` (a notebook's file stem) for ``parameters`` (the notebook's, ``scale``
    included); a KeyError names the studies that have a run list."""
    if notebook not in RUN_LISTS:
        raise KeyError(f"{notebook} has no run list for a second worker; studies with one: {', '.join(RUN_LISTS)}")
    module, function = RUN_LISTS[notebook].split(":")
    return getattr(importlib.import_module(module), function)(parameters)


def walk_from_the_end(stages: list[list[StudyRun]]) -> int:
    """Train every run of every stage, each stage from its end, stages in order; returns how many runs."""
    runs = [run for stage in stages for run in stage[::-1]]
    for index, run in enumerate(runs, 1):
        print(f"[{index}/{len(runs)}] {run.label}", flush=True)
        run.train()
    return len(runs)


def half_the_cores() -> dict[str, str]:
    """``OMP_NUM_THREADS`` for each of two processes: half the cores (at least 1), or the caller's setting."""
    threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 2) // 2))
    return {"OMP_NUM_THREADS": threads}


def start(notebook: str, scale: str, overrides: dict) -> subprocess.Popen:
    """Start the second worker of ``notebook`` at ``scale`` with ``overrides`` (the study's ``-p`` values) in a
    process of its own, half the cores; its output goes to this process's."""
    run_list(notebook, {**preset(notebook, scale), **overrides, "scale": scale})  # a study without one fails here
    command = [sys.executable, "-m", "lmstudy.second_worker", notebook, "--scale", scale,
               "--overrides", json.dumps(overrides)]
    return subprocess.Popen(command, env={**os.environ, **half_the_cores()})


def main(argv: list[str] | None = None) -> int:
    """The worker process: ``python -m lmstudy.second_worker NOTEBOOK --scale S --overrides JSON``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", help="the notebook's file stem, e.g. 03_kronecker")
    parser.add_argument("--scale", required=True)
    parser.add_argument("--overrides", default="{}", help="the study's -p values as a JSON object")
    args = parser.parse_args(argv)
    parameters = {**preset(args.notebook, args.scale), **json.loads(args.overrides), "scale": args.scale}
    count = walk_from_the_end(run_list(args.notebook, parameters))
    print(f"second worker: {count} runs of {args.notebook} ({args.scale}) trained or read back", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
