"""One engine replica as a SimPy process: plan a step, spend its time, commit its results."""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from typing import Any

import numpy as np
import simpy

from simulator.cost.draft import SpeculativeStepModel
from simulator.cost.shape import BatchShape
from simulator.cost.step import StepModel
from simulator.engines.style import EngineStyle
from simulator.serving.intake import Intake
from simulator.serving.request import Request
from simulator.serving.sched_types import PlannedStep, SchedulerConfig
from simulator.serving.scheduler import Scheduler

MAX_DECODE_RUN = 4096  # steps costed at once in a run of unchanged decode batches
MIN_DECODE_RUN = 8  # below this, numpy's per-call cost outweighs the SimPy events it saves


def delay_to(now: float, end: float) -> float:
    """A delay that brings the clock from `now` to exactly `end` (SimPy adds it to now)."""
    delay = end - now
    while now + delay > end:
        delay = math.nextafter(delay, -math.inf)
    while now + delay < end:
        delay = math.nextafter(delay, math.inf)
    return delay


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
        env: simpy.Environment,
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
        env.process(self._run())

    @property
    def outstanding_requests(self) -> int:
        return self.assigned - self.finished

    @property
    def outstanding_tokens(self) -> int:
        return self.sched.outstanding_tokens

    def submit(self, r: Request, *, routed: bool = False) -> None:
        """Queue a request; `routed`: it was counted as assigned when the router chose us."""
        if not routed:
            self.assigned += 1
        if self._stepping and self.intake.delays:
            self.intake.hold(r)
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
        if intake:
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
        env, sched, log = self.env, self.sched, self.log
        time_s = self.model.time_s
        step_time_s = self.style.step_time_s
        fast = self.check is None and not log.detailed
        min_run = MIN_DECODE_RUN
        def has_work() -> bool:
            return sched.has_work

        while True:
            planned = sched.plan(env.now) if self._step_start(has_work) else None
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
            yield env.timeout(dt)
            end = env.now
            self._steps += 1
            self.busy_s += dt
            decoded = planned.batch.decode_seqs
            if decoded:
                self.decode_end_s.append(end)
            if decoded and not self._stalled:
                log.itl_s.append(dt)
                log.itl_weight.append(decoded)
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
                log.itl_s.append(0.0)
                log.itl_weight.append(float(sched.last_emitted - decoded))
            # A run of unchanged decode steps pays off only if the next event is far enough;
            # a run that ends with a finish may be followed by the next run at once.
            while (
                fast
                and not self.intake
                and env.peek() - env.now >= min_run * dt
                and sched.can_fast_forward()
            ):
                dt = yield from self._decode_run(dt)
                if dt <= 0.0:
                    break

    def _decode_run(self, last_dt: float) -> Any:
        """Run consecutive pure-decode steps as one SimPy timeout, with exactly the floats,
        records and event order that stepping one by one gives; return the run's last step
        time (0.0: no run, or the run did not end with a finish, so the caller steps next).

        Valid while nothing changes the batch: no request finishes before the run's last step
        (the run may end with the first finish step, committed as a normal step), no block
        shortage (stop before the decode set would run out), and no other event happens (the
        run's last step ends strictly before the next scheduled event, so that event meets
        the same state at the same time). Every step is costed (vectorized, the same
        arithmetic as StepModel.time_s) and logged; clocks and totals are summed step by
        step (numpy's accumulate is sequential), as the step-by-step loop adds them.
        """
        env, sched, log = self.env, self.sched, self.log
        now = env.now
        # Steps likely to fit before the next event, judged by the last step (they only grow).
        expected = (env.peek() - now) / last_dt if last_dt > 0 else math.inf
        if expected < MIN_DECODE_RUN:
            return 0.0  # a short run is cheaper step by step than vectorized
        # The run may end with the step in which the next request finishes (committed below).
        to_finish = sched.steps_before_next_finish() + 1
        cap = min(to_finish, MAX_DECODE_RUN, int(min(expected, 1e9)) + 1)
        if cap < MIN_DECODE_RUN:
            return 0.0
        n = sched.num_decoding
        assert isinstance(self.model, StepModel)  # speculative replicas never fast-forward
        offsets = np.arange(cap, dtype=np.float64)
        gpu_s = self.model.decode_times_s(n, sched.decode_kv_sum + n * offsets)
        host_s = self.style.host_time_s(n)
        overlap = self.style.overlap_cpu_with_gpu
        dts = np.maximum(gpu_s, host_s) if overlap else gpu_s + host_s
        ends = np.cumsum(np.concatenate(([now], dts)))[1:]
        steps = int(np.searchsorted(ends, env.peek(), side="left"))
        # Cut the run before the decode set would run out of blocks (then preemption).
        steps, used = sched.steps_within_blocks(steps)
        if steps == 0:
            return 0.0
        yield env.timeout(delay_to(now, float(ends[steps - 1])))
        self._steps += steps
        finishing = steps == to_finish
        sched.fast_forward(steps - 1 if finishing else steps, used)
        run = dts[:steps]
        self.busy_s = float(np.cumsum(np.concatenate(([self.busy_s], run)))[-1])
        self.gpu_s = float(np.cumsum(np.concatenate(([self.gpu_s], gpu_s[:steps])))[-1])
        self.decode_end_s.frombytes(ends[:steps].tobytes())
        first = 0
        if self._stalled:
            self._log_gaps(n, float(run[0]))
            first = 1
        log.itl_s.frombytes(run[first:].tobytes())
        log.itl_weight.extend(array("d", (float(n),)) * (steps - first))
        if not finishing:
            return 0.0
        last = BatchShape(decode_seqs=n, decode_context_tokens=sched.decode_kv_sum)
        for r in sched.commit(PlannedStep(last, [], n), env.now):
            self.finished += 1
            self.on_finish(r)
        return float(run[-1])

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
