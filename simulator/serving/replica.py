"""One engine replica as a SimPy process: plan a step, spend its time, commit its results."""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

import simpy
from simpy.events import NORMAL, EventPriority

from simulator.cost.draft import SpeculativeStepModel
from simulator.cost.step import StepModel
from simulator.engines.style import EngineStyle
from simulator.serving.intake import Intake
from simulator.serving.request import Request
from simulator.serving.run_plan import RunPlan, plan_run
from simulator.serving.sched_types import SchedulerConfig
from simulator.serving.scheduler import Scheduler

MAX_DECODE_RUN = 4096  # steps costed at once in a run of unchanged decode batches
MIN_DECODE_RUN = 8  # attention-DP runs: below this, numpy's per-call cost outweighs the events
MIN_WALK_STEPS = 2  # plain replicas: a shorter run is a normal step (run_plan costs floats)


class Clock(simpy.Environment):
    """The simulation's environment, with events at an exact time: a run of steps ends at
    the clock summed step by step, which `now + delay` cannot always reach in one addition
    (when `now` has its last bit set, round-half-even skips every other float). Callbacks at
    a time (`call_later`) and the run loop (`run_until`) skip SimPy's per-event overhead
    (processes, timeouts, the `step` call) and keep its order: (time, priority, event id)."""

    def timeout_at(self, when: float) -> simpy.Event:
        """An event that fires at exactly `when` (>= now), as a timeout would."""
        ev = _Fired(self, [])
        heappush(self._queue, (when, NORMAL, next(self._eid), ev))
        return ev

    def sleep(self, delay: float) -> simpy.Event:
        """`timeout(delay)`: the same time and order, without Timeout's bookkeeping."""
        ev = _Fired(self, [])
        heappush(self._queue, (self._now + delay, NORMAL, next(self._eid), ev))
        return ev

    def call_later(self, delay: float, fn: Callable[[simpy.Event], None],
                   priority: EventPriority = NORMAL) -> None:
        """Call fn at now + delay, where and when `timeout(delay)` with fn as its callback
        would run it (a process started now runs its first step at URGENT priority)."""
        heappush(self._queue, (self._now + delay, priority, next(self._eid), _Fired(self, [fn])))

    def run_until(self, stop: simpy.Event) -> Any:
        """`run(until=stop)`: process events in order until `stop` is processed; its value."""
        if stop.callbacks is None:
            return stop.value
        stop.callbacks.append(simpy.core.StopSimulation.callback)
        queue = self._queue
        try:
            while True:
                try:
                    self._now, _, _, event = heappop(queue)
                except IndexError:
                    raise RuntimeError(
                        f'No scheduled events left but "until" event was not triggered: {stop}'
                    ) from None
                callbacks = event.callbacks
                event.callbacks = None  # type: ignore[assignment]  # as simpy marks it processed
                for callback in callbacks:
                    callback(event)
                if not event._ok and not hasattr(event, "_defused"):
                    exc = type(event._value)(*event._value.args)
                    exc.__cause__ = event._value
                    raise exc
        except simpy.core.StopSimulation as exc:
            return exc.args[0]


class _Fired(simpy.Event):
    """A triggered event, to be processed when its turn in the queue comes (Clock)."""

    def __init__(self, env: simpy.Environment, callbacks: list[Callable[[simpy.Event], None]]
                 ) -> None:
        self.env = env
        self.callbacks = callbacks
        self._ok = True
        self._value = None


class StepLog:
    """Per-step records kept compactly (typed arrays): the source of ITL and the time series."""

    def __init__(self, detailed: bool) -> None:
        # Inter-token gaps as (gap, how many tokens had it): a decode step's duration, plus for
        # decoders that sat out prefill-only steps (chunked prefill off) the time they waited.
        self.itl_s = array("d")
        self.itl_weight = array("d")
        self.detailed = detailed
        self.rows: list[tuple[float, ...]] = []  # time series, only when asked


class Replica:
    def __init__(
        self,
        env: Clock,
        index: int,
        cfg: SchedulerConfig,
        model: StepModel | SpeculativeStepModel,
        style: EngineStyle,
        on_finish: Callable[[Request], None],
        log: StepLog,
        check: Callable[[Replica, Any, float], None] | None = None,
    ) -> None:
        self.env = env
        self.index = index
        self.sched = Scheduler(cfg)
        self.model = model
        self.style = style
        self.on_finish = on_finish
        self.log = log
        self.check = check
        self.assigned = 0
        self.finished = 0
        self._wakeup: simpy.Event | None = None
        # Decoders held back by prefill-only steps: [count, seconds waited so far] groups.
        self._stalled: list[list[float]] = []
        self.decode_end_s = array("d")  # end time of each decode step, by decode-step number
        self.busy_s = 0.0
        self.draft_gpu_s = 0.0  # speculative decoding: the drafter's share of GPU time
        self.gpu_s = 0.0
        # Requests that arrive while a step runs wait for the boundary that may schedule them.
        self.intake = Intake(style.schedules_ahead, cfg.recv_interval_steps)
        self._stepping = False  # a step is planned or running (from plan to the next plan)
        self._steps = 0  # steps run, the poll counter of the intake
        self._boundary = 0  # the step boundary the running timeout ends at (intake holds)
        # While a decode walk sleeps: (plan, first step, end step, steps run at plan start).
        self._walk: tuple[RunPlan, int, int, int] | None = None
        env.process(self._run())

    @property
    def outstanding_requests(self) -> int:
        return self.assigned - self.finished

    @property
    def outstanding_tokens(self) -> int:
        if self._walk is None:
            return self.sched.outstanding_tokens
        # Each decoder's token of every step ended during the walk's sleep is done.
        return self.sched.outstanding_tokens - self._walk[0].decoders * (
            self._walk_done() - self._walk[1])

    def submit(self, r: Request, *, routed: bool = False) -> None:
        """Queue a request; `routed`: it was counted as assigned when the router chose us."""
        if not routed:
            self.assigned += 1
        if self._stepping and self.intake.delays:
            self.intake.hold(r, self._hold_boundary())
            return
        self._take_in(r)

    def _take_in(self, r: Request) -> None:
        """Hand a request to the scheduler and wake an idle loop."""
        r.replica = self.index
        self.sched.add(r)
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()

    def _step_start(self, has_work: Callable[[], bool]) -> bool:
        """Take in what the intake releases before this step is planned; with nothing to run,
        take in everything held (an idle engine polls at once). False: nothing to plan."""
        intake = self.intake
        if intake.held:
            for r in intake.at_step_start(self._steps):
                self._take_in(r)
            if not has_work():
                for r in intake.drain():
                    self._take_in(r)
        if has_work():
            self._stepping = True
            return True
        self._stepping = False
        return False

    def _run(self) -> Any:
        env, sched, log, intake = self.env, self.sched, self.log, self.intake
        time_s = self.model.time_s
        step_time_s = self.style.step_time_s
        fast = self.check is None and not log.detailed
        itl_s, itl_weight, decode_end_s = log.itl_s, log.itl_weight, self.decode_end_s
        running, waiting = sched.running, sched.waiting

        def has_work() -> bool:  # sched.has_work, without the property call
            return bool(running) or len(waiting) > 0

        while True:
            planned = sched.plan(env._now) if self._step_start(has_work) else None
            if planned is None:
                if self.intake:  # the scheduler could not plan: nothing runs, so poll now
                    for r in self.intake.drain():
                        self._take_in(r)
                    continue
                self._stepping = False
                self._wakeup = env.event()
                yield self._wakeup
                self._wakeup = None
                continue
            gpu_s = time_s(planned.batch)
            self.gpu_s += gpu_s
            if planned.batch.speculative_tokens_per_seq:
                assert isinstance(self.model, SpeculativeStepModel)
                self.draft_gpu_s += self.model.draft_s(planned.batch)
            dt = step_time_s(gpu_s, planned.num_seqs)
            if self.check is not None:
                self.check(self, planned, dt)
            self._boundary = self._steps + 1
            yield env.sleep(dt)
            end = env._now
            self._steps += 1
            self.busy_s += dt
            decoded = planned.batch.decode_seqs
            if decoded:
                decode_end_s.append(end)
            if decoded and not self._stalled:
                itl_s.append(dt)
                itl_weight.append(decoded)
            else:
                self._log_gaps(decoded, dt)
            if log.detailed:
                c = self.model.cost(planned.batch)
                log.rows.append(
                    (
                        end,
                        float(self.index),
                        float(planned.num_seqs),
                        float(planned.batch.decode_seqs),
                        float(planned.batch.prefill_tokens),
                        float(len(sched.running)),
                        float(len(sched.waiting)),
                        sched.used_blocks / max(1, sched.cfg.num_blocks),
                        dt,
                        c.compute_s,
                        c.memory_s,
                        c.communication_s,
                        c.overhead_s,
                        dt - gpu_s,
                    )
                )
            for r in sched.commit(planned, end):
                self.finished += 1
                self.on_finish(r)
            if decoded and sched.last_emitted > decoded:
                # A step that emits n tokens for a sequence gives one gap and n-1 zeros.
                itl_s.append(0.0)
                itl_weight.append(float(sched.last_emitted - decoded))
            # A request held for the next step or the one after leaves no walk to take (the
            # walk would plan fewer than MIN_WALK_STEPS steps): the common case under load.
            if (fast and not (intake.held and intake.first_release - self._steps < MIN_WALK_STEPS)
                    and sched.can_fast_forward()):
                yield from self._decode_walk(dt)

    def _decode_walk(self, last_dt: float) -> Any:
        """Run pure-decode steps from a plan costed at once (run_plan), with exactly the
        floats, records and event order that stepping one by one gives.

        The replica sleeps through the planned steps ending before the next event, the step
        the event falls in, and the steps that no request arriving then could join (the
        intake holds it until its release step); it commits the steps done when it wakes.
        While it sleeps, what others read of it (its outstanding tokens, the step boundary
        an arrival is held for, the totals at a stop: `settle`) counts the steps ended so
        far. A held request ends the run before its release step; one taken in at once (no
        lookahead) ends it with the step it arrived in. A run that ends with a finish is
        followed by the next plan at once.
        """
        env, sched, intake = self.env, self.sched, self.intake
        assert isinstance(self.model, StepModel)  # speculative replicas never fast-forward
        while sched.can_fast_forward():
            start = self._steps
            # Plan about as far as the next event is likely to let the run go, and never past
            # the step that takes a held request in.
            ahead = (env.peek() - env.now) / last_dt if last_dt > 0 else math.inf
            cap = int(min(MAX_DECODE_RUN, 2 * ahead + 32))
            if intake.held:
                cap = min(cap, intake.first_release - start)
            plan = plan_run(sched, self.model, self.style, env.now, self.busy_s, self.gpu_s,
                            cap, MIN_WALK_STEPS)
            if plan is None:
                return
            ends, pos, stop = plan.ends, 0, plan.steps
            while pos < stop:
                # The step the next event falls in (ends strictly before it: passed over),
                # and on to the last step before an arrival then would be released.
                k = max(pos, bisect_left(ends, env.peek()))
                k = min(stop, intake.release_step(start + k + 1) - start)
                self._walk, self._boundary = (plan, pos, k, start), start + k
                yield env.timeout_at(ends[k - 1])
                self._walk = None
                self._commit_segment(plan, pos, k)
                pos = k
                if pos < stop:  # what arrived during the segment may end the run here
                    if not sched.can_fast_forward():
                        stop = pos
                    elif intake.held:
                        stop = min(stop, intake.first_release - start)
            if pos < plan.steps or not plan.finishing:
                return
            for r in sched.commit_decode_step(plan.decoders, env._now):
                self.finished += 1
                self.on_finish(r)
            last_dt = plan.dts[pos - 1]

    def _walk_done(self) -> int:
        """Steps of the sleeping walk's plan ended by now (one ending now is still running)."""
        assert self._walk is not None
        plan, pos, k, _ = self._walk
        return min(k - 1, max(pos, bisect_left(plan.ends, self.env.now)))

    def _hold_boundary(self) -> int:
        """The step boundary that follows now: where a request arriving now is held to."""
        if self._walk is None:
            return self._boundary
        return self._walk[3] + self._walk_done() + 1

    def settle(self) -> None:
        """The simulation stopped while the walk slept: commit the steps ended by now."""
        if self._walk is not None:
            plan, pos = self._walk[0], self._walk[1]
            done = self._walk_done()
            if done > pos:
                self._commit_segment(plan, pos, done)
            self._walk = None

    def _commit_segment(self, plan: RunPlan, pos: int, k: int) -> None:
        """Commit steps pos..k-1 of `plan` (the last planned one, if it finishes a request,
        is committed by the caller as a normal step: here only its blocks and logs)."""
        sched, log, n = self.sched, self.log, plan.decoders
        steps = k - pos
        blocks = plan.blocks if steps == plan.steps else sched.blocks_needed(steps)
        sched.fast_forward(steps - (plan.finishing and k == plan.steps), blocks)
        self._steps += steps
        self.busy_s = plan.busy_s[k]
        self.gpu_s = plan.gpu_s[k]
        first = pos
        if pos == 0 and self._stalled:  # the first step pays the held-back decoders' gaps
            self._log_gaps(n, plan.dts[0])
            first = 1
        self.decode_end_s.extend(plan.ends[pos:k])
        if k > first:
            log.itl_s.extend(plan.dts[first:k])
            log.itl_weight.extend(array("d", (float(n),)) * (k - first))

    def _log_gaps(self, decoded: int, dt: float) -> None:
        log_gaps(self.log, self.sched.num_decoding, self._stalled, decoded, dt)

    # ---- what the simulation reads of any replica (a ranked one sums its ranks) ---------

    def clocks(self) -> list[array[float]]:
        """Decode-step end times of each clock a request's `replica` record can name."""
        return [self.decode_end_s]

    @property
    def waiting_count(self) -> int:
        return len(self.sched.waiting)

    @property
    def preemptions(self) -> int:
        return self.sched.preemptions

    @property
    def resume_gaps_s(self) -> list[float]:
        return self.sched.resume_gaps_s

    @property
    def max_num_seqs(self) -> int:
        return self.sched.cfg.max_num_seqs


def log_gaps(
    log: StepLog, waiting: int, stalled: list[list[float]], decoded: int, dt: float
) -> None:
    """Record one step's inter-token gaps. A prefill-only step with decoders waiting adds
    its time to their next gap; a decode step emits every waiting group's longer gap."""
    if decoded == 0:
        if waiting:
            for group in stalled:
                group[1] += dt
            held = sum(int(g[0]) for g in stalled)
            if waiting > held:
                stalled.append([float(waiting - held), dt])
        return
    left = float(decoded)
    for count, stall_s in stalled:
        n = min(count, left)
        if n > 0:
            log.itl_s.append(dt + stall_s)
            log.itl_weight.append(n)
            left -= n
    stalled.clear()
    if left > 0:
        log.itl_s.append(dt)
        log.itl_weight.append(left)
