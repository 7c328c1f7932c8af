"""Speculative validation rows: the row's setup plus a `deployment.speculative` block (its
`speculative_setup` in validation/sources/), scored as an absolute metric, as the speed-up over
the same scenario without speculation, or as the simulated mean acceptance length."""

from __future__ import annotations

import copy
from functools import cache
from typing import TYPE_CHECKING, Any

from simulator.validation import catalog

if TYPE_CHECKING:
    from simulator.hardware.profile import Hardware

SPEEDUP_METRIC = "speedup"
ACCEPTANCE_METRIC = "acceptance_length"  # simulated mean tokens per verify step


@cache
def speculative_setups() -> dict[str, dict[str, Any]]:
    return catalog.speculative_setups()


def speculative_scenario(row_id: str, base: dict[str, Any]) -> dict[str, Any]:
    """The row's scenario with its speculative block and extra keys merged in."""
    setup = speculative_setups()[row_id]
    s = copy.deepcopy(base)
    s["deployment"].update(setup.get("deployment", {}))
    s["workload"].update(setup.get("workload", {}))
    s["deployment"]["speculative"] = dict(setup["speculative"])
    return s


def predict_speculative(row_id: str, metric: str, base: dict[str, Any],
                        hardware: Hardware | None = None) -> float:
    """The row's metric; on `hardware` (a perturbed profile, say) instead of its GPU's own."""
    import simulator

    spec = speculative_scenario(row_id, base)
    with_spec = simulator.simulate(simulator.load_scenario(spec), hardware=hardware).to_dict()
    if metric == ACCEPTANCE_METRIC:
        return float(with_spec["speculative"]["acceptance_length_mean"])
    if metric != SPEEDUP_METRIC:
        return float(with_spec[metric])
    with_tps, without_tps = speedup_parts(row_id, base, hardware, with_spec)
    return with_tps / without_tps


def speedup_parts(row_id: str, base: dict[str, Any], hardware: Hardware | None = None,
                  with_spec: dict[str, Any] | None = None) -> tuple[float, float]:
    """A speed-up row's output tokens/s with speculation and without it (the same scenario);
    `with_spec`: the speculative run's result when it is already at hand."""
    import simulator

    spec = speculative_scenario(row_id, base)
    if with_spec is None:
        with_spec = simulator.simulate(simulator.load_scenario(spec), hardware=hardware).to_dict()
    plain = copy.deepcopy(spec)
    del plain["deployment"]["speculative"]
    without = simulator.simulate(simulator.load_scenario(plain), hardware=hardware).to_dict()
    return float(with_spec["output_tokens_per_s"]), float(without["output_tokens_per_s"])
