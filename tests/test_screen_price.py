"""A screen that never hides the winner (issue 31, item 2): `sweep --screen` prunes points
dominated in tokens/s per GPU x tokens/s per user, which says nothing about price; judged at
their searched capacities, the screened points are ranked too, so for any prices the screened
and the full sweep recommend the same config, the same copies and the same cost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.report.sweep_report import load_sweep_dir
from simulator.sweep import run_sweep
from simulator.sweep.capacity import sweep_capacities
from simulator.sweep.recommend import format_recommendation, recommend

TARGETS = {"ttft_s.p99": 1.0, "tpot_s.p99": 0.03}
SWEEP: dict[str, Any] = {
    "schema_version": 1, "name": "screen vs price", "model": "llama-3.1-8b",
    "hardware": {"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": 1},
    "deployment": {"tensor_parallel": 1},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 4},
                 "input_tokens": {"kind": "fixed", "value": 800},
                 "output_tokens": {"kind": "fixed", "value": 200},
                 "num_requests": 200, "seed": 0},
    "slo": {"ttft_p99_s": 1.0, "tpot_p99_s": 0.03},
    "sweep": {"hardware.gpu": ["h100-sxm", "b200"], "deployment.tensor_parallel": [1, 2],
              "workload.arrival.rate_per_s": [4, 16],
              "zip": [{"deployment.precision.weights": ["bf16", "fp8"],
                       "deployment.precision.activations": ["bf16", "fp8"]}]},
}


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, screen in (("full", False), ("screened", True)):
        d = tmp_path_factory.mktemp(name)
        run_sweep(SWEEP, d, workers=1, screen=screen)
        _, rows, _ = load_sweep_dir(d)
        out[name] = (d, rows, sweep_capacities(rows, d, TARGETS))
    return out


def test_the_screen_rules_points_out(sweeps: dict[str, Any]) -> None:
    _, rows, _ = sweeps["screened"]
    assert sum(r.get("point_status") == "screened" for r in rows) >= 1


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(h100=st.floats(0.5, 12.0), b200=st.floats(0.5, 25.0), rate=st.floats(1.0, 300.0))
def test_screened_and_full_sweeps_recommend_alike_at_any_price(
        sweeps: dict[str, Any], h100: float, b200: float, rate: float) -> None:
    prices = {"h100-sxm": h100, "b200": b200}
    picks = []
    for name in ("full", "screened"):
        d, rows, caps = sweeps[name]
        rec = recommend(rows, TARGETS, sweep_dir=d, rate=rate, prices=prices, capacities=caps)
        w = rec.winner
        assert w is not None
        picks.append((w.row["point_id"], w.copies, round(w.usd_per_hour or 0.0, 9)))
    assert picks[0] == picks[1]


def test_without_the_search_recommend_says_what_the_screen_hid(sweeps: dict[str, Any]) -> None:
    d, rows, _ = sweeps["screened"]
    rec = recommend(rows, TARGETS, sweep_dir=d)
    text = "\n".join(format_recommendation(rec, ["hardware.gpu"], Path(d)))
    assert rec.screened >= 1
    assert f"{rec.screened} points were screened out by the sweep's estimate" in text
