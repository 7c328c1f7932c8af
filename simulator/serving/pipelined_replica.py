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

from collections.abc import Callable
from typing import Any, cast

import simpy

from simulator.cost.pipeline import stage_layers, stage_times
from simulator.cost.step import StepModel
from simulator.engines.style import EngineStyle
from simulator.serving.ranked_replica import Rank, RankedReplica
from simulator.serving.replica import Clock, Replica, StepLog
from simulator.serving.request import Request
from simulator.serving.router import least_outstanding
from simulator.serving.sched_types import SchedulerConfig


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

    def _run(self) -> Any:
        for rk in self.ranks:
            self.env.process(self._slot(rk))
        yield self.env.timeout(0)

    def _stage_enter(self) -> None:
        if self._active == 0:
            self._active_since = self.env.now
        self._active += 1

    def _stage_leave(self) -> None:
        self._active -= 1
        if self._active == 0:
            self.active_span_s += self.env.now - self._active_since

    def _slot(self, rk: Rank) -> Any:
        env, sched = self.env, rk.sched
        step_time_s = self.style.step_time_s
        while True:
            planned = sched.plan(env.now) if sched.has_work else None
            if planned is None:
                rk.wakeup = env.event()
                yield rk.wakeup
                rk.wakeup = None
                continue
            st = stage_times(self.ranked_model, planned.batch)
            # The host schedules the micro-batch before its first stage can run.
            first_s = step_time_s(st.stages_s[0], planned.num_seqs)
            if self.rank_check is not None:
                latency = first_s - st.stages_s[0] + st.latency_s
                self.rank_check(cast(Replica, rk), planned, latency)
            start = env.now
            last = len(self.stages) - 1
            for s, stage in enumerate(self.stages):
                with stage.request() as req:
                    yield req
                    work_s = first_s if s == 0 else st.stages_s[s]
                    self._stage_enter()
                    yield env.timeout(work_s)
                    self._stage_leave()
                    self.stage_busy_s[s] += work_s
                    self.busy_s += work_s / len(self.stages)
                if s < last and st.hops_s[s] > 0:
                    yield env.timeout(st.hops_s[s])
            end = env.now
            if self.log.detailed:
                self._log_row([planned], end, end - start, st.latency_s)
            self._commit_rank(rk, planned, end, end - start)

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
