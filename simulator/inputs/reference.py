"""The scenario reference (docs/reference.md), generated from the schema itself: every key with
its type, default, range and meaning. The meaning is the comment written above (or beside) the
field in its model's source, or its class docstring, so the reference and the code cannot
drift apart: tests/test_reference.py fails when the checked-in page differs from this output."""

from __future__ import annotations

import inspect
import io
import tokenize
import types
import typing
from collections.abc import Iterator
from typing import Any, Literal, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from simulator.inputs.scenario import Scenario

HEADER = """# Scenario reference

Every key of a scenario file, generated from the schema (`simulator/inputs/`) by
`frontier schema --reference`; a test fails when this page is stale. A sweep file holds the
same keys plus `sweep:` (key path -> list of values, and `zip:` groups), `constraints:` and
`max_quality_drop_pct:` (see docs/scenarios.md). `frontier schema scenario` prints the JSON
Schema an editor can check files against.
"""


def _comments(cls: type) -> dict[str, str]:
    """Field name -> the comment lines just above it (or beside it) in the class body."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    notes: dict[int, str] = {}
    code_lines: dict[int, str] = {}  # a field's line -> its name
    any_code: set[int] = set()  # lines holding code (a comment above stops at them)
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            notes[tok.start[0]] = tok.string.lstrip("#").strip()
        elif tok.type not in skip:
            any_code.add(tok.start[0])
            if tok.type == tokenize.NAME and tok.start[1] == 4:
                code_lines.setdefault(tok.start[0], tok.string)
    out: dict[str, str] = {}
    for line, name in code_lines.items():
        above: list[str] = []
        i = line - 1
        while i in notes and i not in any_code:
            above.insert(0, notes[i])
            i -= 1
        beside = notes.get(line, "")
        text = " ".join(above + ([beside] if beside else []))
        if text:
            out[name] = text
    return out


def _docs(cls: type) -> dict[str, str]:
    """Field docs of a model and its bases (a subclass's own comment wins)."""
    out: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if issubclass(base, BaseModel) and base is not BaseModel:
            out.update(_comments(base))
    return out


def _constraints(info: FieldInfo) -> str:
    parts = []
    for m in info.metadata:
        for attr, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if isinstance(m, getattr(at, attr.capitalize())):
                bound = getattr(m, attr)
                parts.append(f"{sym} {bound}" if isinstance(bound, int) else f"{sym} {bound:g}")
        if isinstance(m, at.MinLen):
            parts.append(f"length >= {m.min_length}")
    return ", ".join(parts)


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in get_args(tp))
    if origin is typing.Annotated:
        base, *meta = get_args(tp)
        bounds = _constraints(FieldInfo.from_annotation(tp)) if meta else ""
        return _type_name(base) + (f" ({bounds})" if bounds else "")
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if origin in (list, tuple):
        args = [a for a in get_args(tp) if a is not Ellipsis]
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        k, v = get_args(tp)
        return f"mapping {_type_name(k)} -> {_type_name(v)}"
    if tp is type(None):
        return "null"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return f"mapping ({tp.__name__})"
    return getattr(tp, "__name__", str(tp))


def _models_in(tp: Any) -> list[type[BaseModel]]:
    """The model classes a field's type can hold (union members, Annotated, Optional)."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    return [m for a in get_args(tp) for m in _models_in(a)]


def _default(info: FieldInfo) -> str:
    if info.default is PydanticUndefined and info.default_factory is None:
        return "required"
    value = info.default
    if isinstance(value, BaseModel):
        return "see below"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`" if value != "" else '`""`'


def _kind_of(model: type[BaseModel]) -> str | None:
    field = model.model_fields.get("kind")
    if field is None or get_origin(field.annotation) is not Literal:
        return None
    return str(get_args(field.annotation)[0])


def _owner(model: type[BaseModel], name: str) -> type:
    """The class in `model`'s bases that declares field `name`."""
    return next(b for b in model.__mro__ if name in getattr(b, "__annotations__", {}))


def _rows(model: type[BaseModel], prefix: str, seen: set[tuple[str, type]],
          owners: dict[type, str]) -> Iterator[tuple[str, str, str, str]]:
    """(key path, type, default, meaning) for every field under `prefix`, depth first. Fields
    a shared base declares (a P/D pool's engine keys are the aggregated deployment's) are
    listed once, where they first appear, and referred to after."""
    docs = _docs(model)
    nested: list[tuple[str, type[BaseModel], int]] = []
    shared: dict[str, list[str]] = {}
    for name, info in model.model_fields.items():
        owner = _owner(model, name)
        first = owners.setdefault(owner, prefix)
        if first != prefix:
            shared.setdefault(first, []).append(name)
            continue
        path = f"{prefix}{name}"
        bounds = _constraints(info)
        kind = _type_name(info.annotation) + (f" ({bounds})" if bounds else "")
        meaning = docs.get(name, "")
        if name == "kind" and not meaning:
            meaning = "Selects this form."
        yield path, kind, _default(info), meaning
        members = _models_in(info.annotation)
        for m in members:
            nested.append((path, m, len(members)))
    whole = not any(_owner(model, n) is not None and owners[_owner(model, n)] == prefix
                    for n in model.model_fields)
    for first, names in shared.items():
        where = first.rstrip(".") or "the top level"
        if whole and len(shared) == 1:
            yield ("", "", "", f"The keys of `{where}`, with the same types, defaults and "
                   "meaning.")
        else:
            yield (f"{prefix}*", "", "", f"the keys of `{where}`: "
                   + ", ".join(f"`{n}`" for n in names) + " (same types, defaults, meaning)")
    for path, m, count in nested:
        if (path, m) in seen:
            continue
        seen.add((path, m))
        tag = _kind_of(m) if count > 1 else None
        head = f"{path} (kind: {tag})" if tag else path
        doc = m.__doc__ or ""
        doc = "" if doc.startswith(m.__name__ + "(") else " ".join(doc.split())
        yield f"### {head}", "", "", doc
        yield from _rows(m, f"{path}.", seen, owners)


def reference_markdown() -> str:
    """docs/reference.md: one table per mapping, in schema order."""
    out = [HEADER]
    sections: list[tuple[str, str, list[str]]] = [("## Top level", "", [])]
    for path, kind, default, meaning in _rows(Scenario, "", set(), {}):
        if path.startswith("### "):
            sections.append((path.replace("### ", "## ", 1), meaning, []))
        elif not path:  # the whole mapping is another's keys
            head, doc, rows = sections[-1]
            sections[-1] = (head, f"{doc} {meaning}".strip(), rows)
        else:
            cell = meaning.replace("|", "\\|")
            sections[-1][2].append(
                f"| `{path}` | {kind.replace('|', chr(92) + '|')} | {default} | {cell} |")
    for head, doc, rows in sections:
        out += [head, ""]
        if doc:
            out += [doc, ""]
        if rows:
            out += ["| key | type | default | meaning |", "|---|---|---|---|", *rows, ""]
    return "\n".join(out).rstrip("\n") + "\n"
