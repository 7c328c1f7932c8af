"""One engine replica as a SimPy process: plan a step, spend its time, commit its results
(the loop shared by every kind of replica: step_loop; a plain replica's policy: PlainSteps),
and walk runs of unchanged decode steps at once."""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Callable, Generator
from typing import Any

import simpy

from simulator.cost.draft import SpeculativeStepModel
from simulator.cost.step import StepModel
from simulator.engines.style import EngineStyle
from simulator.serving.clock import Clock
from simulator.serving.intake import Intake
from simulator.serving.request import Request
from simulator.serving.run_plan import RunPlan, plan_run
from simulator.serving.sched_types import PlannedStep, SchedulerConfig
from simulator.serving.scheduler import Scheduler
from simulator.serving.step_commit import Rank, commit_rank, log_gaps
from simulator.serving.step_commit import StepLog as StepLog  # where the callers import it
from simulator.serving.step_loop import Process, StepPolicy, run_steps

MAX_DECODE_RUN = 4096  # steps costed at once in a run of unchanged decode batches
MIN_DECODE_RUN = 8  # attention-DP runs: below this, numpy's per-call cost outweighs the events
MIN_WALK_STEPS = 2  # plain replicas: a shorter run is a normal step (run_plan costs floats)


class Replica:
    """One engine replica: its intake, its step loop (run by a `StepPolicy`, for a plain
    replica `PlainSteps`), its decode walks, and what the simulation reads of it."""

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
        self.rank = Rank(env, index, cfg)  # its one scheduler and what its steps write
        self.sched = self.rank.sched
        self.model = model
        self.style = style
        self.on_finish = on_finish
        self.log = log
        self.check = check
        self.assigned = 0
        self.finished = 0
        self._wakeup: simpy.Event | None = None
        self._stalled = self.rank.stalled  # its decoders held back by prefill-only steps
        self.decode_end_s = self.rank.decode_end_s  # its decode-step clock
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
        held = self.intake.held_tokens  # arrived, not yet taken in by the scheduler
        if self._walk is None:
            return self.sched.outstanding_tokens + held
        # Each decoder's token of every step ended during the walk's sleep is done.
        return self.sched.outstanding_tokens + held - self._walk[0].decoders * (
            self._walk_done() - self._walk[1])

    def prefix_hit_tokens(self, r: Request) -> int:
        """Prompt tokens of `r` the replica holds in a prefix cache now (the best of its
        attention-DP ranks')."""
        return max(s.prefix_hit_tokens(r) for s in self.schedulers())

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

    def _run(self) -> Process:
        yield from run_steps(self._policy())

    def _policy(self) -> StepPolicy[Any]:
        """How this replica plans, costs and commits its steps (made when its process starts,
        so a subclass's state is in place)."""
        return PlainSteps(self)

    def _idle(self) -> Process:
        """Nothing could be planned: poll the intake now if it holds requests (nothing runs),
        else wait until a request is taken in."""
        if self.intake:
            for r in self.intake.drain():
                self._take_in(r)
            return
        self._stepping = False
        self._wakeup = self.env.event()
        yield self._wakeup
        self._wakeup = None

    def _finished(self, r: Request) -> None:
        """A request finished on this replica (on any of its ranks): count it, pass it on."""
        self.finished += 1
        self.on_finish(r)

    def _decode_walk(self, last_dt: float) -> Process:
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
            ahead = (env.peek() - env.instant) / last_dt if last_dt > 0 else math.inf
            cap = int(min(MAX_DECODE_RUN, 2 * ahead + 32))
            if intake.held:
                cap = min(cap, intake.first_release - start)
            plan = plan_run(sched, self.model, self.style, env.instant, self.busy_s, self.gpu_s,
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
            for r in sched.commit_decode_step(plan.decoders, env.instant):
                self.finished += 1
                self.on_finish(r)
            last_dt = plan.dts[pos - 1]

    def begin_step(self) -> None:
        """A step starts: an arrival from now on is held to the boundary it ends at."""
        self._boundary = self._steps + 1

    def end_step(self, dt: float) -> None:
        """The step that began with `begin_step` ended after dt seconds."""
        self._steps += 1
        self.busy_s += dt

    def _walk_done(self) -> int:
        """Steps of the sleeping walk's plan ended by now (one ending now is still running)."""
        assert self._walk is not None
        plan, pos, k, _ = self._walk
        return min(k - 1, max(pos, bisect_left(plan.ends, self.env.instant)))

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

    def schedulers(self) -> list[Scheduler]:
        """Every scheduler of the replica (an attention-DP one: one per rank)."""
        return [self.sched]

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


class ReplicaSteps:
    """What the plain and the attention-DP step policies share: the replica takes requests in
    and plans at each step boundary, idles when nothing can run, and spends a step as one
    sleep between two boundaries."""

    def __init__(self, rep: Replica) -> None:
        self.rep = rep
        self.env = rep.env
        self.idle = rep._idle
        self.log = rep.log
        self.on_finish = rep._finished

    def spend(self, planned: object, dt: float) -> Generator[simpy.Event, Any, tuple[float, float]]:
        """The step as one sleep; the intake holds what arrives meanwhile for the next
        boundary."""
        rep = self.rep
        rep.begin_step()
        end = yield self.env.sleep(dt)
        rep.end_step(dt)
        return end, dt


class PlainSteps(ReplicaSteps):
    """One scheduler's steps: its plan is the batch, the step model costs it, and after a
    step a run of unchanged decode steps is walked at once (`Replica._decode_walk`)."""

    def __init__(self, rep: Replica) -> None:
        super().__init__(rep)
        sched = self.sched = rep.sched
        running, waiting = sched.running, sched.waiting

        def has_work() -> bool:  # sched.has_work, without the property call
            return bool(running) or len(waiting) > 0

        self.has_work = has_work
        self.step_start = rep._step_start
        self.time_s = rep.model.time_s
        self.step_time_s = rep.style.step_time_s
        self.fast = rep.check is None and not rep.log.detailed
        self.rank = rep.rank
        self.gpu_step_s = 0.0  # the last costed step's GPU time (for its time-series row)

    def plan(self) -> PlannedStep | None:
        return self.sched.plan(self.env.instant) if self.step_start(self.has_work) else None

    def cost(self, planned: PlannedStep) -> float:
        rep, batch = self.rep, planned.batch
        gpu_s = self.gpu_step_s = self.time_s(batch)
        rep.gpu_s += gpu_s
        if batch.speculative_tokens_per_seq:
            assert isinstance(rep.model, SpeculativeStepModel)
            rep.draft_gpu_s += rep.model.draft_s(batch)
        # A host-tier load (deployment.kv_offload) comes before the step's kernels run.
        dt = self.step_time_s(gpu_s, planned.num_seqs) + planned.reload_s
        if rep.check is not None:
            rep.check(rep, planned, dt)
        return dt

    def commit(self, planned: PlannedStep, end_s: float, dt: float) -> None:
        if self.log.detailed:
            self._row(planned, end_s, dt)
        commit_rank(self.rank, planned, end_s, dt, self.log, self.on_finish)

    def after(self, end_s: float, dt: float) -> Process | None:
        rep = self.rep
        intake = rep.intake
        # A request held for the next step or the one after leaves no walk to take (the
        # walk would plan fewer than MIN_WALK_STEPS steps): the common case under load.
        if (self.fast and not (intake.held and intake.first_release - rep._steps < MIN_WALK_STEPS)
                and self.sched.can_fast_forward()):
            return rep._decode_walk(dt)
        return None

    def _row(self, planned: PlannedStep, end_s: float, dt: float) -> None:
        """The step's time-series row: its batch, the queue, KV use and the cost breakdown."""
        rep, sched = self.rep, self.sched
        c = rep.model.cost(planned.batch)
        self.log.rows.append(
            (
                end_s,
                float(rep.index),
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
                dt - self.gpu_step_s,
            )
        )
