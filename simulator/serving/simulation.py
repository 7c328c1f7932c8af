"""Run a built engine: replicas, a router and a request source in SimPy; collect records."""

from __future__ import annotations

import itertools
import math
from array import array
from collections.abc import Callable, Generator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import simpy

from simulator.inputs.deployment import DisaggregatedDeployment
from simulator.inputs.scenario import Scenario
from simulator.serving.clock import Clock
from simulator.serving.disaggregated import DisaggregatedPools
from simulator.serving.engine_build import Engine, pool_spec
from simulator.serving.finished import FinishedColumns
from simulator.serving.front_end import FrontEndQueue
from simulator.serving.ranks_setup import (
    dense_dp_notes,
    imbalance_share,
    make_replicas,
    pipeline_summary,
)
from simulator.serving.records import (
    DROP_BUDGET,
    DROP_CONTEXT,
    DROP_KV,
    DROP_SESSION,
    RECORD_DTYPE,
)
from simulator.serving.replica import Replica, StepLog
from simulator.serving.request import Request
from simulator.serving.router import ROUTERS
from simulator.serving.session_turns import SessionTurns
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
    # Prefix caching, summed over the KV pools: idle blocks evicted for room, and the host
    # tier's capacity and blocks written, loaded back and let go (serving/prefix_cache.py).
    cache_stats: dict[str, int] = field(default_factory=dict)


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
    state = RunState(scenario, engine, stream, timeseries, check)
    return run_output(state, state.go(), engine)


def new_records(stream: RequestStream) -> npt.NDArray[Any]:
    """One record per request of the stream, its times unknown (NaN) until they happen."""
    records = np.zeros(len(stream), dtype=RECORD_DTYPE)
    for name in ("arrival_s", "scheduled_s", "first_token_s", "finish_s"):
        records[name] = math.nan
    records["input_tokens"] = stream.input_tokens
    records["output_tokens"] = stream.output_tokens
    records["replica"] = -1
    records["decode_first_step"] = -1
    records["decode_last_step"] = -1
    return records


class RunState:
    """One run in progress: the clock, the replicas and their router, the request source,
    and what is recorded of each request. Sends each request through the front end to a
    replica (open loop: at its arrival time; closed loop: as another ends), and stops the
    clock when every request has ended or a limit is reached."""

    def __init__(self, scenario: Scenario, engine: Engine, stream: RequestStream,
                 timeseries: bool, check: CheckHook | None) -> None:
        self.stream, self.limits = stream, scenario.limits
        self.n = n = len(stream)
        self.records = new_records(stream)
        self.token_history: dict[int, tuple[list[tuple[int, int]], list[float]]] = {}
        self.spec_emitted: dict[int, npt.NDArray[np.int64]] = {}
        self.verify_tally = VerifyTally.empty(n if engine.speculative is not None else 0)
        self.env = Clock()
        self.log = StepLog(timeseries)
        self.stop = self.env.event()
        self.ended_count = 0  # requests finished or dropped
        self.next = 0  # closed loop: the next request to send
        self.max_context = engine.max_model_len or engine.arch.max_position_embeddings
        self.queue_cap = scenario.limits.max_waiting_requests
        # Finished requests' fields, appended in finishing order to typed arrays (a numpy record
        # write per field costs microseconds) and scattered into `records` a few thousand at a
        # time.
        self.arrival_s = array("d", [math.nan]) * n
        self.front_end_s = array("d", [0.0]) * n
        self.done = FinishedColumns(self.records, stream.content is not None)
        style = engine.style
        self.front = FrontEndQueue(
            style.front_end, style.serial_front_end, scenario.workload.arrival.kind != "offline"
        )
        self._build_replicas(scenario, engine, check)
        # Python ints and floats of the stream's arrays (numpy scalars are slower to compute
        # with).
        self.input_at, self.output_at, self.priority_at = (
            stream.input_tokens.item, stream.output_tokens.item, stream.priority.item)
        self.arrival_at = stream.arrival_s.item
        self.content = stream.content
        self.sessions = SessionTurns(stream) if stream.session is not None else None
        # Waiting requests (all replicas) just after the arrivals that end each quarter of the
        # stream: the evidence for the "unstable" warning. Offline runs queue everything at
        # t=0 by design, so they are not sampled.
        self.queue_marks: list[int] = []
        self.quarter_ends: set[int] = set()
        if n >= UNSTABLE_MIN_REQUESTS and stream.arrival_s[-1] > stream.arrival_s[0]:
            self.quarter_ends = {n * k // 4 - 1 for k in (1, 2, 3, 4)}

    def _build_replicas(self, scenario: Scenario, engine: Engine,
                        check: CheckHook | None) -> None:
        """The replicas requests are routed to (a disaggregated run's prefill pool), all the
        replicas, and the scheduler settings that decide what fits."""
        dep, env = scenario.deployment, self.env
        cfg = engine.scheduler
        if engine.speculative is not None:
            cfg = replace(
                cfg, speculative=engine.speculative.decoding(self.stream, scenario.workload.seed,
                                                             cfg)
            )
        self.route = ROUTERS[dep.router]
        self.pools: DisaggregatedPools | None = None
        self.warnings_pre: list[str] = []
        self.make_request: Callable[[int, float, int, int, int], Request] = Request
        self.fits_ever: Callable[[int, int], bool]
        if isinstance(dep, DisaggregatedDeployment):
            assert engine.prefill_pool is not None and engine.kv_link is not None
            pools = DisaggregatedPools(
                env, pool_spec(engine.prefill_pool, dep.prefill),
                pool_spec(engine, dep.decode, cfg), engine.kv_link, self.route,
                self.stream.output_tokens, self.finish, self.log, check,
            )
            self.pools = pools
            self.replicas, self.everyone = pools.prefill, pools.replicas
            self.cfg = engine.prefill_pool.scheduler
            self.decoders, self.decode_cfg = pools.decode, cfg
            self.fits_ever = pools.fits_ever
            self.make_request = pools.entry_request
        else:
            parts = (engine.replica_model, engine.style, cfg)
            self.replicas = make_replicas(dep, engine.arch, parts, env, self.finish, self.log,
                                          check)
            self.warnings_pre = dense_dp_notes(dep, engine.arch)
            self.everyone = self.replicas
            self.cfg = cfg
            self.decoders, self.decode_cfg = self.replicas, cfg
            self.fits_ever = self.replicas[0].sched.fits_ever_tokens

    def go(self) -> str:
        """Start the request source (and the time limit) and run the clock until the run
        stops; how it ended: completed, time_limit or queue_limit."""
        env, n = self.env, self.n
        concurrency = self.stream.closed_loop_concurrency
        sessions = self.sessions
        if concurrency is not None:
            starts = self.stream.start_s
            clients = min(concurrency, n if sessions is None else sessions.count)
            for k in range(clients):
                if starts is None or starts[k] <= 0.0:
                    self.send_next()
                else:
                    env.process(self.send_later(float(starts[k])))
        elif sessions is not None:
            env.process(self.session_starts(sessions))
        else:
            env.process(self.open_loop())  # its first step runs at once (URGENT priority)
        if self.limits.max_simulated_time_s is not None:
            env.process(self.timer(float(self.limits.max_simulated_time_s)))
        if n == 0:
            return "completed"
        try:
            return str(env.run(until=self.stop))
        except RuntimeError as exc:  # no events left yet requests unfinished: a scheduler bug
            raise RuntimeError(f"simulation stalled with requests in flight: {exc}") from None

    def finish(self, r: Request) -> None:
        """A request finished: keep its record fields and histories."""
        self.done.add(r)
        if r.past_segments is not None or r.resume_tokens_s is not None:
            self.token_history[r.index] = (r.past_segments or [], r.resume_tokens_s or [])
        if r.spec_done is not None:
            self.spec_emitted[r.index] = np.concatenate(r.spec_done)
            self.verify_tally.add(r)
        self.ended_count += 1
        if self.ended_count == self.n and not self.stop.triggered:
            self.stop.succeed("completed")
        elif self.sessions is not None:
            self.next_turn(r.index)
        elif self.stream.closed_loop_concurrency is not None:
            self.send_next()

    def send(self, i: int) -> bool:
        """Send request i now: through the front end, then routed to a replica; False if it
        was dropped on arrival."""
        inp, out = self.input_at(i), self.output_at(i)
        env, front, cfg = self.env, self.front, self.cfg
        now = env.instant
        ready = front.ready_s(now, inp)
        self.front_end_s[i] = front.client_side_s(now, ready, inp)
        self.arrival_s[i] = ready  # when the engine has it; records hold engine-side instants
        reason = 0
        if inp + out > self.max_context:
            reason = DROP_CONTEXT
        elif not self.fits_ever(inp, out):
            reason = DROP_KV
        elif not cfg.chunked_prefill and inp > cfg.max_num_batched_tokens:
            reason = DROP_BUDGET
        if reason:
            self.drop(i, reason)
            return False
        if ready > now:
            env.sleep(ready - now).callbacks.append(lambda _e: self.deliver(i, inp, out))
        else:
            self.deliver(i, inp, out)
        return True

    def drop(self, i: int, reason: int) -> None:
        """Request i ends unserved, for `reason` (records.DROP_REASONS)."""
        self.records[i]["drop_reason"] = reason
        self.ended_count += 1
        if self.ended_count == self.n and not self.stop.triggered:
            self.stop.succeed("completed")

    def deliver(self, i: int, inp: int, out: int) -> None:
        """Hand request i, past the front end, to the replica the router picks."""
        r = self.make_request(i, self.env.instant, inp, out, self.priority_at(i))
        if self.content is not None:
            r.attach(self.content[i])
        target = self.route(self.replicas, i, r)
        assert isinstance(target, Replica)
        target.submit(r)
        cap = self.queue_cap
        if cap is not None and target.waiting_count > cap and not self.stop.triggered:
            self.stop.succeed("queue_limit")

    def send_later(self, at_s: float) -> Generator[simpy.Event, Any, None]:
        """Closed loop, as a SimPy process: a client whose first request leaves at `at_s`."""
        yield self.env.timeout(at_s - self.env.instant)
        self.send_next()

    def send_next(self) -> None:
        """Closed loop: keep one more request in flight (skipping any dropped on arrival); with
        sessions, start the next session."""
        sessions = self.sessions
        if sessions is not None:
            while sessions.started < sessions.count:
                i = sessions.start_next()
                if self.send(i):
                    return
                self._drop_rest(i)
            return
        while self.next < self.n:
            i = self.next
            self.next = i + 1
            if self.send(i):
                return

    def next_turn(self, i: int) -> bool:
        """Turn i of a session ended (answered or dropped): send the session's next turn after
        its think time, or, the session over, start another in a closed loop. True if a turn
        is now under way or scheduled."""
        sessions = self.sessions
        assert sessions is not None
        j = sessions.next_of(i)
        if j < 0:
            if self.stream.closed_loop_concurrency is not None and not self.stop.triggered:
                self.send_next()
            return False
        pause = sessions.think_at(j)
        if pause > 0:
            self.env.sleep(pause).callbacks.append(lambda _e: self._send_turn(j))
        else:
            self._send_turn(j)
        return True

    def _send_turn(self, j: int) -> None:
        if not self.send(j):
            self._drop_rest(j)
            self.next_turn(j)

    def _drop_rest(self, i: int) -> None:
        """Turn i was dropped on arrival: its session ends, its later turns unsent."""
        sessions = self.sessions
        assert sessions is not None
        j = sessions.next_of(i)
        while j >= 0:
            self.drop(j, DROP_SESSION)
            j = sessions.next_of(j)
        sessions.close(i)

    def session_starts(self, sessions: SessionTurns) -> Generator[simpy.Event, Any, None]:
        """Open arrivals of sessions, as a SimPy process: each session's first turn at its
        arrival instant; the later turns follow their answers (next_turn)."""
        env, arrival_at = self.env, self.arrival_at
        for i in sessions.first_turns():
            delay = arrival_at(i) - env.instant
            if delay > 0:
                yield env.sleep(delay)
            if not self.send(i):
                self._drop_rest(i)

    def open_loop(self) -> Generator[simpy.Event, Any, None]:
        """Open loop, as a SimPy process: send every request due by now, then sleep until
        the next one's arrival."""
        env, n, arrival_at, quarter_ends = self.env, self.n, self.arrival_at, self.quarter_ends
        i = 0
        while i < n:
            delay = arrival_at(i) - env.instant
            if delay > 0:
                yield env.sleep(delay)
                continue
            self.send(i)
            if i in quarter_ends:
                self.queue_marks.append(sum(rep.waiting_count for rep in self.everyone))
            i += 1

    def timer(self, horizon_s: float) -> Generator[simpy.Event, Any, None]:
        """The time limit, as a SimPy process: stop the run at `horizon_s`."""
        yield self.env.timeout(horizon_s)
        if not self.stop.triggered:
            self.stop.succeed("time_limit")


def run_output(state: RunState, status: str, engine: Engine) -> RunOutput:
    """What a stopped run leaves: its records filled in, warnings, and per-replica totals."""
    for rep in state.everyone:  # a replica asleep in a run of decode steps commits those ended
        rep.settle()
    records, pools, replicas = state.records, state.pools, state.replicas
    records["arrival_s"] = np.frombuffer(state.arrival_s, dtype=np.float64)
    records["front_end_s"] = np.frombuffer(state.front_end_s, dtype=np.float64)
    state.done.scatter()
    warnings: list[str] = [] if pools is not None else state.warnings_pre
    batch_cap = sum(rep.max_num_seqs for rep in replicas)
    if unstable_queue(state.queue_marks, batch_cap):
        marks = ", ".join(str(q) for q in state.queue_marks)
        warnings.append(
            f"unstable: queue grew throughout the run (waiting requests after 25/50/75/100% of "
            f"the arrivals: {marks}; more than max_num_seqs × replicas = {batch_cap} at the "
            f"last arrival): requests arrive faster than the deployment serves them, so "
            f"latencies grow with num_requests; lower the rate or add capacity"
        )
    decoders = pools.decode if pools is not None else replicas
    return RunOutput(
        records,
        state.log,
        [g for rep in state.everyone for g in rep.resume_gaps_s]
        + (pools.first_gaps_s if pools is not None else []),
        status,
        sum(rep.preemptions for rep in state.everyone),
        warnings=warnings,
        busy_s=[rep.busy_s for rep in state.everyone],
        decode_end_s=[
            np.frombuffer(clock, dtype=np.float64) for rep in decoders for clock in rep.clocks()
        ],
        attention_dp_imbalance_share=imbalance_share(replicas),
        pipeline=pipeline_summary(replicas),
        token_history=state.token_history,
        end_s=float(state.env.instant),
        pools=pools,
        speculative=speculative_stats(engine.speculative, state.decode_cfg, state.decoders,
                                      state.stream, state.verify_tally),
        spec_emitted=state.spec_emitted,
        cache_stats=cache_stats(state.everyone),
    )


def cache_stats(replicas: list[Replica]) -> dict[str, int]:
    """The prefix caches' counts, summed over every scheduler of every replica."""
    caches = [s.cache for rep in replicas for s in rep.schedulers() if s.cache is not None]
    return {
        "evicted_blocks": sum(c.evicted_blocks for c in caches),
        "offload_capacity_blocks": sum(c.offload_capacity for c in caches),
        "offloaded_blocks": sum(c.offloaded_blocks for c in caches),
        "reloaded_blocks": sum(c.reloaded_blocks for c in caches),
        "dropped_blocks": sum(c.dropped_blocks for c in caches),
    }


def unstable_queue(marks: list[int], batch_cap: int) -> bool:
    """The rule of the "unstable" warning: waiting requests sampled at the end of each quarter
    of the arrivals rose every quarter, and at the last arrival more wait than one full batch
    of every replica could take (max_num_seqs × replicas)."""
    return (
        len(marks) == 4
        and all(a < b for a, b in itertools.pairwise(marks))
        and marks[-1] > batch_cap
    )

