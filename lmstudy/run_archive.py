"""Carry finished runs from one machine to another: archive them into a folder that can be committed,
restore them into the run cache elsewhere.

Why: the run cache (``runs/``) is git-ignored and lives on one machine. A ``cpu`` study that takes longer
than one working session on a borrowed machine (or one that a later study builds on: the Entity study
starts from the Krony base) would be lost with the machine. An archive keeps what a rerun needs to
pick up where it stopped.

What is archived, per *finished* run (``metrics.json`` present) of a study::

    DEST/<study>/<hash>/config.json, metrics.json, log.jsonl   always (a few kB)
    DEST/<study>/<hash>/<other folders>                          tokenizer/, best/, model/, ...: only
                                                                 for runs selected by ``weights``
    DEST/<study>/<hash>/checkpoint/step-N/model.safetensors, state.json
                                                                 the *kept* checkpoints
                                                                 (``TrainConfig.keep_checkpoints``) present,
                                                                 weights only: for runs selected by ``weights``
The training checkpoint of a finished run (weights plus optimizer state) is not archived: it does not need
it. Its kept checkpoints are, with the run's other folders, because later stages may load them (the Krony
study starts from the scratch run's 10/30/100% checkpoints); their optimizer state is left behind (nothing
resumes from a kept checkpoint). Unfinished runs are skipped (they restart from scratch after a restore)
unless ``unfinished=True``: then each unfinished run is archived with its log, its *latest* checkpoint in
full (weights and optimizer state: a long run, such as the shared base, carried over to the next session
resumes exactly where it stopped) and its kept checkpoints so far, weights only, whatever ``weights`` says
(the resumed run cannot write them again: a run whose kept steps are behind it would lose them). Restoring
such a run replaces the local copy only when the archived checkpoint is further along.

``weights`` chooses which runs keep their folders: ``"all"``, ``"none"``, or ``"KEY=VALUE"`` matched
against the run's flattened config (``stage=base``: only the Krony base, the one run later stages load
weights from; the others are needed for their metrics and logs only, and weigh ~20 MB each).

A restore copies each archived run into ``runs_dir()`` unless that run is already finished there; the
config check of :func:`lmstudy.runs.get_run` guarantees an archived run is only used for its own config.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from lmstudy.paths import runs_dir
from lmstudy.runs import CHECKPOINT_DIR, CONFIG_FILE, LOG_FILE, METRICS_FILE, Run, flatten_config

SMALL_FILES = (CONFIG_FILE, METRICS_FILE, LOG_FILE)
KEPT_CHECKPOINT_FILES = ("model.safetensors", "state.json")  # what kept_checkpoint() readers load


def _keeps_weights(config: dict, weights: str) -> bool:
    if weights == "all":
        return True
    if weights == "none":
        return False
    key, sep, value = weights.partition("=")
    if not sep or not key:
        raise ValueError(f"weights must be 'all', 'none' or KEY=VALUE (e.g. stage=base), got {weights!r}")
    return str(flatten_config(config).get(key)) == value


def archive_runs(study: str, dest: str | Path, weights: str = "all", unfinished: bool = False) -> list[str]:
    """Copy the finished runs of ``study`` from ``runs_dir()`` to ``dest/<study>/`` (and, with
    ``unfinished``, the unfinished ones with their latest checkpoint); returns their hashes."""
    from lmstudy.training import latest_checkpoint  # torch: not needed for `--help`

    source = runs_dir() / study
    if not source.is_dir():
        raise FileNotFoundError(f"no runs of study {study!r} in {runs_dir()}")
    archived = []
    for run_dir in sorted(source.iterdir()):
        finished = (run_dir / METRICS_FILE).is_file()
        if not finished and not unfinished:
            continue  # unfinished: its checkpoint is large, and it reruns from its config
        config = json.loads((run_dir / CONFIG_FILE).read_text(encoding="utf-8"))
        checkpoint = None if finished else latest_checkpoint(Run(study, config, run_dir.name, run_dir))
        if not finished and checkpoint is None:
            continue  # nothing trained yet: nothing to carry
        target = Path(dest) / study / run_dir.name
        if target.is_dir() and not finished:
            shutil.rmtree(target / CHECKPOINT_DIR, ignore_errors=True)  # only the newest checkpoint travels
        target.mkdir(parents=True, exist_ok=True)
        for name in SMALL_FILES:
            if (run_dir / name).is_file():
                shutil.copy2(run_dir / name, target / name)
        keeps_weights = _keeps_weights(config, weights)
        if keeps_weights:
            for folder in run_dir.iterdir():
                if folder.is_dir() and folder.name != CHECKPOINT_DIR:
                    shutil.copytree(folder, target / folder.name, dirs_exist_ok=True)
        if checkpoint is not None:
            shutil.copytree(checkpoint, target / CHECKPOINT_DIR / checkpoint.name)
        if keeps_weights or checkpoint is not None:
            for kept in kept_checkpoints(run_dir):
                if checkpoint is None or kept != checkpoint:
                    (target / CHECKPOINT_DIR / kept.name).mkdir(parents=True, exist_ok=True)
                    for name in KEPT_CHECKPOINT_FILES:
                        shutil.copy2(kept / name, target / CHECKPOINT_DIR / kept.name / name)
        archived.append(run_dir.name)
    return archived


def run_studies() -> list[str]:
    """The studies of ``runs_dir()`` that hold runs (a folder with a run's ``config.json`` one level down; not the
    executed notebooks nor the corpus caches)."""
    root = runs_dir()
    if not root.is_dir():
        return []
    return sorted(path.name for path in root.iterdir() if path.is_dir() and any(path.glob(f"*/{CONFIG_FILE}")))


def kept_checkpoints(run_dir: Path) -> list[Path]:
    """The complete checkpoint folders of ``run_dir`` at a step its ``TrainConfig.keep_checkpoints`` names (read
    from the checkpoints' own ``state.json``: the run config does not say how a study trains)."""
    complete = sorted(p for p in (run_dir / CHECKPOINT_DIR).glob("step-*") if (p / "state.json").is_file())
    if not complete:
        return []
    state = json.loads((complete[-1] / "state.json").read_text(encoding="utf-8"))
    kept = set(state["train_config"].get("keep_checkpoints", ()))
    return [path for path in complete if int(path.name.split("-")[1]) in kept]


def _checkpoint_step(run_dir: Path) -> int:
    """The step of the latest complete checkpoint in ``run_dir`` (-1: none)."""
    from lmstudy.training import latest_checkpoint  # torch: not needed for `--help`

    checkpoint = latest_checkpoint(Run(run_dir.parent.name, {}, run_dir.name, run_dir))
    return -1 if checkpoint is None else int(checkpoint.name.split("-")[1])


def restore_runs(src: str | Path) -> list[str]:
    """Copy every run under ``src/<study>/<hash>/`` into ``runs_dir()`` unless it is finished there
    already (an unfinished one: unless the local checkpoint is as far along); returns ``study/hash``."""
    src = Path(src)
    if not src.is_dir():
        raise FileNotFoundError(f"no run archive at {src}")
    restored = []
    for run_dir in sorted(path.parent for path in src.glob(f"*/*/{CONFIG_FILE}")):
        study, run_hash = run_dir.parent.name, run_dir.name
        target = runs_dir() / study / run_hash
        if (target / METRICS_FILE).is_file():
            continue
        if not (run_dir / METRICS_FILE).is_file():
            if _checkpoint_step(run_dir) <= _checkpoint_step(target):
                continue
            shutil.rmtree(target / CHECKPOINT_DIR, ignore_errors=True)  # resume from the archived one
        shutil.copytree(run_dir, target, dirs_exist_ok=True)
        restored.append(f"{study}/{run_hash}")
    return restored


def register(subparsers) -> None:
    """``python -m lmstudy runs archive STUDY|--all DEST [--weights W] [--unfinished]`` and ``runs restore SRC``."""
    runs = subparsers.add_parser("runs", help="archive finished runs into a folder / restore them into runs/")
    commands = runs.add_subparsers(dest="runs_command", required=True, metavar="SUBCOMMAND")
    archive = commands.add_parser("archive", help="copy a study's finished runs (no training state) to DEST",
                                  description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    archive.add_argument("study", nargs="?", help="e.g. 03_kronecker (or --all)")
    archive.add_argument("dest", type=Path, help="e.g. results/runs (committed)")
    archive.add_argument("--all", action="store_true",
                         help="every study in the run cache (a GPU lease's runs: scripts/gpu_run.sh)")
    archive.add_argument("--weights", default="all",
                         help="whose folders (weights, tokenizer) to keep: all, none, or KEY=VALUE of the config")
    archive.add_argument("--unfinished", action="store_true",
                         help="also unfinished runs, with their latest and kept checkpoints (to resume elsewhere)")
    archive.set_defaults(handler=_archive)
    restore = commands.add_parser("restore", help="copy archived runs into the run cache (runs/ or $LMSTUDY_RUNS)")
    restore.add_argument("src", type=Path, help="an archive folder, e.g. results/runs")
    restore.set_defaults(handler=_restore)


def _archive(args) -> int:
    if args.all == bool(args.study):
        raise ValueError("runs archive: name one STUDY or give --all, not both")
    studies = run_studies() if args.all else [args.study]
    if not studies:
        raise FileNotFoundError(f"no runs in {runs_dir()}")
    kind = "finished or unfinished" if args.unfinished else "finished"
    for study in studies:
        hashes = archive_runs(study, args.dest, args.weights, args.unfinished)
        print(f"archived {len(hashes)} {kind} run(s) of {study} into {args.dest / study}")
    return 0


def _restore(args) -> int:
    restored = restore_runs(args.src)
    print(f"restored {len(restored)} run(s) into {runs_dir()}" + "".join(f"\n  {name}" for name in restored))
    return 0


__all__ = ["archive_runs", "kept_checkpoints", "register", "restore_runs", "run_studies"]
