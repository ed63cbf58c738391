"""Study notebooks: parameters cells hold the smoke preset, and the papermill CLI runs them.

nbval (``pytest --nbval-lax notebooks``, part of ``make test``) executes every notebook at its
default (smoke) parameters; here we check the batch path, ``python -m lmstudy study``.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import papermill
import pytest

from lmstudy.notebook_runner import find_notebook, parse_overrides
from lmstudy.paths import notebooks_dir
from lmstudy.scales import NOTEBOOK_OPTIONS, PRESETS, SCALES
from test_smollm2 import tiny_llama_folder  # noqa: F401  (a fixture)

NOTEBOOKS = sorted(notebooks_dir().glob("*.ipynb"))


def test_every_notebook_has_presets_for_every_scale():
    assert NOTEBOOKS, "no notebooks found"
    for notebook in NOTEBOOKS:
        assert notebook.stem in PRESETS, f"{notebook.name} has no entry in lmstudy/scales.py"
        assert set(PRESETS[notebook.stem]) == set(SCALES)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[n.stem for n in NOTEBOOKS])
def test_parameters_cell_defaults_are_the_smoke_preset(notebook: Path):
    declared = papermill.inspect_notebook(str(notebook))
    defaults = {name: ast.literal_eval(spec["default"]) for name, spec in declared.items()}
    assert defaults.pop("scale") == "smoke"
    assert defaults == {**PRESETS[notebook.stem]["smoke"], **NOTEBOOK_OPTIONS.get(notebook.stem, {})}


def test_find_notebook_by_short_name_and_clear_error():
    assert find_notebook("quickstart").stem == "00_quickstart"
    with pytest.raises(FileNotFoundError, match="studies: 00_quickstart"):
        find_notebook("no_such_study")


def test_overrides_are_typed():
    assert parse_overrides([("lr", "1e-3"), ("max_steps", "5"), ("tied", "true")]) == {
        "lr": 1e-3, "max_steps": 5, "tied": True,
    }


def _cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lmstudy", *args], capture_output=True, text=True, env=env, timeout=600
    )


@pytest.fixture
def isolated_env(tmp_path) -> dict:
    """Runs and figures in tmp_path, so a test never touches the published ones."""
    return {**os.environ, "LMSTUDY_RUNS": str(tmp_path / "runs"), "LMSTUDY_FIGURES": str(tmp_path / "figures"),
            "TQDM_DISABLE": "1", "MPLBACKEND": "agg"}


def test_study_cli_rejects_unknown_parameter_and_study(isolated_env):
    result = _cli("study", "quickstart", "-p", "no_such_knob", "1", env=isolated_env)
    assert result.returncode == 2 and "no parameter(s) no_such_knob" in result.stderr
    result = _cli("study", "nonexistent", env=isolated_env)
    assert result.returncode == 2 and "no study notebook named 'nonexistent'" in result.stderr


@pytest.mark.slow
def test_study_cli_runs_quickstart_at_smoke_scale(isolated_env, tmp_path):
    from conftest import require_corpus

    require_corpus("ptb")
    result = _cli("study", "quickstart", "--scale", "smoke", "-p", "max_steps", "20", env=isolated_env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "test perplexity:" in result.stdout  # the notebook's summary line is echoed
    executed = tmp_path / "runs" / "notebooks" / "00_quickstart-smoke.ipynb"
    cells = json.loads(executed.read_text())["cells"]
    outputs = [o for c in cells if c["cell_type"] == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"]
    assert any("max_steps = 20" in "".join(c["source"]) for c in cells)  # the override was injected
    assert (tmp_path / "figures" / "smoke" / "00_quickstart_loss.png").is_file()


def test_every_scale_of_a_study_has_the_same_parameters():
    """A notebook reads the same parameters at every scale, so no preset can lack a key of another and no -p
    override is dropped (the paper presets once carried keys the notebooks lacked)."""
    for study, scales in PRESETS.items():
        keys = {scale: set(values) for scale, values in scales.items()}
        assert all(k == keys["smoke"] for k in keys.values()), (study, {s: sorted(k ^ keys["smoke"])
                                                                        for s, k in keys.items()})


def test_yaml_11_boolean_words_stay_words():
    assert parse_overrides([("mixed_precision", "no"), ("flag", "false"), ("x", "On")]) == {
        "mixed_precision": "no", "flag": False, "x": "On"}


@pytest.mark.slow
def test_study_without_pretrained_weights_fails_in_one_line(isolated_env, tmp_path):
    """The paper preset's init_from="gpt2" with no weights here: one line naming them and the fetch command, exit
    1, before any corpus is read; the executed notebook keeps the traceback."""
    env = {**isolated_env, "HF_HUB_CACHE": str(tmp_path / "empty-hub"), "HF_HUB_OFFLINE": "1"}
    result = _cli("study", "04_control_codes", "--scale", "paper", env=env)
    assert result.returncode == 1, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("lmstudy: error:")]
    assert len(lines) == 1 and "MissingWeights: init_from='gpt2'" in lines[0]
    assert "hf download gpt2 --local-dir models/gpt2" in lines[0] and "Traceback" not in result.stderr
    assert (tmp_path / "runs" / "notebooks" / "04_control_codes-paper.ipynb").is_file()


def test_model_presets_lay_over_the_scale_preset_with_the_notebook_s_parameters():
    """``study NAME --model M``: every model preset names a study with presets, scales it has, and only parameters
    its notebook declares; ``preset(..., model)`` is the scale's preset with the model's laid over it."""
    from lmstudy.scales import MODEL_PRESETS, model_preset, preset

    for study, models in MODEL_PRESETS.items():
        declared = set(papermill.inspect_notebook(str(find_notebook(study))))
        for model, scales in models.items():
            assert set(scales) <= set(SCALES) and scales, (study, model)
            for scale, values in scales.items():
                assert set(values) <= declared, (study, model, sorted(set(values) - declared))
                assert preset(study, scale, model) == {**PRESETS[study][scale], **values}
                assert model_preset(study, scale, model) == values
    assert preset("02_entity_transformer", "cpu", "smollm2")["init_from"] == "smollm2"
    with pytest.raises(ValueError, match="no preset for model 'nonesuch'; its models: smollm2"):
        model_preset("02_entity_transformer", "cpu", "nonesuch")
    with pytest.raises(ValueError, match="no preset for model 'smollm2'; its models: \\(none\\)"):
        model_preset("00_quickstart", "cpu", "smollm2")


def test_study_cli_rejects_a_model_without_a_preset(isolated_env):
    result = _cli("study", "quickstart", "--model", "smollm2", env=isolated_env)
    assert result.returncode == 2 and "study '00_quickstart' has no preset for model 'smollm2'" in result.stderr


@pytest.mark.slow  # the whole notebook on a tiny Llama: ~1 min
def test_the_entity_notebook_runs_on_a_llama_with_the_smollm2_preset(tiny_llama_folder, isolated_env, tmp_path,
                                                                      monkeypatch):
    """Notebook 02 with ``--model smollm2`` (issue 50), a tiny Llama in SmolLM2's layout given as ``init_from``:
    every cell runs on LlamaE (Tables 2-4, t-SNE, NER probe, claims, the export), no cell errs."""
    from conftest import require_corpus
    from lmstudy.notebook_runner import run_study

    for corpus in ("gum", "litbank", "lambada"):
        require_corpus(corpus)
    for key, value in isolated_env.items():
        monkeypatch.setenv(key, value)
    executed = run_study("02_entity_transformer", "smoke", overrides={"init_from": str(tiny_llama_folder)},
                         model="smollm2")
    assert executed == tmp_path / "runs" / "notebooks" / "02_entity_transformer-smoke-smollm2.ipynb"
    cells = json.loads(executed.read_text())["cells"]
    assert any("entity_top_layers = 1" in "".join(c["source"]) for c in cells)  # the model's preset was injected
    figures = tmp_path / "figures" / "smoke"
    assert {"02_entity_runs.csv", "02_entity_claims.csv", "02_entity_tsne.png", "02_entity_ner.csv"} <= {
        path.name for path in figures.iterdir()}
