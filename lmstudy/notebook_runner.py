"""Run a study notebook with papermill at a given scale.

``python -m lmstudy study NAME --scale cpu -p key value`` lands here: the notebook
``notebooks/NAME.ipynb`` is executed with its scale preset (``lmstudy.scales``) plus any
overrides, the executed copy is written to ``runs/notebooks/NAME-SCALE.ipynb`` and the notebook
itself writes its figures (``lmstudy.paths.figures_dir(scale)``).
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from lmstudy.paths import notebooks_dir, runs_dir
from lmstudy.scales import SCALES, model_preset, preset


# YAML 1.1 booleans that are words in a parameter value (``mixed_precision="no"``, ``"on"``).
YAML11_BOOLEAN_WORDS = {"yes", "no", "y", "n", "on", "off"}


def find_notebook(name: str) -> Path:
    """``00_quickstart``, ``quickstart`` or a path -> the notebook file."""
    candidates = sorted(notebooks_dir().glob("*.ipynb"))
    for path in candidates:
        stem = path.stem
        if name in (stem, path.name, stem.split("_", 1)[-1]):
            return path
    names = ", ".join(p.stem for p in candidates) or "(none)"
    raise FileNotFoundError(f"no study notebook named {name!r} in {notebooks_dir()}; studies: {names}")


def parse_value(text: str):
    """A command-line value -> int, float, bool, None, list or str (YAML scalars, like papermill's -p).

    PyYAML follows YAML 1.1, where ``1e-3`` is a string; we read it as the float people mean. YAML 1.1 also
    reads ``yes``/``no``/``on``/``off`` as booleans, but here they are words (``-p mixed_precision no``):
    only ``true``/``false`` are booleans.
    """
    if text.strip().lower() in YAML11_BOOLEAN_WORDS:
        return text.strip()
    value = yaml.safe_load(text)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def parse_overrides(pairs: list[tuple[str, str]]) -> dict:
    """``-p key value`` pairs -> {key: typed value}."""
    return {key: parse_value(value) for key, value in pairs}


class StudyFailed(RuntimeError):
    """A study notebook raised: the message names the notebook, the cell, the error and the executed copy."""


def run_study(name: str, scale: str = "smoke", overrides: dict | None = None, output: Path | None = None,
              second_worker: bool = False, model: str = "") -> Path:
    """Execute a study notebook at ``scale``; returns the path of the executed notebook. ``model``: on that pretrained
    model instead of the study's own base (its preset, :data:`lmstudy.scales.MODEL_PRESETS`, laid over the scale's;
    the executed copy is ``NAME-SCALE-MODEL.ipynb``). ``second_worker``: a second
    process trains the study's run list from its other end meanwhile (:mod:`lmstudy.second_worker`), each of the
    two on half the cores; it is waited for when the notebook is done (it has only cached runs left to read then),
    and stopped if the notebook fails."""
    import papermill

    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; choose one of {', '.join(SCALES)}")
    notebook = find_notebook(name)
    declared = papermill.inspect_notebook(str(notebook))
    # the model's parameters travel as overrides (to the second worker too)
    overrides = {**(model_preset(notebook.stem, scale, model) if model else {}), **(overrides or {})}
    parameters = {**preset(notebook.stem, scale), **overrides, "scale": scale}
    unknown = sorted(set(parameters) - set(declared))
    if unknown:
        raise KeyError(
            f"{notebook.name} has no parameter(s) {', '.join(unknown)}; "
            f"its parameters are: {', '.join(sorted(declared))}"
        )
    if output is None:
        output = runs_dir() / "notebooks" / f"{notebook.stem}-{scale}{f'-{model}' if model else ''}.ipynb"
    output.parent.mkdir(parents=True, exist_ok=True)
    # The kernel's inline backend needs no display and embeds every shown figure in the executed notebook.
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    worker = None
    if second_worker:
        from lmstudy import second_worker as workers

        worker = workers.start(notebook.stem, scale, overrides)
        os.environ.update(workers.half_the_cores())  # the notebook's kernel: the other half
    try:
        papermill.execute_notebook(
            str(notebook),
            str(output),
            parameters=parameters,
            cwd=str(notebook.parent),
            progress_bar=os.environ.get("TQDM_DISABLE") != "1",
        )
    except BaseException as error:
        if worker is not None:
            worker.terminate()  # the notebook failed: nobody would read the worker's runs
            worker.wait()
        if not isinstance(error, papermill.PapermillExecutionError):
            raise
        # The cell's own error in one line (papermill's message is the whole traceback, hundreds of lines
        # for a hub or CUDA error); the traceback stays in the executed notebook.
        raise StudyFailed(f"{notebook.name} failed at {scale} scale in cell {error.exec_count}: "
                          f"{error.ename}: {error.evalue} (full traceback: {output})") from error
    if worker is not None and worker.wait() != 0:  # the notebook read every run back: the worker has none left
        raise StudyFailed(f"the second worker of {notebook.name} failed (exit status {worker.returncode}); the "
                          f"executed notebook is complete: {output}")
    return output


def final_printout(executed: Path) -> str:
    """What the last code cell of an executed notebook printed: a study's one-line summary."""
    import nbformat

    cells = [cell for cell in nbformat.read(executed, as_version=4).cells if cell.cell_type == "code"]
    if not cells:
        return ""
    return "".join(out.get("text", "") for out in cells[-1].get("outputs", []) if out.output_type == "stream")
