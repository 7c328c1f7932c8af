"""The package's import graph reads as the layers of docs/architecture.md and has no circle.

Every import counts, including those inside functions and under TYPE_CHECKING: a lazy import
still ties two modules together, and a circle hidden that way is still a circle.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "simulator"

# Rank of each top-level part: a module may import its own rank or lower, never higher.
LAYERS: dict[str, int] = {
    "errors": 0,
    "units": 0,
    "yamlsafe": 0,
    "progress": 0,
    "safeio": 0,  # output files: never through a link, atomic, one-line failures
    "model": 1,
    "hardware": 1,
    "engines": 1,
    "inputs": 1,
    "quality": 1,
    "cost": 2,
    "workload": 2,  # request streams and traces: read inputs, know nothing of the engine
    "serving": 3,  # the event engine
    # The closed-form estimate over the engine's build, without simulating (not named
    # `estimate/`: importing it would shadow the public function simulator.estimate()).
    "closed_form": 4,
    "metrics": 4,  # summaries of the engine's records
    "api": 5,
    "__init__": 5,  # the package root re-exports the API
    "sweep": 6,
    "validation": 6,
    "measured": 6,  # measured runs read from benchmark files, mapped to scenarios, scored
    "calibration": 6,
    "report": 7,
    "bench": 8,
    "lessons": 8,
    "cli": 9,
    "__main__": 9,
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _target(module: str, name: str | None) -> str:
    """The module an import statement loads: a submodule when `from pkg import sub` names one."""
    if name is not None and f"{module}.{name}" in MODULES:
        return f"{module}.{name}"
    return module


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "simulator")
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and node.module.split(".")[0] == "simulator"
        ):
            out.update(_target(node.module, a.name) for a in node.names)
    return {m for m in out if m in MODULES}


GRAPH = {m: _imports(p) for m, p in MODULES.items()}


def _rank(module: str) -> int:
    parts = module.split(".")
    if parts == ["simulator"]:
        return LAYERS["__init__"]
    return LAYERS[parts[1].removeprefix("_")] if parts[1] != "__main__" else LAYERS["__main__"]


def test_every_module_has_a_layer() -> None:
    unplaced = [m for m in MODULES if m.split(".")[1:2] and m.split(".")[1] not in LAYERS]
    assert unplaced == [], f"give these a rank in LAYERS: {unplaced}"


def test_imports_point_down_the_layers() -> None:
    upward = [
        f"{src} (rank {_rank(src)}) imports {dst} (rank {_rank(dst)})"
        for src, dsts in GRAPH.items()
        for dst in sorted(dsts)
        if _rank(dst) > _rank(src)
    ]
    assert upward == []


def _find_cycle() -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(GRAPH[m]):
            if state.get(n) == 1:
                return [*path[path.index(n):], n]
            if n not in state and (cycle := visit(n)) is not None:
                return cycle
        path.pop()
        state[m] = 2
        return None

    for m in sorted(GRAPH):
        if m not in state and (cycle := visit(m)) is not None:
            return cycle
    return None


def test_no_import_circle() -> None:
    cycle = _find_cycle()
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_the_circle_check_sees_a_circle() -> None:
    """The check itself: a graph with a two-module loop is reported."""
    saved = dict(GRAPH)
    try:
        GRAPH["simulator.units"] = {"simulator.errors"}
        GRAPH["simulator.errors"] = {"simulator.units"}
        assert _find_cycle() == ["simulator.errors", "simulator.units", "simulator.errors"]
    finally:
        GRAPH.clear()
        GRAPH.update(saved)


def test_every_module_imports() -> None:
    """Each module loads on its own (`__main__` would run the CLI, so it is left out)."""
    for module in sorted(m for m in MODULES if not m.endswith("__main__")):
        importlib.import_module(module)
