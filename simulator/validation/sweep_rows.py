"""Validation rows read off concurrency sweeps: each side runs a closed loop at every
concurrency its benchmark script ran, the points (tokens/s per user, tokens/s per GPU) form a
Pareto frontier drawn as straight lines between its points, and a row is the ratio of two
sides' per-GPU throughput on those frontiers at one per-user speed (a row's `sweep_ratio` over its
source file's `sweep`, validation/sources/)."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

from simulator.sweep.frontier import SpeedPoint, throughput_at_speed
from simulator.validation import catalog
from simulator.validation.catalog import SWEEP_METRIC

__all__ = ["SWEEP_METRIC", "predict_sweep_ratio", "side_points", "sweep_rows"]

@cache
def _spec() -> dict[str, Any]:
    return catalog.sweep_spec()


def sweep_rows() -> set[str]:
    return set(_spec()["rows"])


def at_concurrency(
    scenario: dict[str, Any], concurrency: int, requests_each: int
) -> dict[str, Any]:
    """The scenario as a closed loop of `concurrency` clients sending `requests_each` x
    `concurrency` requests."""
    s = copy.deepcopy(scenario)
    s["workload"]["arrival"] = {"kind": "closed_loop", "concurrency": concurrency}
    s["workload"]["num_requests"] = concurrency * requests_each
    return s


@cache
def side_points(name: str) -> tuple[SpeedPoint, ...]:
    """(mean tokens/s per user, tokens/s per GPU) of one side at each swept concurrency."""
    import simulator

    spec = _spec()
    scenario = spec["sides"][name]
    points = []
    for c in spec["concurrencies"]:
        s = at_concurrency(scenario, c, spec["requests_per_concurrency"])
        r = simulator.simulate(simulator.load_scenario(s)).to_dict()
        per_user = float(r["output_tokens_per_s_per_user"]["mean"])
        points.append((per_user, float(r["output_tokens_per_s_per_gpu"])))
    return tuple(points)


def predict_sweep_ratio(row_id: str) -> float:
    """numerator / denominator per-GPU throughput at the row's per-user speed target."""
    row = _spec()["rows"][row_id]
    speed = float(row["speed_per_user"])
    values = []
    for name in (row["numerator"], row["denominator"]):
        v = throughput_at_speed(list(side_points(name)), speed)
        if v is None:
            raise ValueError(f"{row_id}: side {name} reaches no {speed} tokens/s per user")
        values.append(v)
    return values[0] / values[1]
