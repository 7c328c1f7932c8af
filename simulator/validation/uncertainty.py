"""Uncertainty bands: rerun a scenario on pessimistic and optimistic copies of its GPU profile.

Each profile states the spread of its measured rows around the chosen efficiency factors.
The low profile scales every achievable fraction by (1 - spread) and every fixed cost by
(1 + spread); the high profile does the reverse. Host overheads are the engine's, not the
GPU's, and stay as they are.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from simulator.hardware.profile import Hardware, load_hardware

_FRACTIONS = (
    "gemm_compute_fraction",
    "hbm_bandwidth_fraction",
    "attention_compute_fraction",
    "attention_hbm_fraction",
    "scale_out_fraction",
)
_RATES = ("allreduce_bus_bytes_per_s", "alltoall_bytes_per_s")
_FIXED = (
    "kernel_launch_overhead_s",
    "attention_decode_fixed_s",
    "allreduce_latency_s",
    "allreduce_latency_per_peer_s",
    "alltoall_latency_s",
    "scale_out_latency_s",
)


def perturbed(hw: Hardware, direction: int) -> Hardware:
    """direction -1: the pessimistic profile; +1: the optimistic one."""
    s = hw.efficiency_spread * direction
    changes: dict[str, Any] = {}
    for name in _FRACTIONS + _RATES:
        changes[name] = getattr(hw, name) * (1 + s)
    for name in _FIXED:
        changes[name] = getattr(hw, name) * (1 - s)
    if hw.gemm_classes is not None:  # the kernel classes' fractions and per-tile costs alike
        changes["gemm_classes"] = hw.gemm_classes.scaled(1 + s, 1 - s)
    if hw.attention_classes is not None:
        changes["attention_classes"] = hw.attention_classes.scaled(1 + s)
    return dataclasses.replace(hw, **changes)


def simulate_profiles(loaded: Any, band: bool) -> list[dict[str, Any]]:
    """The result dicts of the nominal profile and, with `band`, the pessimistic and optimistic
    ones after it (several rows score different keys of one run)."""
    import simulator

    if not band:
        return [simulator.simulate(loaded).to_dict()]
    hw = load_hardware(loaded.scenario.hardware.gpu)
    return [simulator.simulate(loaded, hardware=perturbed(hw, d)).to_dict() for d in (0, -1, 1)]
