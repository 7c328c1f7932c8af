"""Per-pool figures of a disaggregated run, and a hint naming the pool that saturates first.

A prefill replica is loaded in proportion to its busy time (prefill steps are compute-bound
and run only when prompts wait). A decode replica steps whenever anything decodes, so its busy
time says little; its load is the share of its batch slots (max_num_seqs) or KV cache that its
requests occupy on average (Little's law over their residence time).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from simulator.engines.style import FrontEnd
from simulator.metrics.summary import (
    SLOTargets,
    client_offset_s,
    linear_percentiles,
    percentiles,
)
from simulator.serving.disaggregated import DisaggregatedPools


def _pct(values: npt.NDArray[np.float64]) -> dict[str, float | None]:
    return percentiles(values[np.isfinite(values)])


def suggest_prefill_replicas(total: int, prefill_work: float, decode_work: float) -> int:
    """Prefill replicas out of `total` that minimise the busier pool's load, taking each
    pool's work (load × replicas now) to spread evenly over its replicas."""
    if total < 2:
        return total
    return min(
        range(1, total),
        key=lambda x: (max(prefill_work / x, decode_work / (total - x)), abs(2 * x - total)),
    )


def split_load(total: int, prefill: int, prefill_work: float, decode_work: float) -> float:
    """The busier pool's load when `total` replicas split into `prefill` + the rest."""
    return max(prefill_work / prefill, decode_work / (total - prefill))


def _slo_pressure(values: npt.NDArray[np.float64], target_s: float | None) -> float:
    """p99 of a latency over its SLO target: above 1 the pool misses its SLO."""
    values = values[np.isfinite(values)]
    if target_s is None or values.size == 0:
        return 0.0
    return linear_percentiles(values, (99,))[0] / target_s


def _load(*measures: tuple[str, float]) -> tuple[float, str]:
    """The highest of a pool's load measures, and how to say it."""
    what, value = max(measures, key=lambda m: m[1])
    said = f"{value:.0%} {what}" if what.startswith("of") else f"{what} {value:.0%}"
    if what.endswith("SLO"):
        said = f"{what.split(' over')[0]} {value:.2f}x its SLO"
    return value, said


def pool_summary(
    pools: DisaggregatedPools,
    records: npt.NDArray[Any],
    end_s: float,
    slo: SLOTargets | None = None,
    front_end: FrontEnd | None = None,
) -> dict[str, Any]:
    """The `disaggregation` block of the result: each pool's load and queueing, the KV
    transfer times, the bottleneck pool and the ratio that would balance the two.

    With an SLO, a pool's load is also its latency's p99 over the target it controls: TTFT
    for the prefill pool (queue, prefill, transfer), TPOT for the decode pool."""
    p, d = pools.spec["prefill"], pools.spec["decode"]
    done = (records["drop_reason"] == 0) & np.isfinite(records["finish_s"])
    arrival = records["arrival_s"]
    slot_load, kv_load = _decode_occupancy(pools, records, done, end_s)
    prefill_busy = pools.busy_fraction(pools.prefill, end_s)
    slo = slo or SLOTargets()
    ttft, tpot = _client_latencies_s(records, done, front_end)
    prefill_load, prefill_why = _load(
        ("busy", prefill_busy), ("TTFT p99 over its SLO", _slo_pressure(ttft, slo.ttft_p99_s))
    )
    decode_load, decode_why = _load(
        ("of batch slots held", min(1.0, slot_load)),
        ("of KV cache held", min(1.0, kv_load)),
        ("TPOT p99 over its SLO", _slo_pressure(tpot, slo.tpot_p99_s)),
    )
    bottleneck = "prefill" if prefill_load >= decode_load else "decode"
    total = p.replicas + d.replicas
    better, advice = _split_advice(p.replicas, d.replicas, prefill_load, decode_load)
    hint = (
        f"{bottleneck} pool saturates first (prefill: {prefill_why}; decode: {decode_why}); "
        f"{advice}"
    )
    return {
        "ratio": f"{p.replicas}P{d.replicas}D",
        "prefill": {
            "gpu": p.step_model.hw.name,
            "replicas": p.replicas,
            "gpus": p.replicas * p.gpus_per_replica,
            "busy_fraction": prefill_busy,
            "queue_s": _pct(pools.prefill_scheduled_s - arrival),
            "prefill_s": _pct(pools.prefill_end_s - pools.prefill_scheduled_s),
        },
        "decode": {
            "gpu": d.step_model.hw.name,
            "replicas": d.replicas,
            "gpus": d.replicas * d.gpus_per_replica,
            "busy_fraction": pools.busy_fraction(pools.decode, end_s),
            "batch_slot_fraction": slot_load,
            "kv_used_fraction": kv_load,
            "queue_s": _pct(pools.decode_scheduled_s - pools.decode_arrival_s),
        },
        "kv_transfer_s": _pct(pools.transfer_s),
        "kv_link_wait_s": _pct(pools.link_wait_s),
        "kv_bytes_per_token": pools.link.kv_bytes_per_token,
        "kv_link_gb_per_s": pools.link.bytes_per_s / 1e9,
        "prefill_load": prefill_load,
        "decode_load": decode_load,
        "bottleneck_pool": bottleneck,
        "suggested_ratio": f"{better}P{total - better}D",
        "hint": hint,
    }


def _decode_occupancy(
    pools: DisaggregatedPools, records: npt.NDArray[Any], done: npt.NDArray[np.bool_],
    end_s: float,
) -> tuple[float, float]:
    """(batch-slot share, KV-cache share) the decode pool's requests hold on average over the
    run: Little's law over each finished request's residence from its decode scheduling."""
    d = pools.spec["decode"]
    residence_s = np.where(done, records["finish_s"] - pools.decode_scheduled_s, 0.0)
    residence_s = np.nan_to_num(residence_s)
    mean_kv = records["input_tokens"] + records["output_tokens"] / 2.0
    span = max(end_s, 1e-12)
    slot_load = float(residence_s.sum()) / (span * d.replicas * d.cfg.max_num_seqs)
    kv_load = float((residence_s * mean_kv).sum()) / (span * d.replicas * d.kv_capacity_tokens)
    return slot_load, kv_load


def _client_latencies_s(
    records: npt.NDArray[Any], done: npt.NDArray[np.bool_], front_end: FrontEnd | None
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(TTFT, TPOT) per request as the client measures them and the SLO scores them (TTFT
    with the front-end cost); NaN where a request did not finish or has no second token."""
    offset = client_offset_s(records, front_end)
    ttft = np.where(done, records["first_token_s"] - records["arrival_s"] + offset, np.nan)
    multi = done & (records["output_tokens"] > 1)
    tpot = np.where(
        multi,
        (records["finish_s"] - records["first_token_s"])
        / np.maximum(1, records["output_tokens"] - 1),
        np.nan,
    )
    return ttft, tpot


def _split_advice(
    prefill_replicas: int, decode_replicas: int, prefill_load: float, decode_load: float
) -> tuple[int, str]:
    """(prefill replicas of the best split, advice in words): keep this split, try the better
    one, or add replicas when no split of these carries the load."""
    total = prefill_replicas + decode_replicas
    work = (prefill_load * prefill_replicas, decode_load * decode_replicas)
    better = suggest_prefill_replicas(total, *work)
    if total >= 2 and split_load(total, better, *work) > 1:
        advice = (
            f"no split of {total} replicas carries this load (best by load: "
            f"{better}P{total - better}D); add replicas"
        )
    elif better == prefill_replicas:
        # Not "balanced": with replicas of unequal size, or a single replica that cannot
        # move, the best split by count can leave one pool far busier than the other.
        now = f"{prefill_replicas}P{decode_replicas}D"
        advice = (
            f"{now} is the best split of these {total} replicas (moving one between the "
            f"pools does not lower the busier pool's load)"
        )
    else:
        advice = f"try {better}P{total - better}D with the same {total} replicas"
    return better, advice
