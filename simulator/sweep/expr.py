"""Constraint expressions of a sweep file, parsed with `ast` and interpreted here — never eval.

A constraint is a small expression over scenario key paths:

    deployment.tensor_parallel * deployment.replicas <= 8
    deployment.precision.weights == 'fp8' or deployment.tensor_parallel >= 4

Allowed: numbers, strings and true/false/none constants, key paths (names and attribute
chains), `+ - * / // %`, unary `- + not`, comparisons (`== != < <= > >=`, `in` / `not in` a
literal tuple or list), `and` / `or` and parentheses. Everything else (calls, subscripts,
lambdas, `**`, dunder names, ...) is refused with an `InputError` naming the constraint. The
tree is walked by this module's own interpreter, so no Python code ever runs.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simulator.errors import InputError

MAX_LENGTH = 500  # characters: a constraint is one short line

_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_CMPOPS: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_CONST_NAMES = {"true": True, "false": False, "none": None, "True": True, "False": False,
                "None": None, "null": None}


def _refuse(text: str, why: str) -> InputError:
    return InputError(f"constraint {text!r}: {why}")


def _path_of(node: ast.expr) -> str | None:
    """`a.b.c` for a Name or a chain of Attributes on a Name; None for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


@dataclass(frozen=True)
class Constraint:
    """One parsed constraint: its source text, its checked tree and the key paths it reads."""

    text: str
    tree: ast.expr
    paths: tuple[str, ...]

    def holds(self, lookup: Callable[[str], Any]) -> bool:
        """Evaluate against a point; `lookup(path)` returns the value of a key path."""
        try:
            return bool(_Eval(self.text, lookup).visit(self.tree))
        except InputError:
            raise
        except ZeroDivisionError:
            raise _refuse(self.text, "division by zero") from None
        except (TypeError, ValueError, OverflowError) as exc:
            raise _refuse(self.text, f"cannot be evaluated ({exc})") from None


def parse_constraint(text: object) -> Constraint:
    """Parse and check one constraint string; InputError (naming it) if it is not allowed."""
    if not isinstance(text, str):
        raise InputError(f"constraints: each constraint must be a string (got {text!r})")
    if not text.strip():
        raise _refuse(text, "empty")
    if len(text) > MAX_LENGTH:
        raise _refuse(text[:40] + "...", f"longer than {MAX_LENGTH} characters")
    try:
        module = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise _refuse(text, f"not a valid expression ({exc.msg})") from None
    except (RecursionError, MemoryError, ValueError):
        raise _refuse(text, "too deeply nested") from None
    paths: list[str] = []
    _check(module.body, text, paths)
    return Constraint(text, module.body, tuple(dict.fromkeys(paths)))


def _check(node: ast.AST, text: str, paths: list[str]) -> None:
    """Walk the tree, refusing any node outside the whitelist."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool | int | float | str) or node.value is None:
            return
        raise _refuse(text, f"constant {node.value!r} is not a number or a string")
    if isinstance(node, ast.Name | ast.Attribute):
        path = _path_of(node)
        if path is None:
            raise _refuse(text, "only key paths like deployment.tensor_parallel may be used")
        if any(part.startswith("_") for part in path.split(".")):
            raise _refuse(text, f"{path!r} is not a scenario key path")
        if path not in _CONST_NAMES:
            paths.append(path)
        return
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise _refuse(text, f"operator {type(node.op).__name__} is not allowed "
                                "(use + - * / // %)")
        _check(node.left, text, paths)
        _check(node.right, text, paths)
        return
    if isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, ast.USub | ast.UAdd | ast.Not):
            raise _refuse(text, f"operator {type(node.op).__name__} is not allowed")
        _check(node.operand, text, paths)
        return
    if isinstance(node, ast.BoolOp):
        for v in node.values:
            _check(v, text, paths)
        return
    if isinstance(node, ast.Compare):
        _check(node.left, text, paths)
        for op, right in zip(node.ops, node.comparators, strict=True):
            if type(op) not in _CMPOPS:
                raise _refuse(text, f"comparison {type(op).__name__} is not allowed")
            if isinstance(op, ast.In | ast.NotIn):
                if not isinstance(right, ast.Tuple | ast.List):
                    raise _refuse(text, "'in' needs a literal list, e.g. x in (1, 2)")
                for elt in right.elts:
                    if not isinstance(elt, ast.Constant):
                        raise _refuse(text, "'in' lists may hold constants only")
                    _check(elt, text, paths)
            else:
                _check(right, text, paths)
        return
    raise _refuse(
        text,
        f"{type(node).__name__} is not allowed; use key paths, numbers, + - * / // %, "
        "comparisons, and/or/not and parentheses",
    )


class _Eval:
    """Interpreter for a tree that `_check` accepted."""

    def __init__(self, text: str, lookup: Callable[[str], Any]) -> None:
        self.text = text
        self.lookup = lookup

    def visit(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name | ast.Attribute):
            path = _path_of(node)
            assert path is not None
            if path in _CONST_NAMES:
                return _CONST_NAMES[path]
            return self.lookup(path)
        if isinstance(node, ast.BinOp):
            a, b = self._number(node.left), self._number(node.right)
            return _BINOPS[type(node.op)](a, b)
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Not):
                return not self.visit(node.operand)
            value = self._number(node.operand)
            return -value if isinstance(node.op, ast.USub) else +value
        if isinstance(node, ast.BoolOp):
            is_and = isinstance(node.op, ast.And)
            result: Any = is_and
            for v in node.values:
                result = self.visit(v)
                if bool(result) != is_and:
                    return result
            return result
        if isinstance(node, ast.Compare):
            left = self.visit(node.left)
            for op, right_node in zip(node.ops, node.comparators, strict=True):
                if isinstance(right_node, ast.Tuple | ast.List):
                    right: Any = tuple(self.visit(e) for e in right_node.elts)
                else:
                    right = self.visit(right_node)
                if not _CMPOPS[type(op)](left, right):
                    return False
                left = right
            return True
        raise _refuse(self.text, f"{type(node).__name__} is not allowed")  # pragma: no cover

    def _number(self, node: ast.expr) -> float | int:
        value = self.visit(node)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _refuse(self.text, f"arithmetic needs numbers (got {value!r})")
        return value
