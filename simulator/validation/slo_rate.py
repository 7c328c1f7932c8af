"""DistServe's "goodput": the highest Poisson request rate at which a deployment still meets
its SLO for a given share of requests (OSDI 2024, §2), found by bisection on the rate; and the
validation rows that compare two such rates (a row's `goodput_ratio` over its source file's
`goodputs`, validation/sources/)."""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

from simulator.validation import catalog
from simulator.validation.catalog import RATIO_METRIC

__all__ = ["RATIO_METRIC", "goodput", "max_rate_at_attainment", "predict_ratio", "rate_rows",
           "ratio_parts"]
ATTAINMENT = 0.9
BISECTION_STEPS = 12  # 2^-12 of the bracket: well below the 0.1 req/s the papers quote


def at_rate(scenario: dict[str, Any], rate_per_s: float) -> dict[str, Any]:
    """The scenario with Poisson arrivals at `rate_per_s`. A trace of unit-rate Poisson times
    (paired prompt and output lengths) is replayed at that rate by scaling its times; its path
    is taken relative to the validation folder."""
    s = copy.deepcopy(scenario)
    arrival = s["workload"].get("arrival") or {}
    if arrival.get("kind") == "trace":
        path = Path(arrival["path"])
        arrival["path"] = str(path if path.is_absolute() else catalog.HERE / path)
        arrival["time_scale"] = 1.0 / rate_per_s
    else:
        s["workload"]["arrival"] = {"kind": "poisson", "rate_per_s": rate_per_s}
    return s


def attainment_at(scenario: dict[str, Any], rate_per_s: float) -> float:
    import simulator

    s = at_rate(scenario, rate_per_s)
    value = simulator.simulate(simulator.load_scenario(s)).to_dict()["slo_attainment"]
    return float(value)


def max_rate_at_attainment(
    scenario: dict[str, Any], target: float, low_per_s: float, high_per_s: float
) -> float:
    """Bisect [low, high] for the rate where the SLO attainment falls to `target` (if the high
    end still meets it, the high end is returned)."""
    if attainment_at(scenario, high_per_s) >= target:
        return high_per_s
    lo, hi = low_per_s, high_per_s
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        if attainment_at(scenario, mid) >= target:
            lo = mid
        else:
            hi = mid
    return lo


@cache
def _spec() -> dict[str, Any]:
    return catalog.goodput_spec()


def rate_rows() -> set[str]:
    return set(_spec()["rows"])


@cache
def goodput(name: str) -> float:
    """One named goodput of the source files, in req/s (per GPU when it says per_gpu)."""
    g = _spec()["goodputs"][name]
    rate = max_rate_at_attainment(g["scenario"], ATTAINMENT, *g["bracket_per_s"])
    if g.get("per_gpu"):
        import simulator

        rate /= simulator.load_scenario(g["scenario"]).scenario.num_gpus
    return rate


def ratio_parts(row_id: str) -> tuple[float, float] | None:
    """The predicted numerator and denominator goodputs of a [numerator, denominator] row
    (None for a range over several setups)."""
    spec = _spec()["rows"][row_id]
    if isinstance(spec, dict):
        return None
    numerator, denominator = spec
    return goodput(numerator), goodput(denominator)


def predict_ratio(row_id: str) -> float:
    """A row is [numerator, denominator], or {min: [[n, d], ...]} / {max: ...} when the paper
    gives a range over several setups (its low or its high end)."""
    spec = _spec()["rows"][row_id]
    if isinstance(spec, dict):
        (how, pairs), = spec.items()
        ratios = [goodput(n) / goodput(d) for n, d in pairs]
        return min(ratios) if how == "min" else max(ratios)
    numerator, denominator = spec
    return goodput(numerator) / goodput(denominator)
