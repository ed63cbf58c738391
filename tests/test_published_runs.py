"""The archived published runs are still what the current code asks for.

A module that moves, or a config field that changes, changes nothing in a run's identity as long as the
config dicts stay the same; these tests replay a study's table builders with the run cache answered from
the archive (``results/runs``) and compare with the published CSVs in ``figures/``, byte for byte. A run
the code asks for that the archive lacks fails loudly: its config hash drifted.
"""

from __future__ import annotations

import json

import pytest

from lmstudy.paths import REPO_ROOT
from lmstudy.runs import config_hash

ARCHIVE = REPO_ROOT / "results" / "runs"
FIGURES = REPO_ROOT / "figures"


def archived_metrics(study: str, config: dict, fn=None) -> dict:
    """Stands in for ``lmstudy.runs.cached``: the metrics of the archived run of ``config``, never training."""
    path = ARCHIVE / study / config_hash(config) / "metrics.json"
    if not path.is_file():
        raise AssertionError(f"no archived {study} run for config {config}: its hash drifted ({path.parent.name})")
    return json.loads(path.read_text())


def test_krony_tables_regenerate_from_the_archive(monkeypatch):
    from lmstudy import wiki_base
    from lmstudy.krony import published

    monkeypatch.setattr(published, "cached", archived_metrics)
    monkeypatch.setattr(wiki_base, "cached", archived_metrics)
    config = published.published_config()
    for table, name in ((published.results_table(config), "03_kronecker_results.csv"),
                        (published.table6(config), "03_kronecker_table6.csv")):
        assert table.to_csv(index=False) == (FIGURES / name).read_text(), name


def test_a_drifted_config_is_reported(monkeypatch):
    with pytest.raises(AssertionError, match="hash drifted"):
        archived_metrics("03_kronecker", {"stage": "base", "no such field": 1})
