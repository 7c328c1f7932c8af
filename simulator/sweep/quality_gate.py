"""The `max_quality_drop_pct` constraint: a point passes when its published quality drop is
within the limit. A point whose quality is `unknown` never passes, since no one can say it
meets the limit; sweeps drop it before simulating, `recommend` lists it with that reason."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from simulator.errors import InputError
from simulator.quality.lookup import Quality, lookup_quality, worst

KEY = "max_quality_drop_pct"
UNKNOWN_REASON = f"quality unknown (nothing published): excluded under {KEY}"


def parse_limit(raw: Any, where: str) -> float | None:
    """The limit in percent (a drop of 1 means scores 1 % lower than the checkpoint's)."""
    if raw is None:
        return None
    bad = isinstance(raw, bool) or not isinstance(raw, int | float)
    if bad or not math.isfinite(float(raw)) or float(raw) < 0:
        raise InputError(f"{where}: {KEY}={raw!r} must be a number of percent >= 0, e.g. 1.0")
    return float(raw)


def scenario_quality(scenario: Mapping[str, Any]) -> Quality:
    """Quality of a validated scenario dict (a grid point), prefill and decode pools apart."""
    dep = scenario.get("deployment") or {}
    pools = [dep[k] for k in ("prefill", "decode") if isinstance(dep.get(k), Mapping)] or [dep]
    model = str(scenario.get("model", ""))
    found = []
    for pool in pools:
        p = pool.get("precision") or {}
        found.append(lookup_quality(model, p.get("weights", "bf16"),
                                    p.get("activations", "bf16"), p.get("kv_cache", "bf16")))
    return worst(found)


def _failure(basis: str, delta: float | None, limit: float) -> str | None:
    if basis == "unknown" or delta is None:
        return UNKNOWN_REASON
    if -delta > limit + 1e-9:
        return f"quality drop {-delta:.3g} % > {KEY} {limit:g} %"
    return None


def point_failure(scenario: Mapping[str, Any], limit: float | None) -> str | None:
    """Why a grid point fails the constraint (None: it passes or there is no limit)."""
    if limit is None:
        return None
    q = scenario_quality(scenario)
    return _failure(q.basis, q.delta_pct, limit)


def row_failures(basis: str | None, delta_pct: float | None, limit: float | None) -> list[str]:
    """Why a results row (its quality.basis and quality.delta_pct columns) fails it."""
    if limit is None:
        return []
    why = _failure(basis or "unknown", delta_pct, limit)
    return [why] if why else []
