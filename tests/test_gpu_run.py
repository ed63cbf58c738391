"""scripts/gpu_run.sh: a study's paper preset on a GPU machine, then every run archived. Here (no GPU) only its
refusals are tested; the archive step it ends with is `runs archive --all` (tests/test_run_archive.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lmstudy.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "gpu_run.sh"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env={"PY": sys.executable, "PATH": "/usr/bin:/bin"}, timeout=120)


def test_usage_and_bad_minutes_are_refused():
    assert run("03_kronecker").returncode == 2
    refused = run("03_kronecker", "ten", "/tmp/x")
    assert refused.returncode == 2 and "MINUTES must be a number of minutes" in refused.stderr
    assert run("03_kronecker", "2.5.1", "/tmp/x").returncode == 2


def test_without_a_gpu_it_says_so_and_starts_nothing(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the script would start the paper run")
    refused = run("03_kronecker", "1", str(tmp_path / "archive"))
    assert refused.returncode == 2 and "no CUDA device" in refused.stderr
    assert not (tmp_path / "archive").exists()
