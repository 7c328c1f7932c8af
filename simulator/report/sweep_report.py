"""The HTML report of a sweep folder (results.csv, sweep.json, points/)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from simulator.errors import InputError
from simulator.report.format_report import format_section
from simulator.report.page import Section, facts_table, render_page
from simulator.report.pool_report import pool_section
from simulator.report.sweep_figures import (
    breakdown_figure,
    choose_color_key,
    frontier_figure,
    latency_figure,
    split_figure,
)
from simulator.safeio import write_atomic
from simulator.sweep.frontier import DEFAULT_X, DEFAULT_Y, Axis, frontier_rows
from simulator.sweep.table import Row, read_csv, swept_columns, value_label

MAX_BREAKDOWN_POINTS = 6
T = TypeVar("T")


def step_breakdown(scenario: str | Path | Mapping[str, Any]) -> dict[str, float]:
    """Mean seconds per engine step by kind, from a rerun with the time series on."""
    import numpy as np

    import simulator
    from simulator.serving.simulation import TIMESERIES_COLUMNS

    result = simulator.simulate(simulator.load_scenario(scenario), timeseries=True)
    ts = result.timeseries
    if ts is None or ts.size == 0:
        return {}
    out = {}
    for col in ("step_time_s", "compute_s", "memory_s", "communication_s", "overhead_s",
                "host_s"):
        out[col] = float(np.mean(ts[:, TIMESERIES_COLUMNS.index(col)]))
    return out


def spread(items: Sequence[T], k: int) -> list[T]:
    """Up to k items evenly spaced along a sequence, both ends included."""
    if len(items) <= k:
        return list(items)
    idx = sorted({round(i * (len(items) - 1) / (k - 1)) for i in range(k)})
    return [items[i] for i in idx]


def load_sweep_dir(sweep_dir: Path) -> tuple[list[str], list[Row], dict[str, Any]]:
    """Columns, rows and manifest of a finished sweep folder."""
    results = sweep_dir / "results.csv"
    if not results.is_file():
        raise InputError(f"{sweep_dir}: no results.csv here; run `frontier sweep FILE --out "
                         f"{sweep_dir}` first")
    columns, rows = read_csv(results)
    manifest: dict[str, Any] = {}
    mpath = sweep_dir / "sweep.json"
    if mpath.is_file():
        try:
            manifest = json.loads(mpath.read_text())
        except json.JSONDecodeError:
            manifest = {}
    if not isinstance(manifest.get("axes"), list):
        manifest["axes"] = swept_columns(columns)
    return columns, rows, manifest


def _label(row: Row, axes: Sequence[str]) -> str:
    return ", ".join(f"{a.split('.')[-1]}={value_label(row.get(a))}" for a in axes) or str(
        row["point_id"])


def write_sweep_report(sweep_dir: Path, html_path: Path, *, x: Axis = DEFAULT_X,
                       y: Axis = DEFAULT_Y, color_by: str | None = None,
                       breakdown: bool = True) -> Path:
    """Write the report of a sweep folder to `html_path` (atomically); return the path."""
    _, rows, manifest = load_sweep_dir(sweep_dir)
    axes: list[str] = list(manifest["axes"])
    ok = [r for r in rows if r.get("point_status") == "ok"]
    front = _report_frontier(rows, manifest, x, y)
    facts = _summary_facts(rows, ok, axes, manifest, front) + _slo_cost_facts(sweep_dir, ok)
    sections = [Section("Summary", "", html_body=facts_table(facts))]
    if ok:
        sections += _result_sections(rows, ok, axes, x, y, color_by)
        chart = _breakdown_section(sweep_dir, front, axes) if breakdown else None
        if chart is not None:
            sections.append(chart)
    else:
        sections.append(Section("No results", "No point of this sweep simulated successfully."))
    page = render_page(f"Sweep report: {Path(str(manifest.get('source', sweep_dir))).name}",
                       "Predicted by the frontier simulator (analytical roofline costs in a "
                       "discrete-event serving simulation); no GPU was used.", sections)
    write_atomic(html_path, page)
    return html_path


def _report_frontier(rows: list[Row], manifest: Mapping[str, Any], x: Axis, y: Axis) -> list[Row]:
    """The frontier the report draws: of all points, or, when a screened sweep ruled out SLO
    misses, of the points within the SLO."""
    within = manifest.get("frontier_within_slo") or {}
    if within:
        from simulator.sweep.slo import slo_failures

        return frontier_rows([r for r in rows if not slo_failures(r, within)], x, y)
    return frontier_rows(rows, x, y)


def _slo_cost_facts(sweep_dir: Path, ok: list[Row]) -> list[tuple[str, str]]:
    """The sweep's SLO (its scenario's `slo:`) with how many points meet it, and the cost
    column's range where a price was known."""
    from simulator.sweep.slo import slo_failures, slo_from_scenario
    from simulator.sweep.store import point_scenario
    from simulator.sweep.table import COST_COLUMN, number

    facts: list[tuple[str, str]] = []
    scenario = point_scenario(sweep_dir, str(ok[0]["point_id"])) if ok else None
    targets = slo_from_scenario(scenario)
    if targets:
        meet = sum(not slo_failures(r, targets) for r in ok)
        facts.append(("SLO", ", ".join(f"{k} <= {v:g} s" for k, v in targets.items())
                      + f" (met by {meet} of {len(ok)} simulated points at their load)"))
    costs = [c for c in (number(r, COST_COLUMN) for r in ok) if c is not None]
    if costs:
        facts.append(("cost", f"${min(costs):.3g} to ${max(costs):.3g} per million output "
                              f"tokens at the points' loads ({len(costs)} priced points)"))
    return facts


def _summary_facts(rows: list[Row], ok: list[Row], axes: Sequence[str],
                   manifest: Mapping[str, Any], front: list[Row]) -> list[tuple[str, str]]:
    """The summary table: sweep file, swept keys, points simulated and crashed, frontier
    size, and the points dropped or screened out, most common reason first."""
    facts = [
        ("sweep file", str(manifest.get("source", "?"))),
        ("swept keys", ", ".join(axes) or "(none)"),
        ("grid points", str(manifest.get("grid_size", len(rows)))),
        ("simulated", f"{len(ok)} ok, "
                      f"{sum(r.get('point_status') == 'error' for r in rows)} crashed"),
        ("frontier points", str(len(front))),
    ]
    for reason, n in sorted(manifest.get("dropped", {}).items(), key=lambda kv: -kv[1]):
        facts.append(("dropped", f"{n}: {reason}"))
    for reason, n in sorted(manifest.get("screened", {}).items(), key=lambda kv: -kv[1]):
        facts.append(("screened out (not simulated)", f"{n}: {reason}"))
    return facts


def _result_sections(rows: list[Row], ok: list[Row], axes: list[str], x: Axis, y: Axis,
                     color_by: str | None) -> list[Section]:
    """The figures of a sweep with results: the frontier, the frontier split by one swept key,
    by number format, latency against load, and the disaggregated pools where swept."""
    sections = [Section(
        "Frontier",
        f"Each dot is one simulated config; the line joins the points that no other point "
        f"beats on both {y.label} and {x.label}. Hover for the config.",
        frontier_figure(rows, axes, x, y),
    )]
    if color_by is not None and color_by not in axes:
        raise InputError(f"--color-by {color_by!r} is not a swept key ({', '.join(axes)})")
    key = color_by or choose_color_key(ok, axes)
    if key is not None:
        sections.append(Section(
            f"Frontier by {key}",
            f"The same points coloured by {key}, each value with its own frontier: where "
            "the lines cross, the better choice changes.",
            split_figure(rows, axes, key, x, y),
        ))
    by_format = format_section(rows, axes, x, y)
    if by_format is not None:
        sections.append(by_format)
    sections.append(Section(
        "Latency against load",
        "TTFT and TPOT percentiles against the achieved request rate, one colour per "
        "config (the swept keys other than the load). A knee marks the load the config "
        "can no longer keep up with.",
        latency_figure(rows, axes, y),
    ))
    pools = pool_section(rows, axes)
    if pools is not None:
        sections.append(pools)
    return sections


def _breakdown_section(sweep_dir: Path, front: list[Row], axes: Sequence[str]) -> Section | None:
    """Step-time breakdown of up to MAX_BREAKDOWN_POINTS frontier points spread along it, from
    reruns of their scenario files; None when none of them can be rerun."""
    items = []
    for r in spread(front, MAX_BREAKDOWN_POINTS):
        path = sweep_dir / "points" / f"{r['point_id']}.yaml"
        if path.is_file():
            parts = step_breakdown(path)
            if parts:
                items.append((_label(r, axes), parts))
    if not items:
        return None
    return Section(
        "Step-time breakdown",
        "Mean time of one engine step for frontier points, split into the GPU time "
        "bound by compute, by HBM traffic, by communication, by fixed kernel costs, and "
        "the host (CPU) time the engine adds.",
        breakdown_figure(items),
    )
