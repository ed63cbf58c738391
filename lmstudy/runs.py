"""The run cache: one folder per (study, config), found again by a hash of the config.

A *run* is one training or evaluation job. Its identity is its full configuration: the same
config always maps to the same folder, so a notebook that is executed again finds its finished
runs instead of recomputing them, and an interrupted run resumes from its own checkpoint.

Layout (``runs_dir()`` is ``runs/`` or ``$LMSTUDY_RUNS``)::

    runs_dir()/<study>/<hash>/
        config.json      the canonical config (what the hash is computed from)
        log.jsonl        one JSON object per logged training step / evaluation (training.py)
        checkpoint/      the latest training checkpoint (training.py: safetensors + JSON)
        best/            weights at the best validation metric, when training tracks one
        metrics.json     final results; its presence means the run is complete
        .lock            locked while a process runs the run, so that a second process waits for it

Hashing: the config (a dict or a dataclass, possibly nested) is turned into *canonical JSON*:
dataclasses via ``asdict``, keys sorted, tuples as lists, ``Path`` as str, numpy scalars as
Python numbers, floats written with ``repr`` (the shortest string that round-trips, identical on
every platform), no NaN/inf. The run hash is the first 12 hex digits of its sha256; 48 bits make
an accidental collision within one study negligible, and ``get_run`` still checks that a folder's
saved config equals the requested one. Note that ``1`` and ``1.0`` are different configs.

Every file written here is written atomically (a temp file in the same folder, then
``os.replace``), so a crash never leaves a half-written ``metrics.json`` that would mark a broken
run as complete.

Several processes (``accelerate launch``, ``torchrun``: they set ``RANK`` and ``WORLD_SIZE``): every process
runs ``cached``'s function (they train together, ``training.train`` writing from the main process only), only
the main process writes ``config.json`` and ``metrics.json``, then sends the saved metrics to the others, so every
process returns the same saved metrics. The folder must be shared by the processes.
A step whose function writes files itself and needs no other process (data preparation) goes inside
``main_process_first()``: the main process runs it, the others then find it done.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from lmstudy.paths import runs_dir

HASH_LENGTH = 12

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.json"
LOG_FILE = "log.jsonl"
CHECKPOINT_DIR = "checkpoint"
BEST_DIR = "best"
LOCK_FILE = ".lock"  # held while a process runs the run (cached)

_STUDY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


# --------------------------------------------------------------------------------------------
# atomic writes


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see either the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The temp file must live in the same folder: os.replace is atomic only within a filesystem.
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp_name, 0o644)  # mkstemp makes it private; results are ordinary shared files
        os.replace(tmp_name, path)
    except BaseException:
        # Covers KeyboardInterrupt too: never leave the temp file behind.
        Path(tmp_name).unlink(missing_ok=True)
        raise


def replace_folder(folder: str | os.PathLike, final: str | os.PathLike) -> None:
    """Rename the finished ``folder`` to ``final`` (same filesystem); a folder already at ``final`` is swapped out
    and deleted, and put back when the rename fails: readers see the old folder or the new one, never a mix."""
    folder, final = Path(folder), Path(final)
    if not final.exists():
        os.replace(folder, final)
        return
    old = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.replaced-"))
    os.replace(final, old / final.name)
    try:
        os.replace(folder, final)
    except BaseException:
        os.replace(old / final.name, final)
        old.rmdir()
        raise
    shutil.rmtree(old)


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically. Serialisation happens before any file is touched."""
    text = json.dumps(to_jsonable(obj), indent=2, sort_keys=True, allow_nan=True) + "\n"
    atomic_write_text(path, text)


def is_main_process() -> bool:
    """False in the processes of a multi-process launch other than the first (``RANK`` > 0)."""
    return int(os.environ.get("RANK", "0")) == 0


def process_state():
    """accelerate's state of this process (``PartialState``), created as ``Accelerator()`` creates it.

    The first one created is the one every later call gets. Made bare (``PartialState()``) under
    ``ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu`` (two gloo processes on a CPU), it ignores the flag, finds
    no GPU and says one process, so barriers do nothing and the processes later train alone, each on the whole
    batch. Whatever may come first (the run cache's barrier, ``training.process_device``) asks here."""
    from accelerate.state import PartialState  # only here: the run cache itself needs no torch
    from accelerate.utils import parse_flag_from_env

    return PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))


def _wait_for_everyone() -> None:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        process_state().wait_for_everyone()


def leave_process_group() -> None:
    """The last call of a script run under ``accelerate launch``: wait for the other processes, then leave the
    process group. A gloo process that exits with the group open, or while another's last message is still in
    flight, can abort ("terminate called without an active exception") and fail the whole launch."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        state = process_state()
        state.wait_for_everyone()
        state.destroy_process_group()


def _from_main_process(value: Any) -> Any:
    """``value`` as the main process has it, in every process (the others block until it arrives)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return value
    from accelerate.utils import broadcast_object_list

    process_state()
    return broadcast_object_list([value], from_process=0)[0]


_others_waiting = False  # True while the main process runs a main_process_first() block alone


@contextlib.contextmanager
def main_process_first():
    """Under several processes the main one runs the block before the others (they wait at a barrier), so a cached
    step that writes files of its own (data preparation) runs once and the others find it done. Only for steps
    that need no other process (no training inside: its collectives would wait forever). A plain block under one
    process."""
    global _others_waiting
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        yield
    elif is_main_process():
        _others_waiting = True  # cached() must not wait for the others here: they wait for this block's end
        try:
            yield
        finally:
            _others_waiting = False
        _wait_for_everyone()
    else:
        _wait_for_everyone()
        yield


# --------------------------------------------------------------------------------------------
# canonical config and hash


def to_jsonable(obj: Any) -> Any:
    """Plain JSON types from dataclasses, Paths, tuples and numpy scalars (recursively)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            if not isinstance(key, str):
                raise TypeError(f"config keys must be strings, got {key!r} ({type(key).__name__})")
            out[key] = to_jsonable(value)
        return out
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(value) for value in obj]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if hasattr(obj, "item") and callable(obj.item):  # numpy / torch scalars
        return to_jsonable(obj.item())
    raise TypeError(
        f"cannot store {obj!r} ({type(obj).__name__}) in a config: use plain numbers, strings, "
        "lists, dicts or dataclasses of them"
    )


def canonical_json(config: Any) -> str:
    """The one string a config is identified by (sorted keys, no whitespace, repr'd floats)."""
    try:
        return json.dumps(
            to_jsonable(config), sort_keys=True, separators=(",", ":"), allow_nan=False
        )
    except ValueError as error:  # NaN / inf
        raise ValueError(f"a run config may not contain NaN or infinity ({error})") from None


def config_hash(config: Any) -> str:
    """Short sha256 of the canonical JSON of ``config``."""
    return hashlib.sha256(canonical_json(config).encode("utf-8")).hexdigest()[:HASH_LENGTH]


# --------------------------------------------------------------------------------------------
# runs


@dataclass
class Run:
    """One run folder. ``config`` is the canonical (plain JSON) form of the config."""

    study: str
    config: dict
    hash: str
    path: Path

    @property
    def done(self) -> bool:
        return (self.path / METRICS_FILE).exists()

    @property
    def metrics(self) -> dict | None:
        """The final metrics, or None while the run is not complete."""
        if not self.done:
            return None
        return json.loads((self.path / METRICS_FILE).read_text(encoding="utf-8"))

    @property
    def log_path(self) -> Path:
        return self.path / LOG_FILE

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / CHECKPOINT_DIR

    @property
    def best_dir(self) -> Path:
        return self.path / BEST_DIR

    def save_metrics(self, metrics: dict) -> None:
        """Mark the run complete with these final metrics."""
        atomic_write_json(self.path / METRICS_FILE, metrics)


def get_run(study: str, config: Any) -> Run:
    """The run of ``config`` in ``study``; creates its folder and config.json on first use."""
    if not isinstance(study, str) or not _STUDY_NAME.match(study):
        raise ValueError(
            f"study name {study!r} is not a plain folder name: use letters, digits, '_', '-', '.'"
        )
    canonical = canonical_json(config)
    run_hash = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:HASH_LENGTH]
    path = runs_dir() / study / run_hash
    plain_config = json.loads(canonical)
    config_file = path / CONFIG_FILE
    if config_file.exists():
        saved = json.loads(config_file.read_text(encoding="utf-8"))
        if saved != plain_config:
            raise RuntimeError(
                f"run folder {path} holds a different config than the one requested "
                "(a hash collision or a changed canonical form): move that folder away"
            )
    elif is_main_process():
        atomic_write_json(config_file, plain_config)
    return Run(study=study, config=plain_config, hash=run_hash, path=path)


@contextlib.contextmanager
def _only_process_on(run: Run):
    """Two independent processes sharing a run cache (two notebooks, a notebook and a worker script) never train
    the same run at once: the second one to ask waits here until the first is done, then reads its metrics. An
    advisory ``flock`` on ``<run>/.lock``, which the OS releases when its holder dies (a killed run is resumed by
    the next one to ask). Not under a multi-process launch, whose processes run a run together; not where
    ``fcntl`` is missing (Windows)."""
    try:
        import fcntl
    except ImportError:
        fcntl = None
    if fcntl is None or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        yield
        return
    run.path.mkdir(parents=True, exist_ok=True)
    with open(run.path / LOCK_FILE, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"run {run.study}/{run.hash} is being run by another process: waiting for it", flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def cached(study: str, config: Any, fn: Callable[[Run], dict]) -> dict:
    """The metrics of the run of ``config``: saved ones if it is done, else ``fn(run)``'s, saved.

    ``fn`` receives the Run so it can write its log and checkpoints there and resume from them
    after an interruption (``training.train`` does). If ``fn`` raises, nothing is marked done.
    Under several processes every process runs ``fn``; the main one saves (module docstring).
    """
    run = get_run(study, config)
    if run.done:
        return run.metrics
    with _only_process_on(run):
        if run.done:  # another process finished it while this one waited
            return run.metrics
        metrics = fn(run)
        if not isinstance(metrics, dict):
            raise TypeError(
                f"the function given to cached() must return a dict of metrics, got {type(metrics).__name__}"
            )
        if is_main_process():
            run.save_metrics(metrics)
    if _others_waiting:  # the main process alone inside main_process_first(): no other process to tell
        return run.metrics
    # The JSON round-trip (the same values a later cached() call returns), sent by the main process once saved.
    return _from_main_process(run.metrics if is_main_process() else None)


# --------------------------------------------------------------------------------------------
# reading runs back (notebooks)


def flatten_config(obj: dict, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists stay values."""
    flat = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten_config(value, prefix=f"{name}."))
        else:
            flat[name] = value
    return flat


def list_runs(study: str):
    """A pandas DataFrame with one row per run of ``study``.

    Columns: ``hash``, ``done``, the config flattened with dots (``train.lr``), then the final
    metrics (NaN for unfinished runs). A metric named like a config column is prefixed
    ``metrics.`` so that neither is lost.
    """
    import pandas as pd

    study_dir = runs_dir() / study
    rows = []
    if study_dir.is_dir():
        for path in sorted(study_dir.iterdir()):
            config_file = path / CONFIG_FILE
            if not config_file.is_file():
                continue
            run = Run(study, json.loads(config_file.read_text(encoding="utf-8")), path.name, path)
            row = {"hash": run.hash, "done": run.done}
            row.update(flatten_config(run.config))
            for key, value in flatten_config(run.metrics or {}).items():
                row[f"metrics.{key}" if key in row else key] = value
            rows.append(row)
    return pd.DataFrame(rows)


def read_log(run: Run):
    """The run's log.jsonl as a DataFrame (one row per record; see training.py for the keys)."""
    import pandas as pd

    return pd.DataFrame(read_log_records(run.log_path))


def training_seconds(run: Run) -> float:
    """Wall-clock seconds ``training.train`` spent on ``run`` (summed over resumes; NaN if it logged no step)."""
    return max((r.get("train_s", 0.0) for r in read_log_records(run.log_path) if "train_s" in r), default=float("nan"))


def read_log_records(path: Path) -> list[dict]:
    """The records of a JSON-lines log, skipping a final line cut short by a crash."""
    if not Path(path).exists():
        return []
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break  # only the last line can be partial (we append and flush line by line)
    return records
