"""`frontier sweep --screen`: on every shipped sweep the frontier with the screen equals the
frontier without it; what the screen drops is stored with its reason; the dominance and SLO
rules by hand; points it cannot vouch for are never dropped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from sweep_helpers import REPO

from simulator.cli.app import main
from simulator.sweep import run_sweep
from simulator.sweep.frontier import DEFAULT_X, DEFAULT_Y, frontier_rows
from simulator.sweep.screen import Band, band_classes, plan_screen, point_class
from simulator.sweep.slo import slo_failures, slo_from_scenario
from simulator.sweep.store import make_record
from simulator.sweep.table import read_csv

SWEEPS = sorted((REPO / "scenarios" / "sweeps").glob("*.yaml"))
FORMATS = REPO / "scenarios/sweeps/formats-llama-70b-h100-b200.yaml"
REQUESTS = 60  # per point: enough for the frontier's shape, quick to simulate


def _reduced(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    data["workload"]["num_requests"] = REQUESTS
    return data


def _ids(rows: list[dict[str, Any]]) -> list[Any]:
    return [r["point_id"] for r in rows]


@pytest.fixture(scope="module")
def unscreened(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """results.csv rows of every shipped sweep, simulated point by point."""
    out = {}
    for path in SWEEPS:
        d = tmp_path_factory.mktemp(path.stem)
        run_sweep(_reduced(path), d, workers=2)
        out[path.name] = read_csv(d / "results.csv")[1]
    return out


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_screen_keeps_the_frontier_of_every_shipped_sweep(
        path: Path, unscreened: dict[str, list[dict[str, Any]]], tmp_path: Path) -> None:
    """Dominance only (--screen-ignore-slo): frontier.csv equals the unscreened one. With the
    sweep's SLO: the frontier among points within the SLO equals the unscreened sweep's."""
    full = unscreened[path.name]
    plain = run_sweep(_reduced(path), tmp_path / "plain", workers=2, screen=True,
                      screen_slo=False)
    assert _ids(plain.frontier) == _ids(frontier_rows(full))
    slo = run_sweep(_reduced(path), tmp_path / "slo", workers=2, screen=True)
    targets = slo_from_scenario(_reduced(path))
    assert targets and slo.frontier_slo == targets
    within = [r for r in full if not slo_failures(r, targets)]
    assert _ids(slo.frontier) == _ids(frontier_rows(within))
    # Every point is accounted for: simulated, dropped by the engine, or screened with a reason.
    _, rows = read_csv(tmp_path / "slo" / "results.csv")
    assert len(rows) == len(full)
    screened = [r for r in rows if r["point_status"] == "screened"]
    assert sum(slo.screened.values()) == len(screened)
    assert all(r["point_error"] for r in screened)
    manifest = json.loads((tmp_path / "slo" / "sweep.json").read_text())
    assert manifest["screened"] == dict(slo.screened)


def test_the_screen_drops_points_on_the_shipped_sweeps(tmp_path: Path) -> None:
    """The equality above is not vacuous: the screen rules out points of the shipped sweeps
    (the formats grid's closed loops: overloaded points certainly missing the TTFT target; the
    TP-vs-load grid's open loops: configs certainly dominated). The formats grid's BF16
    configs were screened as dominated too until the bands were remeasured (2026-12-07): its
    closed loops' per-user speed reaches 1.40-1.54x the estimate in the simulation, so no
    config is certainly dominated there."""
    out = run_sweep(_reduced(FORMATS), tmp_path / "formats", workers=2, screen=True)
    assert any("SLO" in r for r in out.screened)
    assert any("screened out" in line for line in out.summary_lines())
    load = run_sweep(_reduced(REPO / "scenarios/sweeps/tp-vs-load-llama-70b-h100.yaml"),
                     tmp_path / "load", workers=2, screen=True)
    assert any("dominated" in r for r in load.screened)


def _est(key: str, x: float, y: float, ttft: float = 0.1, **res: Any) -> Any:
    estimate = {"output_tokens_per_s_per_user.p50": x, "output_tokens_per_s_per_gpu": y,
                "ttft_s.p99": ttft, "tpot_s.p99": 0.01, "tpot_s.p50": 0.01}
    result = {"estimate": estimate, "refused": 0, "stable": True, **res}
    return make_record(key, {}, "estimated", result=result)


AGG = {"deployment": {"kind": "aggregated"}, "workload": {"arrival": {"kind": "poisson"}}}
BANDS = {"aggregated/open": {c: Band(0.9, 1.1) for c in (
    "output_tokens_per_s_per_user.p50", "output_tokens_per_s_per_gpu", "ttft_s.p99",
    "tpot_s.p99")}}


def test_dominance_needs_the_whole_band() -> None:
    """Bands ±10 %: B (100, 100) pessimistic is (90, 90). A at (81, 81) is at most (89.1, 89.1):
    dropped. C at (82, 82) may reach (90.2, 90.2): kept. D beats B on one axis: kept."""
    ests = {"B": _est("B", 100, 100), "A": _est("A", 81, 81), "C": _est("C", 82, 82),
            "D": _est("D", 50, 130)}
    plan = plan_screen([(k, AGG) for k in ests], ests, DEFAULT_X, DEFAULT_Y, {}, BANDS)
    assert set(plan.dropped) == {"A"} and "dominated" in plan.dropped["A"]


def test_slo_misses_and_what_is_never_dropped() -> None:
    """TTFT target 1 s, band ±10 %: an estimate of 1.2 s is at least 1.08 s, a certain miss;
    1.1 s may be 0.99 s, kept. A class without a band, a point whose requests the engine
    refuses, a failed estimate: never dropped, even when far worse."""
    ests = {"B": _est("B", 100, 100), "miss": _est("miss", 200, 200, ttft=1.2),
            "maybe": _est("maybe", 200, 200, ttft=1.1),
            "refused": _est("refused", 1, 1, refused=3),
            "nobands": _est("nobands", 1, 1),
            "failed": make_record("failed", {}, "estimate_failed", error="x")}
    pts = [(k, AGG) for k in ests if k != "nobands"]
    pts.append(("nobands", {"deployment": {"kind": "disaggregated"},
                            "workload": {"arrival": {"kind": "poisson"}}}))
    plan = plan_screen(pts, ests, DEFAULT_X, DEFAULT_Y, {"ttft_s.p99": 1.0}, BANDS)
    assert set(plan.dropped) == {"miss"} and "misses the SLO" in plan.dropped["miss"]
    assert plan.unbanded == 1


def test_a_dominator_must_certainly_meet_the_slo() -> None:
    """Within an SLO the frontier is the one among points meeting it: B (TTFT 0.95 s, may be
    1.05 s) cannot vouch for it, so A stays although B dominates it by far."""
    ests = {"B": _est("B", 100, 100, ttft=0.95), "A": _est("A", 10, 10, ttft=0.1)}
    plan = plan_screen([(k, AGG) for k in ests], ests, DEFAULT_X, DEFAULT_Y,
                       {"ttft_s.p99": 1.0}, BANDS)
    assert plan.dropped == {}


def test_point_classes() -> None:
    assert point_class(AGG) == "aggregated/open"
    short = {**AGG, "workload": {"arrival": {"kind": "poisson"}, "num_requests": 60}}
    assert point_class(short, stable=False) == "aggregated/open/overloaded/short"
    assert point_class({"deployment": {"pipeline_parallel": 2},
                        "workload": {"arrival": {"kind": "closed_loop"}}}) == "pipeline/closed"


def test_load_buckets() -> None:
    """A stable open-loop run of 500+ requests is judged by its load bucket's band first (offered
    rate / capacity: light < 0.5 <= moderate < 0.8 <= knee), then by its class's band; an
    overloaded, short, closed-loop or unknown-load point by its class's band alone."""
    assert band_classes(AGG, True, 0.3) == ["aggregated/open/light", "aggregated/open"]
    assert band_classes(AGG, True, 0.5) == ["aggregated/open/moderate", "aggregated/open"]
    assert band_classes(AGG, True, 0.95) == ["aggregated/open/knee", "aggregated/open"]
    assert band_classes(AGG, False, 1.5) == ["aggregated/open/overloaded"]
    assert band_classes(AGG, True, None) == ["aggregated/open"]
    short = {**AGG, "workload": {"arrival": {"kind": "poisson"}, "num_requests": 60}}
    assert band_classes(short, True, 0.3) == ["aggregated/open/short"]
    closed = {"workload": {"arrival": {"kind": "closed_loop"}}}
    assert band_classes(closed, True, 0.3) == ["aggregated/closed"]


def test_a_narrower_bucket_band_drops_more() -> None:
    """Class band ±10 %: B (100, 100) is at worst (90, 90), A (85, 85) at best (93.5, 93.5):
    kept. With light-load bands ±2 % B is at worst (98, 98) and A at best (86.7, 86.7): dropped.
    U (95, 95) of unknown load is judged by the class band, at best (104.5, 104.5): kept (its
    light-load best, 96.9, would have lost)."""
    light = {"aggregated/open/light": {c: Band(0.98, 1.02) for c in BANDS["aggregated/open"]}}
    ests = {"B": _est("B", 100, 100, load=0.3), "A": _est("A", 85, 85, load=0.3),
            "U": _est("U", 95, 95)}
    pts = [(k, AGG) for k in ests]
    assert plan_screen(pts, ests, DEFAULT_X, DEFAULT_Y, {}, BANDS).dropped == {}
    plan = plan_screen(pts, ests, DEFAULT_X, DEFAULT_Y, {}, {**BANDS, **light})
    assert set(plan.dropped) == {"A"}


def test_resume_without_the_screen_runs_the_screened_points(tmp_path: Path) -> None:
    data = _reduced(FORMATS)
    first = run_sweep(data, tmp_path, workers=2, screen=True)
    n = sum(first.screened.values())
    assert n > 0
    again = run_sweep(data, tmp_path, workers=2, resume=True)
    assert again.ran == n and not again.screened


def test_screen_flags_are_checked(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    sweep = str(REPO / "scenarios/sweeps/tp-vs-load-llama-70b-h100.yaml")
    for args in (["sweep", sweep, "--out", str(tmp_path), "--screen-ignore-slo"],
                 ["bench-sweep", "--screen-only"],
                 ["sweep", sweep, "--out", str(tmp_path / "e"), "--screen", "--x", "energy"]):
        with pytest.raises(SystemExit) as exc:
            main(args)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("frontier: ")
