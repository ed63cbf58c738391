"""lmstudy.second_worker: `lmstudy study NAME --second-worker` trains the study's run list from its other end in a
second process; each study's run list is the runs its notebook trains, in the notebook's order."""

from __future__ import annotations

import pytest

from lmstudy import second_worker
from lmstudy.scales import preset
from lmstudy.second_worker import StudyRun, run_list, walk_from_the_end


def parameters(notebook: str, scale: str) -> dict:
    return {**preset(notebook, scale), "scale": scale}


def test_each_stage_is_walked_from_its_end_stages_in_order(capsys):
    trained = []
    stages = [[StudyRun(name, lambda name=name: trained.append(name)) for name in stage]
              for stage in (["a1", "a2", "a3"], ["b1", "b2"])]
    assert walk_from_the_end(stages) == 5
    assert trained == ["a3", "a2", "a1", "b2", "b1"]
    assert "[1/5] a3" in capsys.readouterr().out


def test_the_study_run_lists_are_the_notebooks_runs():
    # 01: Table 1's grid, then the freezing trend
    grid, trend = run_list("01_embedding_init", parameters("01_embedding_init", "cpu"))
    assert (len(grid), len(trend)) == (64, 24)
    # 02: GPT2 and GPT2E of every seed, then the ablations
    (entity,) = run_list("02_entity_transformer", parameters("02_entity_transformer", "cpu"))
    assert [run.label for run in entity[:2]] == ["GPT2, seed 0", "GPT2E, seed 0"] and len(entity) == 12
    # 03: the dense baselines, distilled first
    (krony,) = run_list("03_kronecker", parameters("03_kronecker", "cpu"))
    assert len(krony) == 18 and krony[0].label.startswith("distilled") and krony[-1].label.startswith("scratch")
    with pytest.raises(KeyError, match="no run list"):
        run_list("04_control_codes", parameters("04_control_codes", "smoke"))


def test_the_flag_reaches_the_study_runner(monkeypatch, tmp_path):
    from lmstudy import notebook_runner
    from lmstudy.__main__ import main

    calls = []
    executed = tmp_path / "done.ipynb"

    def run_study(name, scale, overrides, second_worker, model):
        calls.append((name, scale, overrides, second_worker, model))
        return executed

    monkeypatch.setattr(notebook_runner, "run_study", run_study)
    monkeypatch.setattr(notebook_runner, "final_printout", lambda path: "")
    assert main(["study", "03_kronecker", "--scale", "smoke", "-p", "seeds", "[0]", "--second-worker"]) == 0
    assert main(["study", "03_kronecker", "--scale", "smoke"]) == 0
    assert main(["study", "02_entity_transformer", "--scale", "cpu", "--model", "smollm2"]) == 0
    assert calls == [("03_kronecker", "smoke", {"seeds": [0]}, True, ""), ("03_kronecker", "smoke", {}, False, ""),
                     ("02_entity_transformer", "cpu", {}, False, "smollm2")]


def test_two_processes_get_half_the_cores_unless_told(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(second_worker.os, "cpu_count", lambda: 16)
    assert second_worker.half_the_cores() == {"OMP_NUM_THREADS": "8"}
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert second_worker.half_the_cores() == {"OMP_NUM_THREADS": "3"}
