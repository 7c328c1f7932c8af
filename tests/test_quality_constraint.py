"""The max_quality_drop_pct constraint: sweeps drop the points it fails before simulating,
recommend never picks a config whose quality is unknown under it, and says so."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from sweep_helpers import SMALL_SWEEP

from simulator.errors import InputError
from simulator.sweep import expand, load_sweep
from simulator.sweep.recommend import format_recommendation, recommend


def _formats_sweep(limit: Any) -> dict[str, Any]:
    data = copy.deepcopy(SMALL_SWEEP)
    data["model"] = "deepseek-r1"  # the only catalog model with a published NVFP4 figure
    data["hardware"] = {"gpu": "b200", "gpus_per_node": 8}
    data["deployment"] = {"tensor_parallel": 8}
    data["sweep"] = {"zip": [{"deployment.precision.weights": ["fp8", "nvfp4", "mxfp4"],
                              "deployment.precision.activations": ["fp8", "nvfp4", "mxfp4"]}]}
    data["max_quality_drop_pct"] = limit
    return data


def test_sweep_drops_points_by_quality() -> None:
    # fp8: the checkpoint (drop 0); nvfp4: -0.459 % (card mean); mxfp4: nothing published.
    ex = expand(load_sweep(_formats_sweep(1.0)))
    assert [p.values["deployment.precision.weights"] for p in ex.points] == ["fp8", "nvfp4"]
    assert sum("quality unknown" in r for r in ex.dropped) == 1
    # a limit of 0.3 % also drops NVFP4 (0.459 % > 0.3 %)
    ex = expand(load_sweep(_formats_sweep(0.3)))
    assert [p.values["deployment.precision.weights"] for p in ex.points] == ["fp8"]
    assert any("quality drop above" in r for r in ex.dropped)
    # no limit: all three run
    ex = expand(load_sweep(_formats_sweep(None)))
    assert len(ex.points) == 3


@pytest.mark.parametrize("bad", [-1, "one", True])
def test_bad_limit_is_one_line(bad: Any) -> None:
    with pytest.raises(InputError, match="max_quality_drop_pct"):
        load_sweep(_formats_sweep(bad))


def _row(pid: str, rps: float, delta: float | None, basis: str) -> dict[str, Any]:
    return {"point_id": pid, "point_status": "ok", "status": "completed", "requests_dropped": 0,
            "requests_per_s": rps, "num_gpus": 1, "ttft_s.p99": 1.0,
            "quality.delta_pct": delta, "quality.basis": basis}


def test_recommend_never_picks_unknown_quality_under_the_constraint() -> None:
    rows = [_row("fast_unknown", 9.0, None, "unknown"), _row("lossy", 8.0, -2.0, "measured"),
            _row("good", 5.0, -0.2, "family")]
    targets = {"ttft_s.p99": 2.0}
    assert recommend(rows, targets).ranked[0].row["point_id"] == "fast_unknown"
    rec = recommend(rows, targets, max_quality_drop_pct=1.0)
    assert [c.row["point_id"] for c in rec.ranked] == ["good"]
    why = dict((r["point_id"], w) for r, w in rec.failing)
    assert "quality unknown" in why["fast_unknown"][0]
    assert why["lossy"] == ["quality drop 2 % > max_quality_drop_pct 1 %"]
    text = "\n".join(format_recommendation(rec, [], None))
    assert "1 points excluded because their quality is unknown" in text
    assert "quality -0.20 % (family)" in text


def test_shipped_format_sweep_covers_both_gpus_and_every_format() -> None:
    from sweep_helpers import REPO

    ex = expand(load_sweep(REPO / "scenarios/sweeps/formats-llama-70b-h100-b200.yaml"))
    combos = {(p.values["hardware.gpu"], p.values["deployment.precision.weights"],
               p.values["deployment.precision.kv_cache"]) for p in ex.points}
    assert combos == {(g, w, kv) for g in ("h100-sxm", "b200")
                      for w in ("bf16", "fp8", "nvfp4", "mxfp4") for kv in ("bf16", "fp8")}
