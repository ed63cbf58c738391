"""Shared test fixtures.

Corpora: a test that needs a corpus calls ``require_corpus("name")``. When the corpus is
missing, outside CI the test is skipped with the command that fetches it; in CI (``CI=true``)
a missing corpus is a failure, never a silent skip.

Parallel runs: ``make test`` runs the suite in worker processes (pytest-xdist, ``-n 2 --dist loadfile
--no-loadscope-reorder``): a file (a notebook) is a unit of work that one worker runs, the units handed out in
collection order, which :func:`pytest_collection_modifyitems` sorts slowest first (:data:`FIRST`); each worker's
torch gets its share of the cores.
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

# Collected first, in this order (node-id prefixes; the rest keeps collection order): the paper dry runs, ~680 of the
# suite's ~1,500 worker seconds in CI, one file, so one worker runs the six one after the other while the other runs
# the rest; 02's first: the longest, and it starts from GPT-2's config, not from the corpus caches. Meanwhile the
# other worker runs the leakage tests, which build those caches (shingles of every corpus, the base's training
# manifest) before the next dry runs read them (a dry run started beside them built some itself: 03's took 284 s
# instead of ~150). Then the notebooks (a minute or more each at smoke scale). A long unit handed out last would
# leave one worker running it alone while the other has nothing left.
FIRST = (
    "tests/test_paper_dry_run.py::test_paper_preset_dry_run[02_entity_transformer]",
    "tests/test_paper_dry_run.py",
    "tests/test_leakage.py",
    "notebooks/",
)


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


def pytest_collection_modifyitems(config, items):
    """The tests in :data:`FIRST` order, the rest in collection order (make test's ``--no-loadscope-reorder`` hands
    the files to the workers in that order).

    nbval notebook cells: apply the same rule to the corpora a notebook declares it needs.
    A notebook lists them in its metadata, ``{"lmstudy": {"corpora": ["ptb"]}}``.
    """
    import json
    from pathlib import Path

    from lmstudy.data.catalogue import corpus_present

    def rank(item) -> int:
        return next((i for i, prefix in enumerate(FIRST) if item.nodeid.startswith(prefix)), len(FIRST))

    items.sort(key=rank)  # stable: the rest keeps its order

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
