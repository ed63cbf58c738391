"""The `python -m lmstudy` entry point wires every command group and fails cleanly on bad input."""

from __future__ import annotations

import subprocess
import sys

from conftest import require_corpus


def lmstudy(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lmstudy", *args], capture_output=True, text=True, timeout=300)


def test_help_lists_every_command():
    result = lmstudy("--help")
    assert result.returncode == 0
    for command in ("data", "study", "krony"):
        assert command in result.stdout


def test_data_verify_through_the_entry_point():
    require_corpus("ptb")
    result = lmstudy("data", "verify", "ptb")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok" in result.stdout


def test_unknown_corpus_is_a_clear_error_not_a_traceback():
    result = lmstudy("data", "verify", "no_such_corpus")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "no_such_corpus" in result.stdout + result.stderr


def test_krony_table_through_the_entry_point():
    result = lmstudy("krony", "table")
    assert result.returncode == 0
    assert "124,439,832" in result.stdout and "67,893,504" in result.stdout
