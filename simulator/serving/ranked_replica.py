"""An attention-data-parallel engine replica: D ranks in one engine, each with its own requests,
scheduler limits and KV pool (as SGLang's and TensorRT-LLM's DP attention run), stepping
together because the MoE layers' collectives join every rank each layer.

An in-engine router (`attention_dp_router`) places each request on a rank. A step plans every
rank's batch, costs it with `cost.ranks.ranked_step` (the slowest rank plus the shared MoE
part; with speculative decoding `cost.spec_ranks.ranked_speculative_step`: each rank drafts
and verifies its own sequences, the MoE sees every rank's verified tokens) and commits every
rank at the step's end. A request's `replica` record names its rank
(replica x D + rank), whose decode-step clock times its tokens.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from dataclasses import replace
from typing import Any, cast

import numpy as np

from simulator.cost.draft import SpeculativeStepModel
from simulator.cost.ranks import RankedStep, ranked_decode_run, ranked_step
from simulator.cost.shape import BatchShape
from simulator.cost.spec_ranks import ranked_speculative_step
from simulator.cost.step import StepModel
from simulator.engines.style import EngineStyle
from simulator.serving.clock import Clock
from simulator.serving.replica import MAX_DECODE_RUN, MIN_DECODE_RUN, Replica, ReplicaSteps
from simulator.serving.request import Request
from simulator.serving.router import Router
from simulator.serving.sched_types import PlannedStep, SchedulerConfig
from simulator.serving.scheduler import Scheduler
from simulator.serving.step_commit import Rank, StepLog, commit_rank, log_gaps
from simulator.serving.step_loop import Process, StepPolicy

IDLE = BatchShape()


class RankedReplica(Replica):
    """A replica of `ranks` attention-DP ranks stepping in lockstep."""

    def __init__(
        self,
        env: Clock,
        index: int,
        cfg: SchedulerConfig,
        model: StepModel | SpeculativeStepModel,
        style: EngineStyle,
        on_finish: Callable[[Request], None],
        log: StepLog,
        ranks: int,
        rank_router: Router,
        check: Callable[[Replica, Any, float], None] | None = None,
    ) -> None:
        super().__init__(env, index, cfg, model, style, on_finish, log, None)
        self.rank_check = check
        self.ranks = [Rank(env, index * ranks + j, cfg) for j in range(ranks)]
        self.sched = self.ranks[0].sched  # fits_ever and limits: every rank is configured alike
        self.rank_router = rank_router
        # Speculative decoding: every rank's scheduler draws its own sequences' acceptance.
        self.spec_model = model if isinstance(model, SpeculativeStepModel) else None
        self.ranked_model = model.target if isinstance(model, SpeculativeStepModel) else model
        self.imbalance_s = 0.0  # summed (slowest - mean) rank-local GPU time of every step
        self.gpu_s = 0.0  # summed GPU time of every step

    @property
    def outstanding_tokens(self) -> int:
        return sum(rk.sched.outstanding_tokens for rk in self.ranks) + self.intake.held_tokens

    @property
    def waiting_count(self) -> int:
        return sum(len(rk.sched.waiting) for rk in self.ranks)

    @property
    def preemptions(self) -> int:
        return sum(rk.sched.preemptions for rk in self.ranks)

    @property
    def resume_gaps_s(self) -> list[float]:
        return [g for rk in self.ranks for g in rk.sched.resume_gaps_s]

    @property
    def max_num_seqs(self) -> int:
        return sum(rk.sched.cfg.max_num_seqs for rk in self.ranks)

    def clocks(self) -> list[array[float]]:
        return [rk.decode_end_s for rk in self.ranks]

    def schedulers(self) -> list[Scheduler]:
        return [rk.sched for rk in self.ranks]

    def _take_in(self, r: Request) -> None:
        rank = self.rank_router(self.ranks, r.index, r)
        assert isinstance(rank, Rank)
        rank.assigned += 1
        r.replica = rank.index
        rank.sched.add(r)
        self._wake(rank)

    def _wake(self, rank: Rank) -> None:
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()

    def _policy(self) -> StepPolicy[Any]:
        return RankedSteps(self)

    def _can_fast_forward(self) -> bool:
        """Every rank with work only decodes and none waits (idle ranks stay idle)."""
        busy = [rk.sched for rk in self.ranks if rk.sched.has_work]
        return bool(busy) and all(s.can_fast_forward() for s in busy)

    def _decode_run(self, last_dt: float) -> Process:
        """Run consecutive pure-decode steps of every rank as one SimPy timeout, with exactly
        the floats, records and event order that stepping one by one gives.

        Valid while no rank's batch changes: the run stops before the step in which any
        request finishes, before a rank would run out of KV blocks, and with the last step
        that ends strictly before the next scheduled event, so that event (and all that
        follows) meets the same state at the same time. Clocks and totals are summed step by
        step (numpy's accumulate is sequential), as the step-by-step loop adds them.
        """
        env, log = self.env, self.log
        now = env.instant
        expected = (env.peek() - now) / last_dt if last_dt > 0 else math.inf
        if expected < MIN_DECODE_RUN:
            return
        scheds = [rk.sched for rk in self.ranks]
        active = [j for j, s in enumerate(scheds) if s.has_work]
        # Stop before the first step in which a request finishes (that step runs as usual).
        cap = min(min(scheds[j].steps_before_next_finish() for j in active), MAX_DECODE_RUN,
                  int(min(expected, 1e9)) + 1)
        if cap < MIN_DECODE_RUN:
            return
        decoders = [s.num_decoding for s in scheds]
        run = ranked_decode_run(self.ranked_model, decoders, [s.decode_kv_sum for s in scheds],
                                cap)
        host_s = self.style.host_time_s(max(decoders))
        gpu = np.maximum(run.time_s, self.style.dispatch_floor_s)
        dts = np.maximum(gpu, host_s) if self.style.overlap_cpu_with_gpu else gpu + host_s
        ends = np.cumsum(np.concatenate(([now], dts)))[1:]
        steps = int(np.searchsorted(ends, env.peek(), side="left"))
        for j in active:  # stop before any rank would have to preempt
            steps = scheds[j].steps_within_blocks(steps)[0]
        if steps < 1:
            return
        self._boundary = self._steps + steps
        yield env.timeout_at(float(ends[steps - 1]))
        self._steps += steps
        dts, ends = dts[:steps], ends[:steps]
        for j in active:
            scheds[j].fast_forward(steps, scheds[j].blocks_needed(steps))
        self.busy_s = float(np.cumsum(np.concatenate(([self.busy_s], dts)))[-1])
        self.gpu_s = float(np.cumsum(np.concatenate(([self.gpu_s], run.time_s[:steps])))[-1])
        gaps = run.slowest_rank_s[:steps] - run.mean_rank_s[:steps]
        self.imbalance_s = float(np.cumsum(np.concatenate(([self.imbalance_s], gaps)))[-1])
        ranks = [self.ranks[j] for j in active]
        for rk in ranks:
            rk.decode_end_s.frombytes(ends.tobytes())
        first = 0
        if any(rk.stalled for rk in ranks):  # the first step pays their held-back gaps
            for rk in ranks:
                log_gaps(log, rk.sched.num_decoding, rk.stalled, rk.sched.num_decoding,
                         float(dts[0]))
            first = 1
        weights = np.array([float(decoders[j]) for j in active])
        log.itl_s.frombytes(np.repeat(dts[first:], len(ranks)).tobytes())
        log.itl_weight.frombytes(np.tile(weights, steps - first).tobytes())

    def _log_row(
        self, plans: list[PlannedStep | None], end: float, dt: float, gpu_s: float
    ) -> None:
        """One time-series row for the whole replica (the breakdown of the summed batch)."""
        live = [p for p in plans if p is not None]
        b = BatchShape(
            prefill_tokens=sum(p.batch.prefill_tokens for p in live),
            prefill_seqs=sum(p.batch.prefill_seqs for p in live),
            prefill_attention_pairs=sum(p.batch.prefill_attention_pairs for p in live),
            prefill_context_tokens=sum(p.batch.prefill_context_tokens for p in live),
            prefill_sampled_seqs=sum(p.batch.prefill_sampled_seqs for p in live),
            decode_seqs=sum(p.batch.decode_seqs for p in live),
            decode_context_tokens=sum(p.batch.decode_context_tokens for p in live),
        )
        if self.spec_model is not None:  # the breakdown of an even split of the summed batch
            k = max(p.batch.speculative_tokens_per_seq for p in live)
            c = self.spec_model.cost(replace(b, speculative_tokens_per_seq=k))
        else:
            c = self.ranked_model.cost(b)
        blocks = sum(rk.sched.cfg.num_blocks for rk in self.ranks)
        self.log.rows.append(
            (
                end,
                float(self.index),
                float(sum(p.num_seqs for p in live)),
                float(b.decode_seqs),
                float(b.prefill_tokens),
                float(sum(len(rk.sched.running) for rk in self.ranks)),
                float(self.waiting_count),
                sum(rk.sched.used_blocks for rk in self.ranks) / max(1, blocks),
                dt,
                c.compute_s,
                c.memory_s,
                c.communication_s,
                c.overhead_s,
                dt - gpu_s,
            )
        )


class RankedSteps(ReplicaSteps):
    """The ranks' steps in lockstep: every rank with work plans its batch, the slowest rank
    plus the shared MoE part sets the step's time, every rank commits at its end."""

    def __init__(self, rep: RankedReplica) -> None:
        super().__init__(rep)
        self.ranked = rep
        ranks = rep.ranks

        def has_work() -> bool:
            return any(rk.sched.has_work for rk in ranks)

        self.has_work = has_work
        self.step_time_s = rep.style.step_time_s
        self.fast = rep.rank_check is None and not rep.log.detailed
        self.step = RankedStep(0.0, 0.0, 0.0)  # the last costed step

    def plan(self) -> list[PlannedStep | None] | None:
        rep, env = self.ranked, self.env
        rep._step_start(self.has_work)
        plans = [rk.sched.plan(env.instant) if rk.sched.has_work else None for rk in rep.ranks]
        return plans if any(p is not None for p in plans) else None

    def cost(self, plans: list[PlannedStep | None]) -> float:
        rep = self.ranked
        batches = [IDLE if p is None else p.batch for p in plans]
        if rep.spec_model is not None:
            spec = ranked_speculative_step(rep.spec_model, batches)
            step = self.step = spec.step
            rep.draft_gpu_s += spec.draft_s
        else:
            step = self.step = ranked_step(rep.ranked_model, batches)
        # Each rank's scheduler runs in its own process, so host work overlaps across
        # ranks: the busiest rank's sequence count sets the host time.
        seqs = max(p.num_seqs for p in plans if p is not None)
        # Host-tier loads (deployment.kv_offload): every rank waits for the slowest load.
        reload_s = max(p.reload_s for p in plans if p is not None)
        dt = self.step_time_s(step.time_s, seqs) + reload_s
        if rep.rank_check is not None:
            for rk, p in zip(rep.ranks, plans, strict=True):
                if p is not None:  # each rank is checked as the replica it acts as
                    rep.rank_check(cast(Replica, rk), p, dt)
        return dt

    def commit(self, plans: list[PlannedStep | None], end_s: float, dt: float) -> None:
        rep, step, log, on_finish = self.ranked, self.step, self.log, self.on_finish
        rep.gpu_s += step.time_s
        rep.imbalance_s += step.imbalance_s
        if log.detailed:
            rep._log_row(plans, end_s, dt, step.time_s)
        for rk, planned in zip(rep.ranks, plans, strict=True):
            if planned is not None:
                commit_rank(rk, planned, end_s, dt, log, on_finish)

    def after(self, end_s: float, dt: float) -> Process | None:
        rep = self.ranked
        # A run of unchanged decode steps pays off only if the next event is far enough.
        if (
            self.fast
            and not rep.intake
            and self.env.peek() - end_s >= MIN_DECODE_RUN * dt
            and rep._can_fast_forward()
        ):
            return rep._decode_run(dt)
        return None
