"""Run a built engine: replicas, a router and a request source in SimPy; collect records."""

from __future__ import annotations

import itertools
import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt
from simpy.events import URGENT

from simulator.inputs.deployment import DisaggregatedDeployment
from simulator.inputs.scenario import Scenario
from simulator.serving.disaggregated import DisaggregatedPools
from simulator.serving.engine_build import Engine, pool_spec
from simulator.serving.front_end import FrontEndQueue
from simulator.serving.ranks_setup import (
    dense_dp_notes,
    imbalance_share,
    make_replicas,
    pipeline_summary,
)
from simulator.serving.records import DROP_BUDGET, DROP_CONTEXT, DROP_KV, RECORD_DTYPE
from simulator.serving.replica import Clock, Replica, StepLog
from simulator.serving.request import Request
from simulator.serving.router import ROUTERS
from simulator.serving.spec_engine import VerifyTally, speculative_stats
from simulator.workload.stream import RequestStream

TIMESERIES_COLUMNS = (
    "time_s",
    "replica",
    "batch_seqs",
    "decode_seqs",
    "prefill_tokens",
    "running",
    "waiting",
    "kv_used_fraction",
    "step_time_s",
    "compute_s",
    "memory_s",
    "communication_s",
    "overhead_s",
    "host_s",
)


@dataclass
class RunOutput:
    records: npt.NDArray[Any]
    step_log: StepLog
    resume_gaps_s: list[float]
    status: str  # completed | time_limit | queue_limit
    preemptions: int
    warnings: list[str] = field(default_factory=list)
    busy_s: list[float] = field(default_factory=list)
    decode_end_s: list[npt.NDArray[np.float64]] = field(default_factory=list)  # per replica
    token_history: dict[int, tuple[list[tuple[int, int]], list[float]]] = field(
        default_factory=dict
    )  # preempted requests only: (earlier decode-step ranges, re-prefill token times)
    end_s: float = 0.0
    pools: DisaggregatedPools | None = None  # disaggregated runs: both pools and transfers
    speculative: dict[str, Any] | None = None  # the result's `speculative` block
    # Speculative runs: per request, the tokens it emitted at each of its decode steps.
    spec_emitted: dict[int, npt.NDArray[np.int64]] = field(default_factory=dict)
    attention_dp_imbalance_share: float | None = None  # attention-DP runs: waits for the slowest
    pipeline: dict[str, Any] | None = None  # pipeline-parallel runs: stages and bubbles


CheckHook = Callable[[Replica, Any, float], None]
UNSTABLE_MIN_REQUESTS = 8  # fewer arrivals say nothing about a trend


def run(
    scenario: Scenario,
    engine: Engine,
    stream: RequestStream,
    *,
    timeseries: bool = False,
    check: CheckHook | None = None,
) -> RunOutput:
    """Simulate the request stream through the deployment's replicas."""
    dep = scenario.deployment
    n = len(stream)
    records = np.zeros(n, dtype=RECORD_DTYPE)
    for name in ("arrival_s", "scheduled_s", "first_token_s", "finish_s"):
        records[name] = math.nan
    records["input_tokens"] = stream.input_tokens
    records["output_tokens"] = stream.output_tokens
    records["replica"] = -1
    records["decode_first_step"] = -1
    records["decode_last_step"] = -1
    token_history: dict[int, tuple[list[tuple[int, int]], list[float]]] = {}
    spec_emitted: dict[int, npt.NDArray[np.int64]] = {}
    verify_tally = VerifyTally.empty(n if engine.speculative is not None else 0)

    env = Clock()
    log = StepLog(timeseries)
    stop = env.event()
    state = {"ended": 0, "next": 0}
    max_context = engine.max_model_len or engine.arch.max_position_embeddings
    cfg = engine.scheduler
    limits = scenario.limits

    # Finished requests' fields, appended in finishing order to typed arrays (a numpy record
    # write per field costs microseconds) and scattered into `records` a few thousand at a time.
    arrival_s = array("d", [math.nan]) * n
    front_end_s = array("d", [0.0]) * n
    done = FinishedColumns(records)
    style = engine.style
    front = FrontEndQueue(
        style.front_end, style.serial_front_end, scenario.workload.arrival.kind != "offline"
    )

    def finish(r: Request) -> None:
        done.add(r)
        if r.past_segments is not None or r.resume_tokens_s is not None:
            token_history[r.index] = (r.past_segments or [], r.resume_tokens_s or [])
        if r.spec_done is not None:
            spec_emitted[r.index] = np.concatenate(r.spec_done)
            verify_tally.add(r)
        ended()

    def ended() -> None:
        state["ended"] += 1
        if state["ended"] == n and not stop.triggered:
            stop.succeed("completed")
        elif stream.closed_loop_concurrency is not None:
            send_next()

    if engine.speculative is not None:
        cfg = replace(
            cfg, speculative=engine.speculative.decoding(stream, scenario.workload.seed, cfg)
        )
    route = ROUTERS[dep.router]
    pools: DisaggregatedPools | None = None
    warnings_pre: list[str] = []
    make_request: Callable[[int, float, int, int, int], Request] = Request
    fits_ever: Callable[[int, int], bool]
    if isinstance(dep, DisaggregatedDeployment):
        assert engine.prefill_pool is not None and engine.kv_link is not None
        pools = DisaggregatedPools(
            env, pool_spec(engine.prefill_pool, dep.prefill), pool_spec(engine, dep.decode),
            engine.kv_link, route, stream.output_tokens, finish, log, check,
        )
        replicas, everyone, cfg = pools.prefill, pools.replicas, engine.prefill_pool.scheduler
        fits_ever = pools.fits_ever
        make_request = pools.entry_request
    else:
        parts = (engine.replica_model, engine.style, cfg)
        replicas = make_replicas(dep, engine.arch, parts, env, finish, log, check)
        warnings_pre = dense_dp_notes(dep, engine.arch)
        everyone = replicas
        first = replicas[0].sched
        fits_ever = first.fits_ever_tokens

    # Python ints and floats of the stream's arrays (numpy scalars are slower to compute with).
    input_at, output_at, priority_at = (
        stream.input_tokens.item, stream.output_tokens.item, stream.priority.item)

    def send(i: int) -> bool:
        """Send request i now: through the front end, then routed to a replica; False if it
        was dropped on arrival."""
        inp, out = input_at(i), output_at(i)
        now = env._now
        ready = front.ready_s(now, inp)
        front_end_s[i] = front.client_side_s(now, ready, inp)
        arrival_s[i] = ready  # when the engine has it; records hold engine-side instants
        reason = 0
        if inp + out > max_context:
            reason = DROP_CONTEXT
        elif not fits_ever(inp, out):
            reason = DROP_KV
        elif not cfg.chunked_prefill and inp > cfg.max_num_batched_tokens:
            reason = DROP_BUDGET
        if reason:
            records[i]["drop_reason"] = reason
            state["ended"] += 1
            if state["ended"] == n and not stop.triggered:
                stop.succeed("completed")
            return False
        if ready > now:
            env.call_later(ready - now, lambda _e: deliver(i, inp, out))
        else:
            deliver(i, inp, out)
        return True

    cap = limits.max_waiting_requests

    def deliver(i: int, inp: int, out: int) -> None:
        """Hand request i, past the front end, to the replica the router picks."""
        r = make_request(i, env._now, inp, out, priority_at(i))
        target = route(replicas, i)
        assert isinstance(target, Replica)
        target.submit(r)
        if cap is not None and target.waiting_count > cap and not stop.triggered:
            stop.succeed("queue_limit")

    def send_next() -> None:
        """Closed loop: keep one more request in flight (skipping any dropped on arrival)."""
        while state["next"] < n:
            i = state["next"]
            state["next"] = i + 1
            if send(i):
                return

    # Waiting requests (all replicas) just after the arrivals that end each quarter of the
    # stream: the evidence for the "unstable" warning. Offline runs queue everything at t=0
    # by design, so they are not sampled.
    queue_marks: list[int] = []
    quarter_ends: set[int] = set()
    if n >= UNSTABLE_MIN_REQUESTS and stream.arrival_s[-1] > stream.arrival_s[0]:
        quarter_ends = {n * k // 4 - 1 for k in (1, 2, 3, 4)}

    arrival_at = stream.arrival_s.item  # a float clock: numpy scalars are slower

    def open_loop(_e: object = None) -> None:
        """Send every request due by now, then wake at the next one's arrival (a chain of
        callbacks, in the order a SimPy process yielding timeouts would run them)."""
        i = state["next"]
        while i < n:
            delay = arrival_at(i) - env.now
            if delay > 0:
                env.call_later(delay, open_loop)
                return
            state["next"] = i + 1
            send(i)
            if i in quarter_ends:
                queue_marks.append(sum(rep.waiting_count for rep in everyone))
            i += 1
        env.call_later(0.0, _done)  # where the process's own end event would be

    if stream.closed_loop_concurrency is not None:
        for _ in range(min(stream.closed_loop_concurrency, n)):
            send_next()
    else:
        env.call_later(0.0, open_loop, URGENT)  # as a process started now would first run

    if limits.max_simulated_time_s is not None:
        horizon_s = float(limits.max_simulated_time_s)

        def timer() -> Any:
            yield env.timeout(horizon_s)
            if not stop.triggered:
                stop.succeed("time_limit")

        env.process(timer())

    if n == 0:
        status = "completed"
    else:
        try:
            status = str(env.run_until(stop))
        except RuntimeError as exc:  # no events left yet requests unfinished: a scheduler bug
            raise RuntimeError(f"simulation stalled with requests in flight: {exc}") from None
    for rep in everyone:  # a replica asleep in a run of decode steps commits those ended
        rep.settle()
    records["arrival_s"] = np.frombuffer(arrival_s, dtype=np.float64)
    records["front_end_s"] = np.frombuffer(front_end_s, dtype=np.float64)
    done.scatter()
    warnings: list[str] = [] if pools is not None else warnings_pre
    batch_cap = sum(rep.max_num_seqs for rep in replicas)
    if unstable_queue(queue_marks, batch_cap):
        marks = ", ".join(str(q) for q in queue_marks)
        warnings.append(
            f"unstable: queue grew throughout the run (waiting requests after 25/50/75/100% of "
            f"the arrivals: {marks}; more than max_num_seqs × replicas = {batch_cap} at the "
            f"last arrival): requests arrive faster than the deployment serves them, so "
            f"latencies grow with num_requests; lower the rate or add capacity"
        )
    decoders = pools.decode if pools is not None else replicas
    return RunOutput(
        records,
        log,
        [g for rep in everyone for g in rep.resume_gaps_s]
        + (pools.first_gaps_s if pools is not None else []),
        status,
        sum(rep.preemptions for rep in everyone),
        warnings=warnings,
        busy_s=[rep.busy_s for rep in everyone],
        decode_end_s=[
            np.frombuffer(clock, dtype=np.float64) for rep in decoders for clock in rep.clocks()
        ],
        attention_dp_imbalance_share=imbalance_share(replicas),
        pipeline=pipeline_summary(replicas),
        token_history=token_history,
        end_s=float(env.now),
        pools=pools,
        speculative=speculative_stats(engine.speculative, cfg, replicas, stream, verify_tally),
        spec_emitted=spec_emitted,
    )


def _done(_e: object) -> None:
    """The open loop's end: nothing waits on it."""


class FinishedColumns:
    """The record fields of finished requests, one typed array per field, written into the
    records in blocks (vectorized) as they fill."""

    FLOATS = ("scheduled_s", "first_token_s", "finish_s")
    INTS = ("preemptions", "replica", "decode_first_step", "decode_last_step")

    def __init__(self, records: npt.NDArray[Any]) -> None:
        self.records = records
        self._new_columns()

    def _new_columns(self) -> None:
        self.index = array("q")
        self.cols: dict[str, array[Any]] = {name: array("d") for name in self.FLOATS}
        self.cols.update({name: array("q") for name in self.INTS})
        c = self.cols
        self._appends = (
            self.index.append, c["scheduled_s"].append, c["first_token_s"].append,
            c["finish_s"].append, c["preemptions"].append, c["replica"].append,
            c["decode_first_step"].append, c["decode_last_step"].append,
        )

    FLUSH_EVERY = 4096  # rows held before they are written into the records

    def add(self, r: Request) -> None:
        index, scheduled, first, finish, preemptions, replica, d_first, d_last = self._appends
        index(r.index)
        scheduled(r.scheduled_s)
        first(r.first_token_s)
        finish(r.finish_s)
        preemptions(r.preemptions)
        replica(r.replica)
        d_first(r.decode_start_step if r.decode_last_step >= 0 else -1)
        d_last(r.decode_last_step)
        if len(self.index) >= self.FLUSH_EVERY:
            self.scatter()

    def scatter(self) -> None:
        """Write the rows held so far into the records, and let them go."""
        idx = np.frombuffer(self.index, dtype=np.int64)
        for name, col in self.cols.items():
            kind = np.float64 if name in self.FLOATS else np.int64
            self.records[name][idx] = np.frombuffer(col, dtype=kind)
        del idx
        self._new_columns()


def unstable_queue(marks: list[int], batch_cap: int) -> bool:
    """The rule of the "unstable" warning: waiting requests sampled at the end of each quarter
    of the arrivals rose every quarter, and at the last arrival more wait than one full batch
    of every replica could take (max_num_seqs × replicas)."""
    return (
        len(marks) == 4
        and all(a < b for a, b in itertools.pairwise(marks))
        and marks[-1] > batch_cap
    )

