"""The units of work of make test's two pytest-xdist workers (tests/conftest.py): what shares a worker, and the
order the units are handed out in."""

from __future__ import annotations

from pathlib import Path

from conftest import AFTER_THE_LEAKAGE_TESTS, FIRST_UNITS, LEAKAGE_TESTS, dry_run_unit, unit_rank, work_unit

from tests.test_paper_dry_run import DRY_RUNS

REPO = Path(__file__).resolve().parent.parent


def test_a_notebooks_cells_and_a_modules_tests_share_a_unit_and_each_dry_run_is_its_own_but_03s():
    cells = {work_unit(f"notebooks/02_entity_transformer.ipynb::Cell {i}") for i in range(12)}
    assert cells == {"notebooks/02_entity_transformer.ipynb"}
    assert work_unit("tests/test_text.py::test_rules[a::b]") == work_unit("tests/test_text.py::test_other")
    units = {study: work_unit(dry_run_unit(study)) for study in DRY_RUNS}
    assert units.pop("03_kronecker") == LEAKAGE_TESTS == work_unit(f"{LEAKAGE_TESTS}::test_no_evaluation_text")
    assert len(set(units.values())) == len(units) and LEAKAGE_TESTS not in units.values()
    assert AFTER_THE_LEAKAGE_TESTS == dry_run_unit("03_kronecker")
    # after them: a unit's tests keep collection order, and the leakage module is collected first
    assert sorted([LEAKAGE_TESTS, AFTER_THE_LEAKAGE_TESTS])[0] == LEAKAGE_TESTS


def test_the_first_units_name_every_dry_run_and_files_that_exist():
    # a renamed test or module would silently fall back to collection order: the long ones last
    dry_runs = {work_unit(dry_run_unit(study)) for study in DRY_RUNS} - {LEAKAGE_TESTS}
    assert dry_runs <= set(FIRST_UNITS) and LEAKAGE_TESTS in FIRST_UNITS
    assert all((REPO / unit).is_file() for unit in set(FIRST_UNITS) - dry_runs)
    assert [unit_rank(unit) for unit in FIRST_UNITS] == list(range(len(FIRST_UNITS)))
    assert unit_rank(FIRST_UNITS[-1]) < unit_rank("notebooks/00_quickstart.ipynb") < unit_rank("tests/test_text.py")
