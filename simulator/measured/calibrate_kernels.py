"""`frontier calibrate --fit comm` and `--fit moe`: an engine style's own kernel values, as free
parameters and as the scenario change that carries a value into a run's engine (a deployment
overhead, which replaces the style's value when the engine is built). comm: the all-reduce
per-peer latency (what each GPU beyond two adds to a small collective's latency with the
engine's kernels; cost/comm.py). moe: the fixed latency per MoE layer the engine's FP8 expert
path adds to the GPU profile's grouped block (serving/engine_hardware.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from simulator.calibration.host_costs import (
    COMM_BOUNDS_US,
    COMM_KEY,
    KERNEL_OVERHEAD_FIELDS,
    MOE_BOUNDS_US,
    MOE_KEY,
)
from simulator.calibration.params import FreeParameter, Target
from simulator.inputs.deployment import DisaggregatedDeployment, Overhead

# The style key each fit kind declares, with its bounds (microseconds, linear: 0 is a value).
KERNEL_FITS = {"comm": (COMM_KEY, COMM_BOUNDS_US), "moe": (MOE_KEY, MOE_BOUNDS_US)}


def kernel_parameters(styles: Sequence[str], kind: str) -> tuple[FreeParameter, ...]:
    """Each style's value of the `kind` fit (KERNEL_FITS), from the shipped value (0 where
    none), within its bounds on a linear scale."""
    from simulator.engines.style import load_engine_styles

    key, bounds = KERNEL_FITS[kind]
    shipped = load_engine_styles()
    out = []
    for name in sorted(set(styles)):
        seconds = getattr(shipped[name], KERNEL_OVERHEAD_FIELDS[key])
        prior = min(max(round((seconds or 0.0) * 1e6, 9), bounds[0]), bounds[1])
        out.append(FreeParameter(f"{name}.{key}", Target("engine_style", name, key),
                                 prior, *bounds, scale="linear"))
    return tuple(out)


def with_engine_kernels(scenario: Any, styles: Sequence[str],
                        values: Mapping[str, float]) -> Any | None:
    """The validated scenario with each pool's kernel values from `values` (its style's
    KERNEL_FITS keys, microseconds) as its overhead's fields; None where `values` sets none
    of `styles`'."""
    keys = [key for key, _ in KERNEL_FITS.values()]
    if not any(f"{s}.{k}" in values for s in styles for k in keys):
        return None

    def pool_with(pool: Any) -> Any:
        update = {KERNEL_OVERHEAD_FIELDS[k]: values[f"{pool.engine}.{k}"] * 1e-6
                  for k in keys if f"{pool.engine}.{k}" in values}
        if not update:
            return pool
        overhead = (Overhead(**update) if pool.overhead is None
                    else pool.overhead.model_copy(update=update))
        return pool.model_copy(update={"overhead": overhead})

    dep = scenario.deployment
    if isinstance(dep, DisaggregatedDeployment):
        dep = dep.model_copy(update={"prefill": pool_with(dep.prefill),
                                     "decode": pool_with(dep.decode)})
    else:
        dep = pool_with(dep)
    return scenario.model_copy(update={"deployment": dep})
