"""Every study's published claims table comes from lmstudy.claims' rule, and the committed file is what it gives.

Three checks: each registered table rebuilds from committed results through ``claims_table`` (its ``attrs``
name the rule) and equals the CSV in figures/ (so a verdict in the README cannot drift from the rule); no study
module writes a verdict word as a literal (a verdict decided by hand); and every study's ``claims`` builder
ends in ``claims_table``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pandas as pd
import pytest

from lmstudy.claims import NOT_RUN, RULE, VERDICTS
from lmstudy.published_claims import PUBLISHED, PublishedTable

STUDY_PACKAGES = ("welch", "entity", "krony", "ctrl")
PACKAGE = Path(__file__).resolve().parents[1] / "lmstudy"


def _study_modules() -> list[Path]:
    return sorted(path for package in STUDY_PACKAGES for path in (PACKAGE / package).glob("*.py"))


@pytest.mark.parametrize("study", sorted(PUBLISHED))
def test_the_committed_claims_table_is_the_rules(study):
    published = PUBLISHED[study]
    table = published.build()
    assert table.attrs["rule"] == RULE
    assert set(table["verdict"]) <= set(VERDICTS)
    assert published.path.exists(), f"run python -m lmstudy claims {study}"
    committed = pd.read_csv(published.path)
    rebuilt = pd.read_csv(pd.io.common.StringIO(table.to_csv(index=False)))  # the same round trip as the file's
    pd.testing.assert_frame_equal(committed, rebuilt, check_dtype=False, obj=f"figures/{published.filename}")
    not_run = table[table["verdict"] == NOT_RUN]
    assert not_run["note"].notna().all() if len(not_run) else True  # a claim not run says why


def test_a_table_built_without_the_rule_is_refused(monkeypatch):
    import types
    import sys

    module = types.ModuleType("fake_study")
    module.published_claims = lambda: pd.DataFrame({"claim": ["x"], "verdict": ["holds"]})
    monkeypatch.setitem(sys.modules, "fake_study", module)
    with pytest.raises(RuntimeError, match="claims_table"):
        PublishedTable("x", "fake_study:published_claims", "x.csv", "x").build()


def test_no_study_module_writes_a_verdict_by_hand():
    words = set(VERDICTS) - {NOT_RUN}
    offenders = []
    for path in _study_modules():
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in words
                    and id(node) not in docstrings):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.value!r}")
    assert not offenders, "verdicts come from lmstudy.claims.verdict, not literals: " + "; ".join(offenders)


def test_every_study_claims_builder_goes_through_claims_table():
    builders = []
    for path in _study_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name in ("claims", "published_claims"):
                calls = {getattr(call.func, "id", getattr(call.func, "attr", None))
                         for call in ast.walk(node) if isinstance(call, ast.Call)}
                builders.append(f"{path.parent.name}/{path.name}")
                assert calls & {"claims_table", "claims"}, f"{path.name}:{node.name} does not call claims_table"
    assert {"welch/tables.py", "welch/extended.py", "welch/trend.py", "entity/claims.py", "krony/claims.py",
            "ctrl/claims.py"} <= set(builders)
