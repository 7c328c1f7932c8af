"""Closed-form estimate of a scenario, before (or instead of) its simulation.

The fluid steady state of `steady_state` on each scheduling unit of the deployment, with
queueing waits from the standard approximations, turned into the result's own metrics
(client-side TTFT, TPOT, tokens/s per GPU and per user) and, for the sweep screen, the values
a run of this scenario's `num_requests` requests would report (a finite run also spends the
time its last requests take to drain). What it leaves to the simulation is said in `NOT_MODELLED`
and, per scenario, in `notes`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from simulator.closed_form.scenario_load import (
    Loaded,
    SideIn,
    closed_population,
    deployment_capacity_per_s,
    load_sides,
)
from simulator.closed_form.sides import (
    Side,
    pool_prefill_wait_s,
    prefill_tail_tpot_s,
    queue_wait_s,
    side_tpot_s,
)
from simulator.closed_form.steady_state import (
    Traffic,
    batch_limit,
    capacity,
    decode_steps,
    kv_batch_limit,
)
from simulator.closed_form.stream_moments import (
    arrival_cv2,
    offered_rate_per_s,
    refused_requests,
    traffic_of,
)
from simulator.closed_form.unit_build import make_unit
from simulator.closed_form.waves import identical, waves
from simulator.engines.style import FrontEnd
from simulator.errors import InputError
from simulator.inputs.deployment import DisaggregatedDeployment
from simulator.inputs.scenario import (
    ClosedLoopArrival,
    OfflineArrival,
    Scenario,
)
from simulator.serving.engine_build import Engine
from simulator.serving.ranks_setup import replicas_per_engine
from simulator.workload.stream import RequestStream

NOT_MODELLED = (
    "queueing tails beyond the exponential-tail approximation (bursts, head-of-line blocking "
    "behind long prompts)",
    "preemption and recompute when on-demand KV runs out (the estimate caps the batch at the "
    "KV cache instead)",
    "the batch's ups and downs step by step (the estimate uses its mean, and a Poisson spread "
    "for TPOT p99)",
    "the start-up burst and end-of-run drain except as corrections to the run's throughput and "
    "mean TTFT (the first wave waits half its burst's prefill on average)",
)


@dataclass(frozen=True)
class Estimate:
    """The fluid estimate of one scenario (seconds; `to_dict` gives milliseconds)."""

    kind: str  # how the deployment was modelled
    stable: bool  # the offered load is below capacity
    limit: str  # what caps the batch at capacity
    units: int  # schedulers the load spreads over
    rate_per_s: float  # requests/s served (closed loop: what the concurrency drives)
    capacity_per_s: float  # most requests/s the deployment sustains
    batch: float  # mean decode batch per unit
    batch_limit: float  # largest mean batch per unit
    kv_limit_seqs: float  # sequences the KV cache holds per unit at the mean footprint
    kv_capacity_tokens: int  # per unit
    step_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    ttft_mean_s: float
    ttft_p99_s: float
    queue_mean_s: float
    output_tokens_per_s: float
    output_tokens_per_s_per_gpu: float
    output_tokens_per_s_per_user_p50: float
    run_output_tokens_per_s_per_gpu: float  # over num_requests, drain included
    num_gpus: int
    notes: tuple[str, ...] = field(default_factory=tuple)
    requests_refused: int = 0  # requests the engine drops on arrival (context, KV, budget)

    def to_dict(self) -> dict[str, Any]:
        ms = 1e3
        return {
            "kind": self.kind, "stable": self.stable, "limit": self.limit, "units": self.units,
            "requests_per_s": self.rate_per_s, "capacity_requests_per_s": self.capacity_per_s,
            "batch": self.batch, "batch_limit": self.batch_limit,
            "kv_limit_seqs": self.kv_limit_seqs, "kv_capacity_tokens": self.kv_capacity_tokens,
            "step_ms": self.step_s * ms,
            "tpot_ms": {"p50": self.tpot_p50_s * ms, "p99": self.tpot_p99_s * ms},
            "ttft_ms": {"mean": self.ttft_mean_s * ms, "p99": self.ttft_p99_s * ms},
            "queue_mean_ms": self.queue_mean_s * ms,
            "output_tokens_per_s": self.output_tokens_per_s,
            "output_tokens_per_s_per_gpu": self.output_tokens_per_s_per_gpu,
            "output_tokens_per_s_per_user_p50": self.output_tokens_per_s_per_user_p50,
            "run_output_tokens_per_s_per_gpu": self.run_output_tokens_per_s_per_gpu,
            "num_gpus": self.num_gpus, "requests_refused": self.requests_refused,
            "notes": list(self.notes),
            "not_modelled": list(NOT_MODELLED),
        }


def estimate(scenario: Scenario, engine: Engine, stream: RequestStream) -> Estimate:
    """The fluid estimate of `scenario` on `engine` for the requests of `stream`."""
    _check_content(scenario, engine)
    dep = scenario.deployment
    notes: list[str] = []
    front = engine.style.front_end
    if isinstance(dep, DisaggregatedDeployment):
        assert engine.prefill_pool is not None and engine.kv_link is not None
        pre = engine.prefill_pool
        t_pre = traffic_of(stream, reserve_full=pre.scheduler.reserve_full)
        t_dec = traffic_of(stream, True, engine.scheduler.reserve_full)
        up, per_p = make_unit(pre.replica_model, pre.style, pre.scheduler,
                              t_pre.decode_context, prefills_only=True)
        tau, k, tree = _speculation(engine, notes)
        ud, per_d = make_unit(engine.replica_model, engine.style, engine.scheduler,
                              t_dec.decode_context, decodes_first_token=True,
                              first_token_from_prefill=pre.style.prefill_emits_first_token,
                              tokens_per_step=tau, verify_tokens=k, tree_tokens=tree)
        sides = [(up, t_pre, dep.prefill.replicas * per_p),
                 (ud, t_dec, dep.decode.replicas * per_d)]
        kind = "disaggregated: prefill pool as batched prefill-only steps, decode pool as " \
               "decode-only steps, KV transfer between"
        notes.append("disaggregated: a pool's attention-DP ranks and pipeline stages are "
                     "costed as one replica's even split")
    else:
        traffic = traffic_of(stream, reserve_full=engine.scheduler.reserve_full)
        tau, k, tree = _speculation(engine, notes)
        model = engine.replica_model
        unit, per = make_unit(model, engine.style, engine.scheduler, traffic.decode_context,
                              tokens_per_step=tau, verify_tokens=k, tree_tokens=tree)
        count = dep.replicas * replicas_per_engine(dep, engine.arch) * per
        sides = [(unit, traffic, count)]
        lay = engine.step_model.layout
        bits = [f"{count} unit(s)"]
        if lay.attention_data_parallel > 1:
            bits.append(f"attention-DP {lay.attention_data_parallel} ranks stepping together, "
                        f"load split evenly (no rank imbalance)")
        if lay.pipeline_parallel > 1:
            bits.append(f"pipeline {lay.pipeline_parallel}: a slot's step every max(latency, "
                        f"slots x slowest stage)")
        if not unit.mixes:
            bits.append("prefill-only steps interleaved, prefill first")
        kind = "aggregated: " + "; ".join(bits)
    return _assemble(scenario, engine, stream, sides, kind, notes, front)


def _speculation(engine: Engine, notes: list[str]) -> tuple[float, int, int]:
    """(τ, k, tree size) of the engine's decode steps ((1, 0, 0) without speculation), with
    the notes that say what the estimate assumed and what the build chose."""
    spec = engine.speculative
    if spec is None:
        return 1.0, 0, 0
    tau = spec.expected_acceptance_length
    k = spec.config.num_speculative_tokens
    tree = spec.config.tree_tokens or 0
    shape = f"a {tree}-token tree of depth {k}" if tree else f"{k} drafts"
    notes.extend(spec.notes)
    notes.append(f"speculative: every decode step emits the mean acceptance length "
                 f"{tau:.2f} tokens, verifying {shape}")
    if engine.step_model.layout.attention_data_parallel > 1:
        notes.append("speculative with attention-DP ranks: each rank drafts and verifies its "
                     "own sequences, the MoE layers take every rank's verified tokens")
    return tau, k, tree


def _assemble(scenario: Scenario, engine: Engine, stream: RequestStream,
              sides_in: list[SideIn], kind: str, notes: list[str],
              front: FrontEnd) -> Estimate:
    """The estimate's metrics from the deployment's sides: load them, sum the TTFT a request
    sees across them, and correct for a finite run's start-up burst, backlog and drain."""
    n_req = len(stream)
    gpus = scenario.num_gpus
    a = scenario.workload.arrival
    offline = isinstance(a, OfflineArrival)
    traffic = sides_in[-1][1]
    cv2 = arrival_cv2(scenario, traffic)
    offset_mean, offset_p99 = _client_offsets_s(front, sides_in[0][1])
    cap_total = deployment_capacity_per_s(sides_in)
    rate_in = offered_rate_per_s(scenario, stream)
    population = closed_population(scenario, rate_in, n_req)
    load = load_sides(sides_in, engine, stream, rate_in, population, cap_total, cv2,
                      offset_mean)
    notes.extend(load.notes)
    sides, rate = load.sides, load.rate_per_s
    stable = all(s.stable for s in sides) and rate <= cap_total * (1 + 1e-9)
    dec = sides[-1]
    ttft_mean, ttft_p99, queue_mean, after_first_s = _steady_ttft_s(
        load, sides_in, engine, cv2, offline, n_req)
    tpot50, tpot99 = side_tpot_s(dec, traffic)
    if population is None:  # open arrivals: a closed loop sends as requests finish
        tpot99 = max(tpot99, prefill_tail_tpot_s(dec, traffic, stream.input_tokens,
                                                 stream.output_tokens))
    if isinstance(a, ClosedLoopArrival | OfflineArrival) and population is not None:
        ttft_mean, ttft_p99 = _first_wave_ttft_s(sides_in, population, n_req, ttft_mean,
                                                 ttft_p99, ttft_mean - queue_mean,
                                                 engine.burst_rounds(scenario.workload))
    if not stable and population is None and rate > 0:
        cap_total, base, growth = _backlog_s(sides, n_req, rate, cap_total)
        ttft_mean, ttft_p99 = base + growth / 2, base + 0.99 * growth
        drain_ttft = base
    else:
        drain_ttft = ttft_mean
    ttft_mean += offset_mean
    ttft_p99 += offset_p99
    out_tok = traffic.output_mean
    served = min(rate, cap_total)
    tps = served * out_tok
    e2e = drain_ttft + offset_mean + after_first_s + decode_steps(traffic, dec.unit) * dec.op.step_s
    run_tps = _run_throughput(scenario, stream, served, out_tok, e2e, population)
    batch = dec.op.batch
    if population is not None and len(sides_in) == 1 and identical(traffic) and (
            offline or population <= dec.count):
        active = max(1.0, min(float(dec.count), population))  # fewer in flight than units
        w = waves(dec.unit, traffic, population / active, n_req / active, offline)
        notes.append("identical requests in lockstep: synchronized waves (one prefill "
                     "burst, then lockstep decode)")
        tpot50 = tpot99 = w.tpot_s
        ttft_mean, ttft_p99 = w.ttft_mean_s + offset_mean, w.ttft_p99_s + offset_p99
        run_tps = n_req * out_tok / w.duration_s if w.duration_s > 0 else 0.0
        batch = w.batch
    cap_b, why = batch_limit(dec.unit, traffic)
    if dec.unit.kv_tokens < traffic.input_mean + traffic.output_mean + dec.unit.state_tokens:
        notes.append("the KV cache of one unit holds less than one mean request: requests "
                     "are refused (requests_dropped), which the estimate does not model")
        stable = False
    return Estimate(
        kind, stable, why if not dec.unit.prefills_only else dec.limit, dec.count, served,
        cap_total, batch, cap_b, kv_batch_limit(dec.unit, traffic),
        dec.unit.kv_tokens, dec.op.step_s, tpot50, tpot99, ttft_mean,
        ttft_p99, queue_mean, tps, tps / gpus, 1.0 / tpot50 if tpot50 > 0 else math.inf,
        run_tps / gpus, gpus, tuple(notes), refused_requests(engine, stream),
    )


def _check_content(scenario: Scenario, engine: Engine) -> None:
    """Refuse what the estimate would get silently wrong: sessions (think times between
    turns; the history found cached) and a cached shared prefix."""
    w = scenario.workload
    first = engine.prefill_pool if engine.prefill_pool is not None else engine
    if w.sessions is not None:
        raise InputError(
            "workload.sessions: the closed-form estimate does not model sessions (the pause "
            "between turns, the history found in the prefix cache); run `frontier simulate`")
    if w.shared_prefix is not None and first.scheduler.prefix_caching:
        raise InputError(
            "workload.shared_prefix: the closed-form estimate does not model prefix caching; "
            "run `frontier simulate`, or set deployment.scheduler.prefix_caching: false to "
            "estimate the uncached prompts")


def _client_offsets_s(front: FrontEnd, traffic: Traffic) -> tuple[float, float]:
    """(mean, p99) of what the client adds to TTFT before the engine sees the prompt: the
    front end's offset (FrontEnd.client_offset_s) for the mean and the p99 prompt."""
    return (front.client_offset_s(traffic.input_mean), front.client_offset_s(traffic.input_p99))


def _steady_ttft_s(load: Loaded, sides_in: list[SideIn], engine: Engine, cv2: float,
                   offline: bool, n_req: int) -> tuple[float, float, float, float]:
    """(mean TTFT, p99 TTFT, mean queue, transfer after the first token) in the steady state:
    queue + prefill (+ transfer and the first decode step when disaggregated, unless the
    prefill replica emits the first token itself, when the transfer follows it)."""
    sides = load.sides
    ttft_mean = ttft_p99 = 0.0
    queue_mean = 0.0
    after_first_s = 0.0  # the transfer, when it falls between the first and second token
    for side, (unit, traffic_s, count) in zip(sides, sides_in, strict=True):
        if unit.first_token_from_prefill:
            assert engine.kv_link is not None
            after_first_s = engine.kv_link.exposed_s(round(traffic_s.input_mean),
                                                     sides[0].op.prefill_s)
            continue
        if unit.decodes_first_token:
            link = engine.kv_link
            assert link is not None
            pre_s = sides[0].op.prefill_s
            xfer = link.exposed_s(round(traffic_s.input_mean), pre_s)
            ttft_mean += xfer + side.op.step_s * 1.5
            ttft_p99 += link.exposed_s(round(traffic_s.input_p99), pre_s) + side.op.step_s * 2
            continue
        q_mean, q_p99 = _prefill_wait_s(load, side, traffic_s, count, cv2, offline, n_req)
        queue_mean += q_mean
        scale = traffic_s.input_p99 / max(traffic_s.input_mean, 1.0)
        ttft_mean += q_mean + side.op.prefill_s
        ttft_p99 += q_p99 + side.op.prefill_s * max(1.0, scale)
    return ttft_mean, ttft_p99, queue_mean, after_first_s


def _prefill_wait_s(load: Loaded, side: Side, traffic: Traffic, count: int, cv2: float,
                    offline: bool, n_req: int) -> tuple[float, float]:
    """(mean, p99) wait before a request's prefill starts on `side`: its queue, the seat a
    closed loop waits for (an offline backlog's request j waits ~ j / rate), and no more than
    a finite open run's own requests take."""
    rate, population = load.rate_per_s, load.population
    if side.unit.prefills_only and population is not None:  # closed loop over the pools
        q_mean, q_p99 = pool_prefill_wait_s(side, traffic, cv2, rate / count, population)
        q_mean, q_p99 = q_mean + load.excess_s, q_p99 + load.excess_s
    else:
        q_mean, q_p99 = queue_wait_s(side, traffic, cv2, rate / count, population is not None)
    if offline:  # request j of the backlog waits ~ j / rate
        q_mean += side.seat_wait_s / 2
        q_p99 += side.seat_wait_s * 0.99
    else:
        q_mean += side.seat_wait_s
        q_p99 += side.seat_wait_s
    if population is None and side.stable and side.cap_per_s > 0:
        # A finite run's queue holds at most its own requests.
        whole_s = n_req / count / side.cap_per_s
        q_mean, q_p99 = min(q_mean, whole_s / 2), min(q_p99, whole_s)
    return q_mean, q_p99


def _first_wave_ttft_s(sides_in: list[SideIn], population: float, n_req: int,
                       ttft_mean: float, ttft_p99: float, unqueued_s: float,
                       rounds: float = 1.0) -> tuple[float, float]:
    """(mean, p99) TTFT with the start-up burst: everyone arrives at once, so the last of the
    first wave waits for all their prompts to be prefilled (`unqueued_s`: a request's TTFT
    without the steady state's queue, what the wave's waits come on top of). The wave's TTFT
    holds for `rounds` rounds (the engine style's closed_loop_burst_rounds: how long the
    train of arrivals the burst leaves persists; docs/closed-loops.md)."""
    first = min(population, n_req)
    burst = first / sides_in[0][2]
    unit0, t0, _ = sides_in[0]
    per_s = capacity(unit0, t0)[0]
    per_step = unit0.burst_tokens_per_step(t0.input_mean)
    prefill_rate = per_step / max(
        unit0.step_s(0.0, per_step, max(1.0, per_step / t0.input_mean), 0.0), 1e-12)
    wave = burst * t0.input_mean / prefill_rate
    if first / n_req >= 0.01:
        ttft_p99 = max(ttft_p99, wave + per_s.decode_step_s)
    # The first wave's requests wait on average half the burst's prefill before their own
    # (the burst simulated as a run of its own agrees: tests/test_first_round.py), and none
    # of the steady state's queue; the rest of the run sees the steady state. The run's mean
    # weighs the two by their counts.
    share = min(1.0, rounds * first / n_req)
    ttft_mean = (1 - share) * ttft_mean + share * max(ttft_mean, unqueued_s + wave / 2)
    return ttft_mean, ttft_p99


def _backlog_s(sides: tuple[Side, ...], n_req: int, rate: float,
               cap_total: float) -> tuple[float, float, float]:
    """(capacity, base TTFT, backlog growth) of an overloaded open loop: the backlog grows
    through the run, request j waiting about j (1/capacity - 1/rate) on top of the base."""
    dec = sides[-1]
    if not dec.unit.prefills_only and dec.op.rate_per_s > 0:  # the run's own batch limit
        cap_total = min(cap_total, dec.op.rate_per_s * dec.count)
    growth = n_req * max(0.0, 1 / cap_total - 1 / rate)
    base = sum(s.op.prefill_s for s in sides) + dec.op.step_s
    return cap_total, base, growth


def _run_throughput(scenario: Scenario, stream: RequestStream, rate: float, out_tok: float,
                    e2e_s: float, population: float | None) -> float:
    """Output tokens/s as the run measures it: all tokens over first arrival to last finish."""
    n = len(stream)
    if rate <= 0:
        return 0.0
    if population is None:
        t = stream.arrival_s
        span = float(t[-1] - t[0]) if n > 1 else 0.0
        duration = max(span, n / rate) + e2e_s
    else:  # Little's law over the run: the last wave's drain is inside n / rate
        del e2e_s
        duration = n / rate
    return n * out_tok / duration if duration > 0 else 0.0
