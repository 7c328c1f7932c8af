"""Sweep rows: one flat dict per point (the columns of results.csv), written and read back.

Columns: `point_id` (the key of `points/<key>.yaml`), `point_status` (ok | dropped | error |
screened), `point_error` (for a screened point, the screen's reason; its estimate follows in
`estimate.*` columns), then the swept values under their key paths, then every result key flattened
with dots (`ttft_s.p99`), then the derived `usd_per_million_output_tokens` and
`energy_j_per_output_token`.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from simulator.safeio import write_atomic
from simulator.sweep.cost import (
    energy_j_per_output_token,
    mean_board_power_w,
    mean_price_per_gpu_hour,
    usd_per_million_output_tokens,
)
from simulator.sweep.grid import Point
from simulator.sweep.store import Record

Row = dict[str, Any]
ID_COLUMNS = ("point_id", "point_status", "point_error")
COST_COLUMN = "usd_per_million_output_tokens"
ENERGY_COLUMN = "energy_j_per_output_token"
DERIVED_COLUMNS = (COST_COLUMN, ENERGY_COLUMN)


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'ttft_s': {'p99': 1.0}} -> {'ttft_s.p99': 1.0}; lists become '; '-joined text."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        elif isinstance(value, list | tuple):
            out[name] = "; ".join(str(v) for v in value)
        else:
            out[name] = value
    return out


def number(row: Mapping[str, Any], column: str) -> float | None:
    """A finite float from a row, or None (missing, empty, text, NaN)."""
    value = row.get(column)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def build_rows(
    points: Sequence[Point], records: Mapping[str, Record], prices: Mapping[str, float]
) -> list[Row]:
    """One row per point that has a record, in grid order, with cost and energy derived."""
    rows: list[Row] = []
    for p in points:
        rec = records.get(p.key)
        if rec is None:
            continue
        row: Row = {
            "point_id": p.key,
            "point_status": rec["point_status"],
            "point_error": rec.get("error"),
        }
        row.update(p.values)
        if rec["point_status"] == "screened":  # ruled out by the closed-form estimate
            row["point_error"] = rec.get("reason")
            row.update({f"estimate.{k}": v for k, v in (rec.get("result") or {}).items()})
        if rec["point_status"] == "ok" and rec.get("result"):
            result = flatten(rec["result"] or {})
            row.update(result)
            gpus = number(row, "num_gpus") or 0.0
            tps = number(row, "output_tokens_per_s") or 0.0
            row[COST_COLUMN] = usd_per_million_output_tokens(
                gpus, mean_price_per_gpu_hour(p.scenario, prices), tps
            )
            row[ENERGY_COLUMN] = energy_j_per_output_token(
                mean_board_power_w(p.scenario), gpus, number(row, "gpu_busy_fraction"), tps
            )
        rows.append(row)
    return rows


def columns_of(rows: Iterable[Row], axes: Sequence[str]) -> list[str]:
    """ID columns, swept paths, result keys in first-seen order, derived columns last."""
    cols: dict[str, None] = dict.fromkeys([*ID_COLUMNS, *axes])
    derived: dict[str, None] = {}
    for row in rows:
        for k in row:
            if k in DERIVED_COLUMNS:
                derived[k] = None
            elif k not in cols:
                cols[k] = None
    return [*cols, *(c for c in DERIVED_COLUMNS if c in derived)]


# Short names of the keys of mapping-valued axes (precision, speculative) in labels.
_SHORT_KEYS = {"weights": "w", "activations": "a", "kv_cache": "kv",
               "num_speculative_tokens": "k", "acceptance_length": "tau"}


def value_label(value: Any) -> str:
    """A swept value as a short label for tables and legends: a mapping whose set values all
    agree reads as that value ({weights: fp8, activations: fp8, kv_cache: fp8} -> 'fp8'); one
    with a `method` or `kind` leads with it ('eagle3 k=3 tau=2.5'); others as 'w=fp8 kv=bf16';
    None (an axis value that switches a feature off) as 'none'."""
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:.4g}"
    if not isinstance(value, Mapping):
        return str(value)
    items = {k: v for k, v in value.items() if v is not None}
    if items and len({json.dumps(v, sort_keys=True) for v in items.values()}) == 1:
        return value_label(next(iter(items.values())))
    head = [value_label(items.pop(k)) for k in ("method", "kind") if k in items]
    rest = [f"{_SHORT_KEYS.get(k, k)}={value_label(v)}" for k, v in items.items()]
    return " ".join(head + rest) or "{}"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


def to_csv(rows: Sequence[Row], columns: Sequence[str]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for row in rows:
        w.writerow([_cell(row.get(c)) for c in columns])
    return buf.getvalue()


def write_csv(path: Path, rows: Sequence[Row], columns: Sequence[str]) -> None:
    write_atomic(path, to_csv(rows, columns))


def parse_cell(text: str) -> Any:
    """Inverse of the CSV cell format: '' -> None, numbers, true/false, JSON, else text."""
    if text == "":
        return None
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        pass
    if text[:1] in "[{":
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text
    return text


def read_csv(path: Path) -> tuple[list[str], list[Row]]:
    """Columns and rows of a results.csv written by `write_csv`."""
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            return [], []
        rows = [
            {c: _id_cell(v) if c in ID_COLUMNS else parse_cell(v)
             for c, v in zip(header, line, strict=False)}
            for line in reader
        ]
    return header, rows


def _id_cell(text: str) -> str | None:
    """A point's ID, status or error cell stays text: a hex ID such as '12e4...' or
    '0042...' would otherwise read back as a number."""
    return text or None


def swept_columns(columns: Sequence[str], result_start: str = "requests_completed") -> list[str]:
    """The swept key paths of a results.csv header: between the ID and the result columns."""
    out = []
    for c in columns:
        if c in ID_COLUMNS:
            continue
        if c == result_start:
            break
        out.append(c)
    return out
