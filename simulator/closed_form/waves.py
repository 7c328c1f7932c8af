"""Closed loops of identical requests move in waves: the whole batch arrives together, is
prefilled in one burst of full token-budget steps, decodes in lockstep and finishes together,
and the next wave starts. The fluid steady state (steady_state.py) assumes arrivals spread
out, which identical requests offline, or one closed-loop client per unit, never do; this
module gives that case its own closed form. Many clients per unit drift apart in real runs
(measured TTFT grows 3.4x from 8 to 128 clients where lockstep waves grow 8x: test_estimate),
so the estimate keeps the steady state for them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.closed_form.steady_state import Traffic, Unit, batch_limit, decode_steps

FIXED_CV2 = 1e-4  # lengths this uniform count as identical


@dataclass(frozen=True, slots=True)
class Waves:
    batch: float  # requests per wave on one unit
    burst_s: float  # prefill of one wave's prompts
    tpot_s: float
    ttft_mean_s: float  # engine side
    ttft_p99_s: float
    duration_s: float  # all of a unit's requests, first arrival to last finish


def identical(traffic: Traffic) -> bool:
    return traffic.input_cv2 <= FIXED_CV2 and traffic.output_cv2 <= FIXED_CV2


def burst_steps(unit: Unit, traffic: Traffic, prompts: float) -> int:
    """Full steps (Unit.burst_tokens_per_step) that prefill `prompts` prompts together."""
    per_step = unit.burst_tokens_per_step(traffic.input_mean)
    return max(1, math.ceil(prompts * traffic.input_mean / per_step))


def burst_s(unit: Unit, traffic: Traffic, prompts: float) -> float:
    """Prefill of `prompts` prompts together, in full steps (burst_steps)."""
    tokens = prompts * traffic.input_mean
    steps = burst_steps(unit, traffic, prompts)
    return steps * unit.step_s(0.0, tokens / steps, prompts / steps, 0.0)


def waves(unit: Unit, traffic: Traffic, population: float, requests: float,
          offline: bool) -> Waves:
    """`requests` identical requests through one unit, `population` of them in flight."""
    cap, _ = batch_limit(unit, traffic)
    b = max(1.0, min(population, math.floor(cap), requests))
    d = decode_steps(traffic, unit)

    def wave_s(size: float) -> tuple[float, float, float]:
        burst = burst_s(unit, traffic, size)
        t0 = unit.step_s(size, 0.0, 0.0, 0.0)
        # A request's decode also waits through the rest of its wave's burst (half of it on
        # average): prefill-first steps stall decoders, and mixed steps are full chunks. Its
        # d steps emit d·τ tokens (τ > 1 under speculation): TPOT is per token, not per step.
        tpot = (t0 * d + burst / 2) / (d * unit.tokens_per_step) if d > 0 else 0.0
        return burst, tpot, burst + d * t0

    burst, tpot, full = wave_s(b)
    k = math.floor(requests / b)
    rest = requests - k * b
    duration = k * full + (wave_s(rest)[2] if rest >= 1 else 0.0)
    queued = max(0.0, min(population, requests) - b)  # in flight but waiting for a seat
    behind = queued / b * full  # waves ahead of a waiting request
    # The burst's n equal steps hand out first tokens at the end of each step: 1/n of the
    # wave at every step boundary, so on average (n + 1) / 2n of the burst (all of it when
    # the wave's prompts fit one step, as a single client's always do).
    n = burst_steps(unit, traffic, b)
    first = burst * (n + 1) / (2 * n)
    if offline:
        waits = (requests / b - 1) * full
        mean, p99 = first + waits / 2, burst + 0.99 * waits
    else:
        mean, p99 = first + behind, burst + behind
    return Waves(b, burst, tpot, mean, p99, duration)
