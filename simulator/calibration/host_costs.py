"""A calibration overlay's engine-style values applied to a scenario: each engine type (the
deployment, or each P/D pool) that sets no `overhead` of its own gets its engine style's fitted
per-step and per-sequence cost, per-request latency, all-reduce per-peer latency, FP8 MoE path
latency and the rounds a closed loop's start-up burst lasts, as scenario overrides. One rule
for `simulate`, `estimate`, `sweep` and `lesson` under `--calibration`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simulator.calibration.overlay import CalibrationOverlay
from simulator.engines.style import BURST_ROUNDS_RANGE

HOST_KEYS = ("cpu_step_us", "cpu_per_seq_us", "request_latency_us")
# An engine style's all-reduce kernels (`--fit comm`): what each GPU beyond two adds to a small
# collective's latency (cost/comm.py), microseconds. Bounds: 0 (no growth with the group) to
# 10 us a peer, above which an 8-GPU all-reduce would take longer than NCCL-tests measure
# without CUDA graphs (26-42 us on 8 H100/H200, shared/reference/kernel_microbenchmarks.csv),
# launch included.
COMM_KEY = "allreduce_latency_per_peer_us"
COMM_BOUNDS_US = (0.0, 10.0)
# An engine style's FP8 MoE expert path (`--fit moe`): fixed latency per MoE layer beyond the
# GPU profile's grouped block (serving/engine_hardware.py), microseconds. Bounds: 0 (the
# profile's fused path) to 200 us a layer, 12 ms a decode step on a 60-layer model.
MOE_KEY = "moe_fp8_block_fixed_us"
MOE_BOUNDS_US = (0.0, 200.0)
# The deployment overhead field (seconds) and EngineStyle field (seconds) of each kernel key.
KERNEL_OVERHEAD_FIELDS = {COMM_KEY: "allreduce_latency_per_peer_s",
                          MOE_KEY: "moe_fp8_block_fixed_s"}
# How many rounds of a closed loop the start-up burst's queue sets TTFT for in an engine
# (`--fit burst`, docs/closed-loops.md), a count of rounds within the style's own range.
BURST_KEY = "closed_loop_burst_rounds"
BURST_BOUNDS = BURST_ROUNDS_RANGE
# Every engine-style key an overlay may set (what host_costs collects).
STYLE_KEYS = (*HOST_KEYS, COMM_KEY, MOE_KEY, BURST_KEY)
# engine style -> {key of STYLE_KEYS: its value (microseconds; BURST_KEY in rounds)}
HostCosts = Mapping[str, Mapping[str, float]]


def host_costs(overlay: CalibrationOverlay) -> dict[str, dict[str, float]]:
    """Engine style -> the host costs (microseconds; burst rounds in rounds) the overlay fits
    for it."""
    out: dict[str, dict[str, float]] = {}
    for v in overlay.values:
        t = v.target
        if t.kind == "engine_style" and t.key in STYLE_KEYS:
            out.setdefault(t.name, {})[t.key] = v.value
    return out


def overhead_overrides(scenario: Any, costs: HostCosts) -> list[tuple[str, float]]:
    """('deployment[.pool].overhead.step_s', seconds), ... for each engine type of a
    validated scenario without an explicit overhead whose style the overlay calibrates (a key
    the overlay lacks keeps the style's shipped value)."""
    from simulator.engines.style import engine_style

    out: list[tuple[str, float]] = []
    for prefix, pool in scenario.deployment.engine_types:
        fitted = costs.get(str(pool.engine))
        if pool.overhead is not None or not fitted:
            continue
        style = engine_style(str(pool.engine), pool.engine_version)
        out.append((f"{prefix}.overhead.step_s",
                    fitted.get("cpu_step_us", style.cpu_step_s * 1e6) * 1e-6))
        out.append((f"{prefix}.overhead.per_seq_s",
                    fitted.get("cpu_per_seq_us", style.cpu_per_seq_s * 1e6) * 1e-6))
        if "request_latency_us" in fitted:
            out.append((f"{prefix}.overhead.request_latency_s",
                        fitted["request_latency_us"] * 1e-6))
        for key, field in KERNEL_OVERHEAD_FIELDS.items():
            if key in fitted:
                out.append((f"{prefix}.overhead.{field}", fitted[key] * 1e-6))
        if BURST_KEY in fitted:
            out.append((f"{prefix}.overhead.burst_rounds", fitted[BURST_KEY]))
    return out


def calibrated(data: Mapping[str, Any], costs: HostCosts) -> dict[str, Any]:
    """A full scenario dict with the overlay's host costs applied (unchanged when none
    applies)."""
    from simulator.inputs.scenario import apply_overrides, load_scenario_file

    scenario, _ = load_scenario_file(dict(data))
    pairs = overhead_overrides(scenario, costs)
    if not pairs:
        return dict(data)
    return apply_overrides(data, [(tuple(k.split(".")), v) for k, v in pairs])
