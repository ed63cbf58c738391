"""The Figure 1 search on a real PostgreSQL server: several workers started at the same instant on a fresh
database share one study without repeating or losing a trial; a missing driver is one line naming the extra.

The server: ``eval "$(scripts/start_postgres.sh)"`` starts Debian's PostgreSQL on 127.0.0.1 and exports
``LMSTUDY_TEST_POSTGRES`` (an URL of a role that may create databases); ``.ci/run`` does it. Without it the
PostgreSQL tests are skipped, in CI they fail.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from lmstudy.paths import REPO_ROOT
from lmstudy.welch import hpsearch
from tests.conftest import IN_CI

WORKER = Path(__file__).with_name("hpsearch_worker.py")


@pytest.fixture
def fresh_database() -> str:
    """The URL of a new, empty database on the test server (dropped afterwards)."""
    admin = os.environ.get("LMSTUDY_TEST_POSTGRES")
    if not admin:
        message = 'no PostgreSQL server: start one with eval "$(scripts/start_postgres.sh)"'
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    import psycopg

    name = f"lmstudy_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    yield admin.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_postgres_urls_use_psycopg_3_and_sqlite_stays_the_default(tmp_path, monkeypatch):
    monkeypatch.setenv("LMSTUDY_RUNS", str(tmp_path))
    assert hpsearch.storage_url("") == f"sqlite:///{tmp_path / 'optuna.db'}"
    assert hpsearch.storage_url("sqlite:///x.db") == "sqlite:///x.db"
    assert hpsearch.storage_url("postgresql://u:p@127.0.0.1/db") == "postgresql+psycopg://u:p@127.0.0.1/db"
    assert hpsearch.storage_url("postgres://u@h:5433/db") == "postgresql+psycopg://u@h:5433/db"


def test_a_missing_driver_is_one_line_naming_the_extra(monkeypatch, capsys):
    from lmstudy.__main__ import main

    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg now raises ImportError
    assert main(["hpsearch", "--storage", "postgresql://u@127.0.0.1/db"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "psycopg" in err and "pip install 'lmstudy[postgres]'" in err


@pytest.mark.slow
def test_workers_started_together_on_a_fresh_database_share_the_search(fresh_database, tmp_path):
    """3 workers, 6 samples: every sample COMPLETE exactly once, each side of each sample trained once."""
    n_trials, calls = 6, tmp_path / "calls.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
           "LMSTUDY_RUNS": str(tmp_path / "runs"), "OMP_NUM_THREADS": "1"}
    start_at = time.time() + 8  # after every worker's imports: they open the new database together
    workers = [subprocess.Popen([sys.executable, str(WORKER), fresh_database, str(n_trials), str(calls),
                                 str(start_at)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(3)]
    for worker in workers:
        _, err = worker.communicate(timeout=240)
        assert worker.returncode == 0, err[-3000:]

    sys.path.insert(0, str(WORKER.parent))
    from hpsearch_worker import config

    study = hpsearch.load_study(config(fresh_database, n_trials))
    complete = [t for t in study.get_trials() if t.state.name == "COMPLETE"]
    assert sorted(t.user_attrs.get("sample_index") for t in complete) == list(range(n_trials))
    # Pruned before training: a twin of a sample, or a random trial made when another worker took ours.
    assert {t.state.name for t in study.get_trials()} <= {"COMPLETE", "PRUNED"}
    samples = hpsearch.sample_trials(config(fresh_database, n_trials).space, n_trials, seed=0)
    trained = collections.Counter(calls.read_text().splitlines())
    expected = collections.Counter(f"{float(s['lr'])!r} {side}" for s in samples for side in hpsearch.SIDES.values())
    assert trained == expected  # every side of every sample trained once: nothing repeated, nothing lost
