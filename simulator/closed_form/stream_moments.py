"""What the fluid estimate needs from a scenario's request stream: the length moments, the
arrival rate and its burstiness, and the requests the engine would refuse on arrival."""

from __future__ import annotations

import numpy as np

from simulator.closed_form.steady_state import Traffic
from simulator.inputs.scenario import (
    ClosedLoopArrival,
    ConstantArrival,
    GammaArrival,
    OfflineArrival,
    Scenario,
)
from simulator.serving.engine_build import Engine
from simulator.workload.stream import RequestStream


def traffic_of(stream: RequestStream, decode_pool: bool = False,
               reserve_full: bool = False) -> Traffic:
    """The moments of the request stream the fluid model needs."""
    i = stream.input_tokens.astype(np.float64)
    o = stream.output_tokens.astype(np.float64)
    i_mean, o_mean = float(i.mean()), float(o.mean())
    ctx = float(np.sum(o * (i + o / 2)) / np.sum(o)) if o.sum() > 0 else i_mean
    held = i_mean + (o_mean if reserve_full else o_mean / 2)
    gaps = np.diff(stream.arrival_s)
    gaps = gaps[np.isfinite(gaps)]
    cv2 = float(gaps.var() / gaps.mean() ** 2) if gaps.size > 1 and gaps.mean() > 0 else 1.0
    return Traffic(i_mean, o_mean, float(np.percentile(i, 99)), float(np.percentile(o, 10)),
                   float(i.var() / i_mean**2) if i_mean > 0 else 0.0,
                   float(o.var() / o_mean**2) if o_mean > 0 else 0.0, cv2, ctx, held)


def refused_requests(engine: Engine, stream: RequestStream) -> int:
    """Requests the simulation drops on arrival, as its admission checks them: past the
    context window, larger than a replica's whole KV cache, or (chunked prefill off) a prompt
    above the token budget."""
    i, o = stream.input_tokens, stream.output_tokens
    cfg = engine.scheduler
    bs = cfg.block_size
    bad = i + o > (engine.max_model_len or engine.arch.max_position_embeddings)
    bad |= -(-(i + o - 1) // bs) > cfg.num_blocks
    first = engine.prefill_pool.scheduler if engine.prefill_pool is not None else cfg
    if engine.prefill_pool is not None:
        bad |= -(-i // first.block_size) > first.num_blocks
    if not first.chunked_prefill:
        bad |= i > first.max_num_batched_tokens
    return int(np.count_nonzero(bad))


def arrival_cv2(scenario: Scenario, traffic: Traffic) -> float:
    a = scenario.workload.arrival
    if isinstance(a, GammaArrival):
        return float(a.cv**2)
    if isinstance(a, ConstantArrival):
        return 0.0
    return traffic.arrival_cv2 if a.kind == "trace" else 1.0


def offered_rate_per_s(scenario: Scenario, stream: RequestStream) -> float | None:
    """Offered requests/s of an open-loop stream (None: closed loop or offline)."""
    a = scenario.workload.arrival
    if isinstance(a, ClosedLoopArrival | OfflineArrival):
        return None
    rate = getattr(a, "rate_per_s", None)
    if rate is not None:
        return float(rate)
    t = stream.arrival_s
    span = float(t[-1] - t[0]) if len(t) > 1 else 0.0
    return (len(t) - 1) / span if span > 0 else None
