"""The package layout (README, "Where things live"): one folder per paper beside one shared core.

Rules, checked on every ``import`` of the package, module-level or inside a function:
- no import circle between modules;
- a paper folder (``PAPERS``) imports the core and never another paper folder;
- the core imports no paper folder. ``lmstudy/__main__.py``, the command line's entry point, is the one
  module above both: it registers every paper's commands.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "lmstudy"
PAPERS = ("welch", "entity", "krony", "ctrl")
ENTRY_POINTS = {"lmstudy.__main__"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports anywhere in its body.

    ``from a.b import c`` names module ``a.b.c`` when that is a module, else ``a.b``; relative imports are
    resolved against the file's own package.
    """
    own = module_name(path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        found.update(name for name in names if name in modules and name != own)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {name: imported_modules(path, set(modules)) for name, path in modules.items()}


def paper_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in PAPERS else None


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def layout_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import that crosses from one paper into another, or from the core into a paper."""
    violations = []
    for source, targets in sorted(graph.items()):
        if source in ENTRY_POINTS:
            continue
        for target in sorted(targets):
            source_paper, target_paper = paper_of(source), paper_of(target)
            if target_paper and target_paper != source_paper:
                kind = "paper to paper" if source_paper else "core to paper"
                violations.append(f"{kind}: {source} imports {target}")
    return violations


def test_every_paper_has_its_folder():
    for paper in PAPERS:
        assert (PACKAGE / paper / "__init__.py").is_file(), paper
        assert ast.get_docstring(ast.parse((PACKAGE / paper / "__init__.py").read_text())), f"{paper} has no docstring"


def test_no_import_circle():
    assert find_cycle(import_graph()) is None


def test_no_import_from_one_paper_into_another_or_from_the_core_into_a_paper():
    assert layout_violations(import_graph()) == []


@pytest.mark.parametrize("graph, expected", [
    ({"lmstudy.a": {"lmstudy.b"}, "lmstudy.b": {"lmstudy.a"}}, ["lmstudy.a", "lmstudy.b", "lmstudy.a"]),
    ({"lmstudy.a": {"lmstudy.b"}, "lmstudy.b": set()}, None),
])
def test_find_cycle_finds_a_circle(graph, expected):
    assert find_cycle(graph) == expected


def test_the_checks_catch_lazy_imports(tmp_path, monkeypatch):
    """A function-level import from one paper into another, and the core into a paper, are both caught."""
    fake = tmp_path / "lmstudy"
    for name, text in {
        "__init__.py": "", "training.py": "def f():\n    from lmstudy.krony import study\n",
        "krony/__init__.py": '"""k"""', "krony/study.py": "def g():\n    from lmstudy.entity.study import x\n",
        "entity/__init__.py": '"""e"""', "entity/study.py": "from ..training import f\n",
    }.items():
        (fake / name).parent.mkdir(parents=True, exist_ok=True)
        (fake / name).write_text(text)
    monkeypatch.setattr(__import__(__name__), "PACKAGE", fake)
    assert layout_violations(import_graph()) == [
        "paper to paper: lmstudy.krony.study imports lmstudy.entity.study",
        "core to paper: lmstudy.training imports lmstudy.krony.study",
    ]
    assert find_cycle(import_graph()) == ["lmstudy.entity.study", "lmstudy.training", "lmstudy.krony.study",
                                          "lmstudy.entity.study"]


def test_every_public_function_and_class_has_a_docstring():
    missing = [
        f"{path.relative_to(PACKAGE.parent)}: {node.name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.parse(path.read_text(), str(path)).body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and not node.name.startswith("_") and not ast.get_docstring(node)
    ]
    assert not missing, "public module-level functions and classes without a docstring:\n" + "\n".join(missing)
