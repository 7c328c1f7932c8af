"""A pipeline-parallel engine replica: P stages, up to P micro-batches in flight.

As vLLM's pipeline-parallel engine does (one scheduler per virtual engine, the KV pool split
evenly over them, a new request to the one with the fewest unfinished requests), the replica
holds P micro-batch slots. Each slot plans its batch, passes it through the stages in order
(a stage works on one micro-batch at a time; activations cross each boundary) and commits when
the last stage ends, then plans its next. With one busy slot a step takes the sum of the stages
plus the sends; with P busy slots the stages overlap and the replica turns out one micro-batch
per slowest-stage time. Stage idle time while the replica has work is the pipeline bubble.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, cast

import simpy

from simulator.cost.pipeline import StageTimes, stage_layers, stage_times
from simulator.cost.step import StepModel
from simulator.engines.style import EngineStyle
from simulator.serving.clock import Clock
from simulator.serving.ranked_replica import RankedReplica
from simulator.serving.replica import Replica, StepLog
from simulator.serving.request import Request
from simulator.serving.router import least_outstanding
from simulator.serving.sched_types import PlannedStep, SchedulerConfig
from simulator.serving.step_commit import Rank, commit_rank
from simulator.serving.step_loop import Process, run_steps


class PipelinedReplica(RankedReplica):
    """P micro-batch slots sharing P pipeline stages."""

    def __init__(
        self,
        env: Clock,
        index: int,
        cfg: SchedulerConfig,
        model: StepModel,
        style: EngineStyle,
        on_finish: Callable[[Request], None],
        log: StepLog,
        check: Callable[[Replica, Any, float], None] | None = None,
    ) -> None:
        stages = model.layout.pipeline_parallel
        super().__init__(
            env, index, cfg, model, style, on_finish, log, stages, least_outstanding, check
        )
        self.stages = [simpy.Resource(env, capacity=1) for _ in range(stages)]
        self.stage_busy_s = [0.0] * stages
        self.layers = stage_layers(model.arch.num_layers, stages)
        self._active = 0  # stages working now
        self._active_since = 0.0
        self.active_span_s = 0.0  # time at least one stage worked

    def _wake(self, rank: Rank) -> None:
        if rank.wakeup is not None and not rank.wakeup.triggered:
            rank.wakeup.succeed()

    def _run(self) -> Process:
        for rk in self.ranks:
            self.env.process(run_steps(SlotSteps(self, rk)))
        yield self.env.timeout(0)

    def _stage_enter(self) -> None:
        if self._active == 0:
            self._active_since = self.env.now
        self._active += 1

    def _stage_leave(self) -> None:
        self._active -= 1
        if self._active == 0:
            self.active_span_s += self.env.now - self._active_since

    def pipeline_stats(self) -> dict[str, Any]:
        """Per-stage layers and busy time, and the bubble share of the replica's active time."""
        span = self.active_span_s
        stages = len(self.stages)
        bubble = 1.0 - sum(self.stage_busy_s) / (stages * span) if span > 0 else 0.0
        return {
            "stages": stages,
            "layers_per_stage": list(self.layers),
            "stage_busy_s": list(self.stage_busy_s),
            "bubble_share": max(0.0, bubble),
        }


class SlotSteps:
    """One micro-batch slot's steps: it plans its own batch, passes it through the stages in
    order (a stage works on one micro-batch at a time; activations cross each boundary) and
    commits when the last stage ends. It idles on its own wake-up, and never fast-forwards."""

    def __init__(self, rep: PipelinedReplica, rk: Rank) -> None:
        self.rep, self.rk, self.env = rep, rk, rep.env
        self.sched = rk.sched
        self.step_time_s = rep.style.step_time_s
        self.log = rep.log
        self.on_finish = rep._finished
        self.st = StageTimes((), ())  # the last costed micro-batch's stage times

    def plan(self) -> PlannedStep | None:
        sched = self.sched
        return sched.plan(self.env.now) if sched.has_work else None

    def idle(self) -> Process:
        rk = self.rk
        rk.wakeup = self.env.event()
        yield rk.wakeup
        rk.wakeup = None

    def cost(self, planned: PlannedStep) -> float:
        """The first stage's time: the host schedules the micro-batch before it can run."""
        rep = self.rep
        st = self.st = stage_times(rep.ranked_model, planned.batch)
        # A host-tier load (deployment.kv_offload) comes before the first stage runs.
        first_s = self.step_time_s(st.stages_s[0], planned.num_seqs) + planned.reload_s
        if rep.rank_check is not None:
            latency = first_s - st.stages_s[0] + st.latency_s
            rep.rank_check(cast(Replica, self.rk), planned, latency)
        return first_s

    def spend(self, planned: PlannedStep, first_s: float
              ) -> Generator[simpy.Event, Any, tuple[float, float]]:
        rep, env, st = self.rep, self.env, self.st
        start = env.now
        last = len(rep.stages) - 1
        for s, stage in enumerate(rep.stages):
            with stage.request() as req:
                yield req
                work_s = first_s if s == 0 else st.stages_s[s]
                rep._stage_enter()
                yield env.timeout(work_s)
                rep._stage_leave()
                rep.stage_busy_s[s] += work_s
                rep.busy_s += work_s / len(rep.stages)
            if s < last and st.hops_s[s] > 0:
                yield env.timeout(st.hops_s[s])
        end = env.now
        return end, end - start

    def commit(self, planned: PlannedStep, end_s: float, dt: float) -> None:
        if self.log.detailed:
            self.rep._log_row([planned], end_s, dt, self.st.latency_s)
        commit_rank(self.rk, planned, end_s, dt, self.log, self.on_finish)

    def after(self, end_s: float, dt: float) -> Process | None:
        return None
