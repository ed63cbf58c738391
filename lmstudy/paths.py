"""Where lmstudy finds its data and puts its runs and figures.

Every location can be moved with an environment variable, so the same code runs on a laptop,
in CI and on a GPU box:

- ``LMSTUDY_DATA``: the corpora, laid out as ``shared/data`` (see its MANIFEST.md). Default: the
  ``shared/data`` folder beside the checkout when it exists, else ``~/.cache/lmstudy/data``.
- ``LMSTUDY_RUNS``: the run cache (checkpoints, metrics, executed notebooks). Default: ``runs/``.
- ``LMSTUDY_FIGURES``: figures and tables. Default: ``figures/``.

Only the published scale (``cpu``) writes into ``figures/`` itself; ``smoke`` and ``paper`` runs
write into ``figures/<scale>/`` so a CI smoke run never overwrites a published figure.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def data_dir() -> Path:
    if "LMSTUDY_DATA" in os.environ:
        return Path(os.environ["LMSTUDY_DATA"]).expanduser()
    beside_checkout = REPO_ROOT.parent / "shared" / "data"
    if beside_checkout.is_dir():
        return beside_checkout
    return Path.home() / ".cache" / "lmstudy" / "data"


def runs_dir() -> Path:
    return Path(os.environ.get("LMSTUDY_RUNS", REPO_ROOT / "runs")).expanduser()


PUBLISHED_SCALE = "cpu"


def figures_dir(scale: str | None = None) -> Path:
    """Where figures go: ``figures/`` for the published scale (or no scale), else ``figures/<scale>/``."""
    path = Path(os.environ.get("LMSTUDY_FIGURES", REPO_ROOT / "figures")).expanduser()
    if scale not in (None, PUBLISHED_SCALE):
        path = path / scale
    path.mkdir(parents=True, exist_ok=True)
    return path


def notebooks_dir() -> Path:
    return REPO_ROOT / "notebooks"
