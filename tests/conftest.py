"""Shared test fixtures.

Corpora: a test that needs a corpus calls ``require_corpus("name")``. When the corpus is
missing, outside CI the test is skipped with the command that fetches it; in CI (``CI=true``)
a missing corpus is a failure, never a silent skip.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("MPLBACKEND", "agg")

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


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
