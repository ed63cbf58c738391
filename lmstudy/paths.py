"""Where lmstudy finds its data and puts its runs and figures.

Every location can be moved with an environment variable, so the same code runs on a laptop,
in CI and on a GPU box:

- ``LMSTUDY_DATA``: the corpora, laid out as ``shared/data`` (see its MANIFEST.md). Default: the
  ``shared/data`` folder beside the checkout when it exists, else ``~/.cache/lmstudy/data``.
- ``LMSTUDY_RUNS``: the run cache (checkpoints, metrics, executed notebooks). Default: ``runs/``.
- ``LMSTUDY_USER_DATA``: corpora registered with ``python -m lmstudy data add`` (a copy of the text and its
  split; :mod:`lmstudy.data.user_corpus`). Default: ``user_data/`` beside ``runs/`` in the checkout. Not
  inside ``LMSTUDY_DATA``, which is shared and read-only by convention; not inside the run cache, which
  may be deleted at any time while a registered corpus's split is the fixed reference of its results.
- ``LMSTUDY_FIGURES``: figures and tables. Default: ``figures/``.
- ``LMSTUDY_MODELS``: small models we commit (the app's demo checkpoint). Default: ``models/``.
- ``LMSTUDY_PRETRAINED``: pretrained models fetched by ``python -m lmstudy models fetch NAME`` (too big for git,
  so never committed: ``models/smollm2/`` is in .gitignore). Default: ``models/`` in the checkout. Kept apart
  from ``LMSTUDY_MODELS`` so that a run (or a test) that moves its own models elsewhere still finds them.

Only the published scale (``cpu``) writes into ``figures/`` and ``models/`` themselves; ``smoke`` and
``paper`` runs write into ``<folder>/<scale>/`` so a CI smoke run never overwrites a published result.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def data_dir() -> Path:
    """The corpora: ``$LMSTUDY_DATA``, else ``shared/data`` beside the checkout, else ``~/.cache/lmstudy/data``."""
    if "LMSTUDY_DATA" in os.environ:
        return Path(os.environ["LMSTUDY_DATA"]).expanduser()
    beside_checkout = REPO_ROOT.parent / "shared" / "data"
    if beside_checkout.is_dir():
        return beside_checkout
    return Path.home() / ".cache" / "lmstudy" / "data"


def runs_dir() -> Path:
    """The run cache: ``$LMSTUDY_RUNS``, else ``runs/`` in the checkout."""
    return Path(os.environ.get("LMSTUDY_RUNS", REPO_ROOT / "runs")).expanduser()


def user_data_dir() -> Path:
    """Registered user corpora: ``$LMSTUDY_USER_DATA``, else ``user_data/`` in the checkout (beside ``runs/``)."""
    return Path(os.environ.get("LMSTUDY_USER_DATA", REPO_ROOT / "user_data")).expanduser()


PUBLISHED_SCALE = "cpu"


def _published_or_scaled(variable: str, default: Path, scale: str | None) -> Path:
    """``default`` (or ``$variable``) for the published scale or no scale, else its ``<scale>/`` subfolder."""
    path = Path(os.environ.get(variable, default)).expanduser()
    if scale not in (None, PUBLISHED_SCALE):
        path = path / scale
    path.mkdir(parents=True, exist_ok=True)
    return path


def figures_dir(scale: str | None = None) -> Path:
    """Where figures go: ``figures/`` for the published scale (or no scale), else ``figures/<scale>/``."""
    return _published_or_scaled("LMSTUDY_FIGURES", REPO_ROOT / "figures", scale)


def models_dir(scale: str | None = None) -> Path:
    """Where committed models go: ``models/`` for the published scale (or no scale), else ``models/<scale>/``."""
    return _published_or_scaled("LMSTUDY_MODELS", REPO_ROOT / "models", scale)


def pretrained_dir() -> Path:
    """Where fetched pretrained models live: ``$LMSTUDY_PRETRAINED``, else ``models/`` in the checkout."""
    return Path(os.environ.get("LMSTUDY_PRETRAINED", REPO_ROOT / "models")).expanduser()


def notebooks_dir() -> Path:
    """The study notebooks: ``notebooks/`` in the checkout."""
    return REPO_ROOT / "notebooks"
