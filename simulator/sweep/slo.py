"""What an SLO is in a sweep: `--slo NAME=SECONDS` and a scenario's `slo:` as results.csv
columns, and why a row of results misses them."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from simulator.errors import InputError
from simulator.sweep.cost import parse_positive_pairs
from simulator.sweep.table import Row, number

_SLO_NAME = re.compile(r"^([a-z0-9]+(?:_[a-z0-9]+)*?)_(p\d{1,2}|mean)_s$")


def slo_column(name: str) -> str:
    """'ttft_p99_s' -> 'ttft_s.p99' (the results.csv column the target bounds)."""
    if "." in name:
        return name
    m = _SLO_NAME.match(name)
    if not m:
        raise InputError(f"--slo {name!r}: expected METRIC_PNN_s=SECONDS, e.g. ttft_p99_s=2 or "
                         f"tpot_p99_s=0.05")
    return f"{m.group(1)}_s.{m.group(2)}"


def parse_slo(items: Sequence[str]) -> dict[str, float]:
    """['ttft_p99_s=2', ...] -> {'ttft_s.p99': 2.0, ...}."""
    form = "NAME=SECONDS with a positive number, e.g. ttft_p99_s=2"
    pairs = parse_positive_pairs(items, "--slo", form)
    return {slo_column(name): limit for name, limit in pairs.items()}


def slo_from_scenario(scenario: Mapping[str, Any] | None) -> dict[str, float]:
    """A scenario's `slo:` block as {results.csv column: seconds}."""
    slo = (scenario or {}).get("slo") or {}
    return {slo_column(k): float(v) for k, v in slo.items() if v is not None}


def slo_failures(row: Row, targets: Mapping[str, float]) -> list[str]:
    """Why a row misses the SLO (empty: it meets it)."""
    why = []
    if row.get("point_status", "ok") != "ok":
        return [f"not simulated ({row.get('point_status')})"]
    if row.get("status", "completed") != "completed":
        why.append(f"run stopped early ({row.get('status')}): overloaded")
    dropped = number(row, "requests_dropped") or 0
    if dropped > 0:
        why.append(f"dropped {dropped:.0f} requests")
    for col, limit in targets.items():
        v = number(row, col)
        if v is None:
            why.append(f"{col} unknown")
        elif v > limit:
            why.append(f"{col} {v:.3g} s > {limit:g} s")
    return why
