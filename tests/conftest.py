"""Shared test fixtures.

Corpora: a test that needs a corpus calls ``require_corpus("name")``. When the corpus is
missing, outside CI the test is skipped with the command that fetches it; in CI (``CI=true``)
a missing corpus is a failure, never a silent skip.

Parallel runs: ``make test`` runs the suite in worker processes (pytest-xdist, ``-n 2 --dist loadfile
--no-loadscope-reorder``). :func:`work_unit` says which tests must share a worker, :func:`unit_rank` in
what order the units are handed out; each worker's torch gets its share of the cores.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("MPLBACKEND", "agg")

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

# Under pytest-xdist each worker (and the notebooks and studies it starts, which inherit the variable) gets an
# equal share of the cores: two workers with a thread per core each would oversubscribe the CPU. Set before
# any test imports torch, which reads it once.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // _WORKERS)))

# The units of work handed out first, in this order; then the notebooks (a minute or more each at smoke scale),
# then the rest in collection order. A worker takes its next unit before it starts its last test (xdist's
# look-ahead), so the long ones must come first: last, they would leave one worker running them alone.
DRY_RUN_PREFIX = "tests/test_paper_dry_run.py::test_paper_preset_dry_run["


def dry_run_unit(study: str) -> str:
    """The node id of a study's paper dry run, a unit of work of its own (but see :data:`AFTER_THE_LEAKAGE_TESTS`)."""
    return f"{DRY_RUN_PREFIX}{study}]"


# 03's dry run reads the corpus caches the leakage tests build (shingles of every corpus, the base's training
# manifest): started before them, it built the caches itself (284 s instead of 148-156); started beside them, it
# waited for them, or built some in parallel (230 s in ci64, where the worker that had run 02's dry run took it
# next while the other was still in the leakage tests). One unit with them, it runs after them on their worker.
AFTER_THE_LEAKAGE_TESTS = dry_run_unit("03_kronecker")
LEAKAGE_TESTS = "tests/test_leakage.py"

FIRST_UNITS = (
    dry_run_unit("02_entity_transformer"),
    LEAKAGE_TESTS,  # and 03's dry run
    *map(dry_run_unit, ("01_embedding_init", "04_control_codes", "01b_embedding_init_extended", "00_quickstart")),
)


def unit_rank(unit: str) -> int:
    """Where a unit of work (:func:`work_unit`) goes in the order the workers get them: see :data:`FIRST_UNITS`."""
    if unit in FIRST_UNITS:
        return FIRST_UNITS.index(unit)
    return len(FIRST_UNITS) + (0 if unit.startswith("notebooks/") else 1)


def require_corpus(name: str) -> None:
    """Skip (or, in CI, fail) unless corpus ``name`` is present under $LMSTUDY_DATA."""
    from lmstudy.data.catalogue import corpus_present

    if corpus_present(name):
        return
    from lmstudy.paths import data_dir

    message = (
        f"corpus {name!r} is not under {data_dir()} "
        f"(fetch it with: python -m lmstudy data fetch {name})"
    )
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def require_smollm2():
    """The fetched SmolLM2 folder; skip (or, in CI, fail) unless ``models fetch smollm2`` wrote it (make setup does)."""
    from lmstudy.pretrained_fetch import SMOLLM2, fetched, model_folder

    folder = model_folder(SMOLLM2.name)
    if fetched(folder, SMOLLM2):
        return folder
    message = f"SmolLM2 is not fetched into {folder} (run: python -m lmstudy models fetch smollm2)"
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def require_kenlm() -> None:
    """Skip (or, in CI, fail) unless KenLM's binaries are installed (``make test`` installs them)."""
    from lmstudy.welch.ngram import INSTALL_HINT, kenlm_bin

    if kenlm_bin() is not None:
        return
    message = f"KenLM not installed: {INSTALL_HINT}"
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def runs_sharing_corpus_caches(root):
    """A fresh run folder at ``root`` (a Path) whose ``cache/`` is the suite's own (``runs_dir()/cache``): the corpus
    caches (shingles, the base training manifest, token caches) depend on the corpora and splits only and take
    minutes to build, so tests with fresh runs still build them once. Returns ``root``."""
    from lmstudy.paths import runs_dir

    shared_cache = runs_dir() / "cache"
    shared_cache.mkdir(parents=True, exist_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    (root / "cache").symlink_to(shared_cache, target_is_directory=True)
    return root


def work_unit(nodeid: str) -> str:
    """What a test shares a worker with: its notebook or module (nbval's cells run in order in one kernel; a
    module's tests share its module-scoped fixtures, built once), except that each paper dry run is a unit of its
    own (the longest tests, independent of each other), and 03's is the leakage tests' (after them: test_leakage.py
    is collected before test_paper_dry_run.py, and a unit keeps its tests' collection order)."""
    if nodeid == AFTER_THE_LEAKAGE_TESTS:
        return LEAKAGE_TESTS
    if nodeid.startswith(DRY_RUN_PREFIX):
        return nodeid
    return nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: ignored when it is not installed
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with :func:`work_unit`'s units. (xdist's ``loadgroup`` marks cannot do it under pytest 9,
    whose node ids xdist can no longer rename: every test became a unit, and notebooks' cells were split between
    workers.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LoadWorkUnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return LoadWorkUnitScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """Units of work (:func:`work_unit`) in :func:`unit_rank` order, a unit's tests in collection order (make
    test's ``--no-loadscope-reorder`` keeps it).

    nbval notebook cells: apply the same rule to the corpora a notebook declares it needs.
    A notebook lists them in its metadata, ``{"lmstudy": {"corpora": ["ptb"]}}``.
    """
    import json
    from pathlib import Path

    from lmstudy.data.catalogue import corpus_present

    items.sort(key=lambda item: unit_rank(work_unit(item.nodeid)))  # stable: a unit keeps its tests' order

    missing_by_notebook: dict[Path, list[str]] = {}
    for item in items:
        path = Path(str(item.fspath))
        if path.suffix != ".ipynb":
            continue
        if path not in missing_by_notebook:
            metadata = json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
            needed = metadata.get("lmstudy", {}).get("corpora", [])
            missing_by_notebook[path] = [name for name in needed if not corpus_present(name)]
        missing = missing_by_notebook[path]
        if missing and not IN_CI:
            item.add_marker(pytest.mark.skip(
                reason=f"{path.name} needs corpora {', '.join(missing)} (fetch with: "
                       f"python -m lmstudy data fetch NAME)"))
        # In CI the notebook runs and fails on the missing corpus with the reader's own clear error.
