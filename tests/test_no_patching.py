"""No module of the simulator patches what it does not own: a module's attributes (the
standard library's or a dependency's), another object's private state, or `sys.modules`.

Such patches tie the simulator to one version of the code they reach into (a private
attribute can change in any release) and change that code for everyone in the process. Each
module is read with `ast` (nothing is imported from the simulator), and any of these fails:

- an assignment, augmented assignment or `del` whose target is an attribute of an imported
  module (`dataclasses.exec = ...`), or an item of a module's `__dict__`;
- `setattr` / `delattr` (or `object.__setattr__` / `object.__delattr__`) on an imported module;
- a write to an attribute whose name starts with `_` on anything but `self` or `cls`
  (`env._now = ...`, `event._ok = ...`, `setattr(x, "_value", ...)`); dunder names
  (`f.__doc__`, `__signature__`) are public protocol and not counted;
- an assignment into, or deletion or change of, `sys.modules`.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "simulator"
OWNERS = ("self", "cls")
MUTATORS = ("update", "pop", "popitem", "setdefault", "clear", "__setitem__", "__delitem__")


def _is_module(name: str) -> bool:
    """Whether `name` is an importable module (so `from pkg import name` binds a module)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def imported_modules(tree: ast.Module, package: str = "") -> set[str]:
    """The names a module binds to modules: `import a.b` (a), `import a as b` (b), and
    `from a import b` where a.b is a module."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names.add(alias.asname or alias.name.partition(".")[0])
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the package
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                if alias.name != "*" and _is_module(f"{base}.{alias.name}"):
                    names.add(alias.asname or alias.name)
    return names


def _root(node: ast.expr) -> str | None:
    """The name an attribute chain starts from (`a` of `a.b.c`), if it is a plain name."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _owner(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in OWNERS


def _is_sys_modules(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "modules"
            and isinstance(node.value, ast.Name) and node.value.id == "sys")


def _target_problems(target: ast.expr, modules: set[str]) -> list[str]:
    """What is wrong with writing (or deleting) `target`: each problem found."""
    if isinstance(target, ast.Tuple | ast.List):
        return [p for elt in target.elts for p in _target_problems(elt, modules)]
    if isinstance(target, ast.Starred):
        return _target_problems(target.value, modules)
    if isinstance(target, ast.Attribute):
        if _root(target) in modules:
            return [f"writes {ast.unparse(target)}, an attribute of an imported module"]
        if _private(target.attr) and not _owner(target.value):
            return [f"writes {ast.unparse(target)}, private state of another object"]
    if isinstance(target, ast.Subscript):
        if _is_sys_modules(target.value):
            return [f"writes {ast.unparse(target)} into sys.modules"]
        value = target.value
        if (isinstance(value, ast.Attribute) and value.attr == "__dict__"
                and _root(value) in modules):
            return [f"writes {ast.unparse(target)} into a module's namespace"]
    return []


def _call_problem(call: ast.Call, modules: set[str]) -> str | None:
    """setattr/delattr on a module or another object's private name; sys.modules changed."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in MUTATORS and _is_sys_modules(func.value):
        return f"calls {ast.unparse(func)}: changes sys.modules"
    name = None
    if isinstance(func, ast.Name) and func.id in ("setattr", "delattr"):
        name = func.id
    elif (isinstance(func, ast.Attribute) and func.attr in ("__setattr__", "__delattr__")
          and isinstance(func.value, ast.Name) and func.value.id == "object"):
        name = f"object.{func.attr}"
    if name is None or not call.args:
        return None
    obj = call.args[0]
    if _root(obj) in modules and not _owner(obj):
        return f"calls {name} on {ast.unparse(obj)}, an imported module"
    attr = call.args[1] if len(call.args) > 1 else None
    if (isinstance(attr, ast.Constant) and isinstance(attr.value, str) and _private(attr.value)
            and not _owner(obj)):
        return f"calls {name}({ast.unparse(obj)}, {attr.value!r}): private state of another object"
    return None


def patches(source: str, package: str = "") -> list[str]:
    """Every patch of something the module does not own, as 'line N: what'."""
    tree = ast.parse(source)
    modules = imported_modules(tree, package)
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        line = getattr(node, "lineno", 0)
        for target in targets:
            found += [f"line {line}: {p}" for p in _target_problems(target, modules)]
        if isinstance(node, ast.Call):
            problem = _call_problem(node, modules)
            if problem:
                found.append(f"line {node.lineno}: {problem}")
    return found


def _package(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1])


def test_no_module_patches_what_it_does_not_own() -> None:
    found = {
        str(path.relative_to(ROOT.parent)): problems
        for path in sorted(ROOT.rglob("*.py"))
        if (problems := patches(path.read_text(), _package(path)))
    }
    assert found == {}


BAD = '''
import dataclasses, importlib, sys, typing
import simpy.core as core
from importlib import metadata
dataclasses.exec = lambda *a: None
typing.compile += 1
setattr(importlib, "metadata", None)
delattr(importlib, "metadata")
metadata.version = None
core.Environment.step = None
sys.modules["importlib.metadata"] = object()
del sys.modules["simpy"]
sys.modules.update({})
vars_ = typing.__dict__["x"] = 1
def run(env, event):
    env._now = 1.0
    event._ok, event._value = True, None
    env.clock._queue = []
    setattr(event, "_defused", True)
    object.__setattr__(event, "_value", 2)
'''

GOOD = '''
import dataclasses
from simpy import Environment
class C:
    def __init__(self, env):
        self._env = env
        self.count = 0
        env.public = 1
        object.__setattr__(self, "_frozen", True)
    @classmethod
    def make(cls):
        cls._registry = {}
def wrap(f, g):
    g.__doc__ = f.__doc__
    return dataclasses.replace(g)
'''


def test_the_check_catches_each_kind_of_patch() -> None:
    found = patches(BAD)
    lines = {int(p.split(":")[0].removeprefix("line ")) for p in found}
    bad_lines = {i + 1 for i, text in enumerate(BAD.splitlines())
                 if text.strip() and not text.startswith(("import", "from", "def"))}
    assert lines == bad_lines, found
    assert any("event._value" in p for p in found)  # both targets of a tuple are checked
    assert patches(GOOD) == []


@pytest.mark.parametrize("snippet", [
    "import os\nos.environ = {}",
    "import os.path\nos.path.join = str",
    "from simpy import core\ncore.Infinity = 0",
    "def f(x):\n    x._private += 1",
])
def test_single_patches_are_caught(snippet: str) -> None:
    assert len(patches(snippet)) == 1
