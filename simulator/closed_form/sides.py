"""One side of an estimate (a pool of identical scheduling units) in its steady state, and
the latencies it adds: the wait before a prefill starts and the TPOT its decoders see. Split
from estimate.py, which assembles the sides into the scenario's metrics."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

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
    residence = decode_steps(traffic, unit) * op.step_s + op.prefill_s
    cap, _ = batch_limit(unit, traffic)
    seats = max(1, int(cap))  # the batch limit that binds (max_num_seqs at most)
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


# Requests of the stream the prefill-interference tail is drawn over (the first ones: the
# stream is in arrival order, its lengths drawn independently of it).
TAIL_REQUESTS = 4096
# Rounds of lengthening added: the r-th adds about share^r of the life (share: the prefill
# share of a step, below 1 on a stable side), so 8 rounds leave 0.6^8 < 2 % at a 0.6 share.
TAIL_ROUNDS = 8


def prefill_tail_tpot_s(side: Side, traffic: Traffic, inputs: npt.NDArray[np.int64],
                        outputs: npt.NDArray[np.int64], q: float = 0.99) -> float:
    """The q-quantile over requests of TPOT with the prompts that arrive while each one
    decodes run in its steps. A request of n decode steps would live n prefill-free steps;
    the prompts arriving meanwhile (a Poisson number at the unit's rate, lengths drawn from
    the stream) add their prefill time (the mean extra per step over the mean prompt tokens
    per step: a cost per token) and so lengthen its life, during which more arrive: the life
    is the fixed point T = n d + c P(T), found by adding the arrivals of each lengthening in
    turn (their work shrinks by the prefill share of the step each round). Its mean is n x the
    mean step; a short answer that meets a run of long prompts has a long TPOT, the tail the
    mean step does not show. Deterministic (seed 0); 0 where no prefill shares the steps."""
    unit, op = side.unit, side.op
    extra = op.step_s - op.decode_step_s
    tokens_per_s = op.rate_per_s * traffic.input_mean
    if unit.prefills_only or extra <= 0 or tokens_per_s <= 0 or inputs.size == 0 \
            or outputs.size == 0:
        return 0.0
    cost_per_token_s = extra / (tokens_per_s * op.step_s)
    steps = np.maximum(outputs[:TAIL_REQUESTS].astype(np.float64) - 1.0, 1.0) / (
        unit.tokens_per_step)
    rng = np.random.default_rng(0)
    life = steps * op.decode_step_s
    new = life.copy()
    for _ in range(TAIL_ROUNDS):
        met = rng.poisson(op.rate_per_s * new)
        drawn = inputs[rng.integers(0, inputs.size, int(met.sum()))].astype(np.float64)
        totals = np.concatenate(([0.0], np.cumsum(drawn)))
        ends = np.cumsum(met)
        new = cost_per_token_s * (totals[ends] - totals[ends - met])
        life += new
    return float(np.quantile(life / steps / unit.tokens_per_step, q))
