"""The screen's rule is sound for any grid: whatever the estimates and loads, if every
simulated value lies within the band that judges it (band_classes), the frontier of the
points the screen keeps equals the frontier of the whole grid (within the SLO when the screen
drops SLO misses)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.sweep.frontier import DEFAULT_X, DEFAULT_Y, frontier_rows
from simulator.sweep.screen import PREDICTED, Band, band_classes, plan_screen
from simulator.sweep.slo import slo_failures
from simulator.sweep.store import make_record

AGG = {"deployment": {"kind": "aggregated"}, "workload": {"arrival": {"kind": "poisson"}}}
PIPE = {"deployment": {"pipeline_parallel": 2}, "workload": {"arrival": {"kind": "poisson"}}}
# Classes with bands; pipeline/open/knee and the overloaded pipeline have none (never dropped).
CLASSES = ("aggregated/open", "aggregated/open/light", "aggregated/open/moderate",
           "aggregated/open/knee", "aggregated/open/overloaded", "pipeline/open",
           "pipeline/open/light")


def _band() -> st.SearchStrategy[Band]:
    return st.tuples(st.floats(0.3, 1.0), st.floats(1.0, 3.0)).map(lambda t: Band(*t))


@st.composite
def grids(draw: st.DrawFn) -> tuple[Any, ...]:
    """Bands per class and metric; points with estimates and loads; each simulated value inside
    the band of the class that judges its point (the first of band_classes with a band)."""
    bands = {cls: {c: draw(_band()) for c in PREDICTED} for cls in CLASSES}
    n = draw(st.integers(1, 40))
    points, estimates, rows = [], {}, []
    value = st.floats(1e-3, 1e4, allow_nan=False, allow_infinity=False)
    for i in range(n):
        key = f"p{i}"
        scenario = draw(st.sampled_from([AGG, PIPE]))
        stable = draw(st.booleans())
        load = draw(st.sampled_from([None, 0.2, 0.6, 0.9, 1.3]))
        classes = [c for c in band_classes(scenario, stable, load) if c in bands]
        est = {c: draw(value) for c in PREDICTED}
        # Where the simulation lands in the band that judges it (the most specific class's;
        # a tail metric's: the widest class's): either end or anywhere between (a point
        # without a band at all: anywhere, and the screen must keep it).
        sim = {}
        for c in PREDICTED:
            judge = (classes[-1:] if c in ("ttft_s.p99", "tpot_s.p99") else classes[:1])
            b = bands[judge[0]][c] if judge else Band(0.01, 100.0)
            sim[c] = est[c] * draw(st.sampled_from([b.lo, b.hi]) | st.floats(b.lo, b.hi))
        points.append((key, scenario))
        estimates[key] = make_record(key, {}, "estimated", result={
            "estimate": est, "refused": 0, "stable": stable, "load": load})
        rows.append({"point_id": key, "point_status": "ok", **sim})
    targets = draw(st.sampled_from([{}, {"ttft_s.p99": 1.0}, {"ttft_s.p99": 1.0,
                                                            "tpot_s.p99": 0.05}]))
    return bands, points, estimates, rows, targets


@settings(max_examples=300, deadline=None)
@given(grids())
def test_the_screen_never_drops_a_frontier_point(grid: tuple[Any, ...]) -> None:
    bands, points, estimates, rows, targets = grid
    plan = plan_screen(points, estimates, DEFAULT_X, DEFAULT_Y, targets, bands)
    kept = [r for r in rows if r["point_id"] not in plan.dropped]
    for r in rows:
        if r["point_id"] in plan.dropped and "SLO" in plan.dropped[r["point_id"]]:
            assert slo_failures(r, targets), r  # an SLO drop really misses the SLO
    within = [r for r in rows if not slo_failures(r, targets)]
    kept_within = [r for r in kept if not slo_failures(r, targets)]
    ids = [r["point_id"] for r in frontier_rows(within)]
    assert [r["point_id"] for r in frontier_rows(kept_within)] == ids
