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
    residence_s = np.where(done, records["finish_s"] - pools.decode_scheduled_s, 0.0)
    residence_s = np.nan_to_num(residence_s)
    mean_kv = records["input_tokens"] + records["output_tokens"] / 2.0
    span = max(end_s, 1e-12)
    slot_load = float(residence_s.sum()) / (span * d.replicas * d.cfg.max_num_seqs)
    kv_load = float((residence_s * mean_kv).sum()) / (span * d.replicas * d.kv_capacity_tokens)
    prefill_busy = pools.busy_fraction(pools.prefill, end_s)
    slo = slo or SLOTargets()
    # TTFT as the client measures it (and the SLO is scored): plus the front-end cost.
    offset = client_offset_s(records, front_end)
    ttft = np.where(done, records["first_token_s"] - arrival + offset, np.nan)
    multi = done & (records["output_tokens"] > 1)
    tpot = np.where(
        multi,
        (records["finish_s"] - records["first_token_s"])
        / np.maximum(1, records["output_tokens"] - 1),
        np.nan,
    )
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
    better = suggest_prefill_replicas(total, prefill_load * p.replicas, decode_load * d.replicas)
    now = f"{p.replicas}P{d.replicas}D"
    work = (prefill_load * p.replicas, decode_load * d.replicas)
    if total >= 2 and split_load(total, better, *work) > 1:
        advice = (
            f"no split of {total} replicas carries this load (best by load: "
            f"{better}P{total - better}D); add replicas"
        )
    elif better == p.replicas:
        # Not "balanced": with replicas of unequal size, or a single replica that cannot
        # move, the best split by count can leave one pool far busier than the other.
        advice = (
            f"{now} is the best split of these {total} replicas (moving one between the "
            f"pools does not lower the busier pool's load)"
        )
    else:
        advice = f"try {better}P{total - better}D with the same {total} replicas"
    hint = (
        f"{bottleneck} pool saturates first (prefill: {prefill_why}; decode: {decode_why}); "
        f"{advice}"
    )
    return {
        "ratio": now,
        "prefill": {
            "gpu": p.model.hw.name,
            "replicas": p.replicas,
            "gpus": p.replicas * p.gpus_per_replica,
            "busy_fraction": prefill_busy,
            "queue_s": _pct(pools.prefill_scheduled_s - arrival),
            "prefill_s": _pct(pools.prefill_end_s - pools.prefill_scheduled_s),
        },
        "decode": {
            "gpu": d.model.hw.name,
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
