"""Provenance of fitted and assumed numbers in data files (hardware profiles, engine styles).

A `provenance:` mapping sits beside the values it describes, keyed by each value's key path
("efficiency.hbm_bandwidth_fraction", "gemm_classes.dense.compute_fraction.int8",
"cpu_step_us"). Each entry says what kind of number it is (`status`), and, for a fitted one,
what data it was fitted to (`fitted_to`, structured so tests can check that no validation row
scores data a value was fitted to). The values themselves stay where they were: provenance is
read by tests and reports only, never by the cost model.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Mapping
from difflib import get_close_matches
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, model_validator

from simulator.hardware.spec_base import StrictSpec

# datasheet: a published specification taken as printed; kernel-fit: fitted to kernel or
# microbenchmark measurements; silicon-fit: fitted to measured runs of a whole serving system;
# assumed: no measurement behind it (copied from another chip or engine, or a judgement).
Status = Literal["datasheet", "kernel-fit", "silicon-fit", "assumed"]
FITTED: frozenset[str] = frozenset({"kernel-fit", "silicon-fit"})

Text = Annotated[str, Field(min_length=1)]




class FitSource(StrictSpec):
    """One body of data a value was fitted to: a file of the shared reference set
    ("reference/kernel_microbenchmarks.csv", rows written "gpu | benchmark | size") or a named
    published source (a repository, paper or artifact), with the rows, files or figures of it
    that the fit used (empty: all of it)."""

    source: Text
    rows: list[Text] = Field(default_factory=list)


class ProvenanceEntry(StrictSpec):
    status: Status
    fitted_to: list[FitSource] | None = None
    note: Text  # where the number comes from, in a sentence (the arithmetic stays in comments)

    @model_validator(mode="after")
    def _fitted_names_its_data(self) -> ProvenanceEntry:
        if self.status in FITTED and not self.fitted_to:
            raise ValueError(f"status {self.status} needs fitted_to (the data it was fitted to)")
        if self.status == "datasheet" and self.fitted_to is not None:
            raise ValueError("status datasheet takes no fitted_to (a published figure)")
        return self


Provenance = dict[str, ProvenanceEntry]


def _unwrap(tp: Any) -> list[Any]:
    """The alternatives of a field type, without Annotated, Optional and None."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        out: list[Any] = []
        for arg in typing.get_args(tp):
            out.extend(_unwrap(arg))
        return out
    return [] if tp is type(None) else [tp]


def schema_paths(
    model: type[BaseModel], prefix: str = "", skip: Iterable[str] = ("source",)
) -> frozenset[str]:
    """Every key path a provenance entry may name under `model`: its value fields, nested
    blocks' fields, and a format mapping's keys (the mapping itself names all of them)."""
    skipped = set(skip)
    found: set[str] = set()
    for name, field in model.model_fields.items():
        if name in skipped:
            continue
        path = f"{prefix}{name}"
        for tp in _unwrap(field.annotation):
            if isinstance(tp, type) and issubclass(tp, BaseModel):
                found |= schema_paths(tp, f"{path}.", ("source",))
            elif typing.get_origin(tp) is dict:
                found.add(path)
                for key in _unwrap(typing.get_args(tp)[0]):
                    if typing.get_origin(key) is Literal:
                        found.update(f"{path}.{k}" for k in typing.get_args(key))
            else:
                found.add(path)
    return frozenset(found)


def check_keys(provenance: Provenance | None, known: frozenset[str], what: str) -> None:
    """Refuse a key path that names no value of the schema, with the nearest valid one."""
    for key in provenance or {}:
        if key not in known:
            near = get_close_matches(key, sorted(known), n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise ValueError(
                f"provenance key {key!r} names no value; {hint}valid: the key path of a "
                f"{what} value, e.g. {sorted(known)[0]!r}"
            )


def _is_number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def numeric_paths(doc: Mapping[str, Any], blocks: Iterable[str] | None = None) -> list[str]:
    """Key paths of the numbers a raw data document holds (under `blocks`, or everywhere):
    a number, a list of numbers, or each number of a mapping (by its key)."""
    out: list[str] = []

    def walk(node: Any, path: str) -> None:
        numbers = isinstance(node, list) and node and all(_is_number(x) for x in node)
        if _is_number(node) or numbers:
            out.append(path)
        elif isinstance(node, Mapping):
            for k, v in node.items():
                if k not in ("source", "provenance"):
                    walk(v, f"{path}.{k}" if path else str(k))

    for key in blocks if blocks is not None else list(doc):
        if key in doc and key not in ("provenance", "schema_version"):
            walk(doc[key], str(key))
    return out


def entry_for(provenance: Mapping[str, Any], path: str) -> Any | None:
    """The most specific entry covering `path` (the path itself, else its nearest parent)."""
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in provenance:
            return provenance[key]
    return None
