"""Validation rows read off concurrency sweeps (validation/sweep_rows.py): the Pareto frontier,
the throughput it gives at a per-user speed target, and the Dynamo rows' physics."""

from __future__ import annotations

import itertools

import pytest

import simulator
from simulator.sweep.frontier import pareto_front, throughput_at_speed
from simulator.validation.rows import load_rows
from simulator.validation.sweep_rows import (
    SWEEP_METRIC,
    _spec,
    at_concurrency,
    side_points,
    sweep_rows,
)

# (tokens/s per user, tokens/s per GPU): (60, 40) is beaten by (80, 50) on both axes.
POINTS = [(100.0, 10.0), (80.0, 50.0), (60.0, 40.0), (50.0, 90.0)]


def test_pareto_front_drops_points_beaten_on_both_axes() -> None:
    assert pareto_front(POINTS) == [(50.0, 90.0), (80.0, 50.0), (100.0, 10.0)]


@pytest.mark.parametrize(
    ("speed", "expected"),
    [
        (65.0, 70.0),  # on the line (50, 90)-(80, 50): 90 + (50 - 90) x (65 - 50) / 30 = 70
        (90.0, 30.0),  # on (80, 50)-(100, 10): 50 - 40 x 10 / 20 = 30
        (100.0, 10.0),  # the fastest point itself
        (40.0, 90.0),  # slower than every point: the (50, 90) point serves it
    ],
)
def test_throughput_at_speed_reads_the_frontier_line(speed: float, expected: float) -> None:
    assert throughput_at_speed(POINTS, speed) == pytest.approx(expected)


def test_no_throughput_beyond_the_fastest_point() -> None:
    assert throughput_at_speed(POINTS, 120.0) is None
    assert throughput_at_speed([], 1.0) is None


def test_every_sweep_row_of_the_csv_has_a_setup_and_back() -> None:
    csv_rows = {r.id for r in load_rows() if r.metric == SWEEP_METRIC}
    assert csv_rows == sweep_rows() == {"disagg-05", "disagg-05-2node"}


def test_closed_loop_sizes_follow_the_benchmark_script() -> None:
    """perf.sh: 2N warm-up + 10N measured requests at concurrency N = 12N in all."""
    s = at_concurrency(_spec()["sides"]["vllm_1node"], 16, _spec()["requests_per_concurrency"])
    assert s["workload"]["arrival"] == {"kind": "closed_loop", "concurrency": 16}
    assert s["workload"]["num_requests"] == 16 * 12


def test_dynamo_single_node_saturates_on_its_prefill_pool() -> None:
    """4 TP1 prefill workers each run one 3000-token prompt per step (3500-token budget), so
    the pool finishes 4 / prefill_s requests a second and the 8 GPUs emit at most
    4 x 150 / (prefill_s x 8) tokens/s each; the highest concurrency sits within 2% of that
    ceiling (its ramp-up and drain cost the rest), and the result names the prefill pool."""
    spec = _spec()
    s = at_concurrency(spec["sides"]["dynamo_1node"], 256, spec["requests_per_concurrency"])
    r = simulator.simulate(simulator.load_scenario(s)).to_dict()
    prefill_s = r["disaggregation"]["prefill"]["prefill_s"]["mean"]
    ceiling = 4 * 150 / (prefill_s * 8)
    assert r["output_tokens_per_s_per_gpu"] == pytest.approx(ceiling, rel=0.02)
    assert r["output_tokens_per_s_per_gpu"] <= ceiling
    assert r["disaggregation"]["bottleneck_pool"] == "prefill"
    # and the swept side's best point is that plateau
    assert max(g for _, g in side_points("dynamo_1node")) == pytest.approx(ceiling, rel=0.02)


def test_aggregated_side_trades_speed_for_throughput() -> None:
    """More clients: more tokens per GPU and fewer per user, point after point (the frontier
    the row reads is the whole sweep). At concurrency 1 and 2 each of the two instances
    serves one client at a time, so the speed is the same to rounding."""
    pts = side_points("vllm_1node")
    for (s0, g0), (s1, g1) in itertools.pairwise(pts):
        assert g1 > g0
        assert s1 <= s0 * (1 + 1e-9)
    assert pts[-1][0] < 0.2 * pts[0][0]
