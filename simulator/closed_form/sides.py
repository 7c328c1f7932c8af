"""One side of an estimate (a pool of identical scheduling units) in its steady state, and
the latencies it adds: the wait before a prefill starts and the TPOT its decoders see. Split
from estimate.py, which assembles the sides into the scenario's metrics."""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.closed_form.steady_state import (
    Operating,
    Traffic,
    Unit,
    batch_limit,
    batch_p99,
    capacity,
    decode_steps,
    kingman_wait_s,
    operating_point,
    seat_wait_s,
    solve_rate,
    tail_s,
)


@dataclass(frozen=True)
class Side:
    """One pool of units and its steady state."""

    unit: Unit
    count: int  # units in the pool
    op: Operating
    limit: str
    cap_per_s: float  # per unit
    stable: bool
    seat_wait_s: float = 0.0  # closed loop: wait for a free seat


def open_side(unit: Unit, traffic: Traffic, count: int, rate: float, requests: float,
              span_s: float) -> Side:
    """The open-loop steady state of `count` units sharing `rate` (overloaded: the full batch),
    no larger than a finite run reaches: by Little's law over the run, `requests` arriving over
    `span_s` and each staying R keep requests · R / (span + R) in flight on average."""
    top, why = capacity(unit, traffic)
    op = solve_rate(unit, traffic, rate / count)
    stable = op is not None
    if op is None:
        op = top
    d = decode_steps(traffic, unit)
    for _ in range(4):
        stay = op.prefill_s + d * op.step_s
        b = requests * stay / (span_s + stay) if span_s + stay > 0 else op.batch
        if b >= op.batch * 0.999:
            break
        op = operating_point(unit, traffic, b)
    return Side(unit, count, op, why, top.rate_per_s, stable)


def queue_wait_s(side: Side, traffic: Traffic, cv2: float, rate_per_unit: float,
                 closed: bool = False) -> tuple[float, float]:
    """(mean, p99) wait before a request's prefill starts on this side: the residual of the
    step under way, the prefill channel (Kingman) and the batch seats (Allen-Cunneen). A
    closed loop sends a request only when one finishes: no random queue, the residual only."""
    op, unit = side.op, side.unit
    if not side.stable:
        return math.inf, math.inf
    if unit.prefills_only:
        # The prefill under way and the ones planned ahead, paid when the unit is busy.
        busy = min(1.0, rate_per_unit * op.prefill_s)
        residual = op.prefill_s / 2 * busy + unit.wait_steps * op.prefill_s * busy
    elif closed:
        # A closed loop sends its next request the moment one finishes, at a step's end, as
        # the next step (planned without it) starts: it waits that whole step and the steps
        # planned ahead, not half a step (the simulation's queue: 1.9-2.0 steps on the
        # InferenceX vLLM and TensorRT-LLM c8 setups, one step ahead).
        residual = (1 + unit.wait_steps) * op.step_s
    else:
        # Half the step under way, and the steps planned ahead or between polls
        # (serving/intake.py) when the engine is busy on arrival: with Poisson occupancy of
        # mean B, P(busy) = 1 - exp(-B).
        residual = op.step_s / 2 + unit.wait_steps * op.step_s * -math.expm1(-op.batch)
    if closed:
        return residual, 2 * residual
    load = op.prefill_load if not unit.prefills_only else rate_per_unit * op.prefill_s
    w1 = kingman_wait_s(load, op.prefill_s, cv2, traffic.input_cv2)
    seats = max(1, unit.max_seqs)
    residence = decode_steps(traffic, unit) * op.step_s + op.prefill_s
    cap, _ = batch_limit(unit, traffic)
    p2, w2 = seat_wait_s(seats, min(op.batch / cap, 0.999999), residence, cv2, 0.5) \
        if not unit.prefills_only and cap > 0 else (0.0, 0.0)
    mean = residual + w1 + w2
    p99 = 2 * residual + tail_s(w1, min(1.0, load)) + tail_s(w2, p2)
    return mean, p99


def side_tpot_s(side: Side, traffic: Traffic) -> tuple[float, float]:
    """TPOT p50 (the step a decoder sees beside a batch of the mean) and p99 (the batch at its
    Poisson 99th percentile, and a short request's share of prefill-carrying steps)."""
    unit, op = side.unit, side.op
    if unit.prefills_only:
        return 0.0, 0.0
    cap, _ = batch_limit(unit, traffic)
    b50 = min(cap, op.batch + 1) if side.stable else op.batch
    hi = unit.step_s(max(1.0, batch_p99(op.batch, cap)), 0.0, 0.0, 0.0)
    extra = op.step_s - op.decode_step_s  # prefill work per step, spread over the steps
    p50 = unit.step_s(max(1.0, b50), 0.0, 0.0, 0.0) + extra
    short = max(1.0, traffic.output_p10 - 1)
    share = min(1.0, extra / max(op.decode_step_s, 1e-12) + 1 / short) if extra > 0 else 0.0
    p99 = hi + max(extra, share * (op.step_s - op.decode_step_s)) / unit.tokens_per_step
    return p50 / unit.tokens_per_step, max(p99 / unit.tokens_per_step, p50 / unit.tokens_per_step)


def pool_prefill_wait_s(side: Side, traffic: Traffic, cv2: float, rate_per_unit: float,
                        population: float) -> tuple[float, float]:
    """(mean, p99) wait at a prefill pool that `population` clients cycle through: the
    closed-loop residual, scaled by the arrival theorem (a client finds the others queued,
    not itself: (N - 1) / N of the load)."""
    mean, p99 = queue_wait_s(side, traffic, cv2, rate_per_unit, True)
    seen = (population - 1) / population
    return mean * seen, p99 * seen
