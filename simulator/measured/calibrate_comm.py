"""`frontier calibrate --fit comm`: each engine style's all-reduce per-peer latency (what each
GPU beyond two adds to a small collective's latency with the engine's kernels; cost/comm.py),
as free parameters and as the scenario change that carries a value into a run's engine (a
deployment overhead, which replaces the style's and the GPU profile's value when built)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from simulator.calibration.host_costs import COMM_BOUNDS_US, COMM_KEY
from simulator.calibration.params import FreeParameter, Target
from simulator.inputs.deployment import DisaggregatedDeployment, Overhead


def comm_parameters(styles: Sequence[str]) -> tuple[FreeParameter, ...]:
    """Each style's allreduce_latency_per_peer_us, from the shipped value (0 where none),
    within COMM_BOUNDS_US on a linear scale (0 is a value it may take)."""
    from simulator.engines.style import load_engine_styles

    shipped = load_engine_styles()
    out = []
    for name in sorted(set(styles)):
        per_peer_s = shipped[name].allreduce_latency_per_peer_s
        prior = min(max(round((per_peer_s or 0.0) * 1e6, 9), COMM_BOUNDS_US[0]),
                    COMM_BOUNDS_US[1])
        out.append(FreeParameter(f"{name}.{COMM_KEY}", Target("engine_style", name, COMM_KEY),
                                 prior, *COMM_BOUNDS_US, scale="linear"))
    return tuple(out)


def with_collectives(scenario: Any, styles: Sequence[str],
                     values: Mapping[str, float]) -> Any | None:
    """The validated scenario with each pool's per-peer latency from `values` (its style's
    COMM_KEY, microseconds) as its overhead's allreduce_latency_per_peer_s; None where
    `values` sets none of `styles`'."""
    if not any(f"{s}.{COMM_KEY}" in values for s in styles):
        return None

    def pool_with(pool: Any) -> Any:
        us = values.get(f"{pool.engine}.{COMM_KEY}")
        if us is None:
            return pool
        seconds = us * 1e-6
        overhead = (Overhead(allreduce_latency_per_peer_s=seconds) if pool.overhead is None
                    else pool.overhead.model_copy(
                        update={"allreduce_latency_per_peer_s": seconds}))
        return pool.model_copy(update={"overhead": overhead})

    dep = scenario.deployment
    if isinstance(dep, DisaggregatedDeployment):
        dep = dep.model_copy(update={"prefill": pool_with(dep.prefill),
                                     "decode": pool_with(dep.decode)})
    else:
        dep = pool_with(dep)
    return scenario.model_copy(update={"deployment": dep})
