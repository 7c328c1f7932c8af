"""Invariants of a simulation run, checked every engine step (`simulate(..., check=True)`).

A debug mode: each step costs the operator rows of its batch (memoized by token count, as
`StepModel.time_s` is) and, at times, a walk over the running requests, so a checked run takes
1.3 to 3 times as long as a plain one. Any broken invariant raises
`InvariantViolation`, whose one-line message names the invariant, the replica, the step and the
simulated time; the CLI prints it and exits with status 3.

Per step (before the step's time passes):
  kv_blocks          0 <= free KV blocks <= capacity, and the blocks the scheduler counts as used
                     equal the blocks its running requests hold (prefilling requests their own,
                     decoding ones one per block of cached tokens, plus this step's new token;
                     recounted every step while <= 64 requests run, else every 8th step;
                     a prefix-cached block shared by k requests counted once), and the idle
                     cached blocks fit in the free ones
  batch_seqs         sequences in the step <= max_num_seqs
  batch_tokens       BatchShape.tokens <= max_num_batched_tokens, except the one case the
                     scheduler allows (as vLLM does): without chunked prefill, a prefill-only
                     step of one recomputed context (prompt plus outputs, after a preemption)
  running_seqs       running requests <= max_num_seqs, and running = prefilling + decoding
  time_monotone      the clock never goes backwards
  step_time          dt is finite, > 0, and >= the roofline floor of its batch:
                       floor = max(total FLOPs / peak tensor FLOP/s of the chip over every format,
                                   total HBM bytes of non-communication ops / peak HBM bandwidth)
                     (peaks are datasheet figures, times any efficiency factor above 1)
At the end (`finish`, on the run output):
  conservation       arrived = completed + dropped on arrival + in flight, in flight >= 0, and 0
                     (with every request arrived but the unsent turns of sessions cut short)
                     when the status is 'completed'
  request_times      arrival <= scheduled <= first token <= finish for every completed request
  kv_freed           a completed run leaves every replica's KV pool free and its queues empty
  sampled_tokens     output tokens of completed requests <= rows sampled over all steps
On the result (`check_result`):
  throughput_bound   output_tokens_per_s <= sum over replicas of max over steps of
                     (sampled rows / floor time). Why it holds: a replica's completed tokens were
                     sampled in its steps that ended by the last finish; those steps are disjoint
                     and lie in [first arrival, last finish], so their summed dt <= duration_s;
                     and tokens <= sum(rows) <= max(rows / floor) * sum(floor) <= max * sum(dt).
  finite_result      no NaN or infinity anywhere in the result numbers
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from simulator.errors import InvariantViolation  # defined low so the CLI catches it unimported
from simulator.serving.records import DROP_SESSION

if TYPE_CHECKING:
    from simulator.cost.ops import OpCost
    from simulator.cost.shape import BatchShape
    from simulator.serving.engine_build import Engine
    from simulator.serving.replica import Replica
    from simulator.serving.request import Request
    from simulator.serving.sched_types import PlannedStep
    from simulator.serving.simulation import RunOutput



class Summarized(Protocol):
    """What `check_result` reads of a result: its summary dict. A protocol, so this layer
    never imports the API layer that builds results (and calls this checker)."""

    @property
    def summary(self) -> dict[str, Any]: ...


REL_TOL = 1e-9  # float slack on the bounds (sums of many step times)
# The KV recount walks the running requests: every step while few run, else every 8th step.
# A block-accounting error persists in the counters, so it is still caught within 8 steps.
RECOUNT_EVERY_STEP_UP_TO = 64
RECOUNT_PERIOD = 8


class InvariantChecker:
    """The `check` hook of `simulation.run`: call it before each step, `finish` at the end."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        cfg = engine.scheduler
        self.max_seqs = cfg.max_num_seqs
        self.max_tokens = cfg.max_num_batched_tokens
        self.num_blocks = cfg.num_blocks
        hw = engine.hw
        boost = max(1.0, hw.gemm_compute_fraction, hw.attention_compute_fraction)
        self.peak_flops_per_s = max(hw.dense_flops_per_s.values()) * boost
        self.peak_hbm_bytes_per_s = hw.hbm_bytes_per_s * max(
            1.0, hw.hbm_bandwidth_fraction, hw.attention_hbm_fraction
        )
        self.replicas: dict[int, Replica] = {}
        self.steps: dict[int, int] = {}
        self.sampled_rows = 0
        # Disaggregated with the prefill emitting the first token: that token was sampled on a
        # prefill replica, whose steps this checker does not see.
        pre = engine.prefill_pool
        self.first_sampled_elsewhere = pre is not None and pre.style.prefill_emits_first_token
        self.max_rate: dict[int, float] = {}  # per replica: max over steps of rows / floor
        self.last_now = -math.inf
        self._token_work: dict[int, tuple[float, float]] = {}
        self._head_work: dict[int, tuple[float, float]] = {}

    # ---- per step -------------------------------------------------------------------------

    def floor_s(self, batch: BatchShape) -> float:
        """Roofline floor of a step: all its FLOPs at peak, or all its HBM bytes at peak.

        Sums the operators of `StepModel.cost(batch)` (token ops + attention ops + head ops),
        memoizing the token-count and sampled-row parts as `StepModel.time_s` does."""
        m = self.engine.step_model
        tokens, rows = batch.tokens, batch.sampled_rows
        tf, tb = self._token_work.get(tokens) or self._work(m.token_ops(tokens), tokens, True)
        hf, hb = self._head_work.get(rows) or self._work(m.head_ops(rows), rows, False)
        af, ab = _work(m.attention_ops(batch))
        flops, nbytes = tf + hf + af, tb + hb + ab
        return max(flops / self.peak_flops_per_s, nbytes / self.peak_hbm_bytes_per_s)

    def floor_from_cost_s(self, batch: BatchShape) -> float:
        """The same floor from the full `StepModel.cost` breakdown (the reference)."""
        f, b = _work(self.engine.step_model.cost(batch).ops)
        return max(f / self.peak_flops_per_s, b / self.peak_hbm_bytes_per_s)

    def _work(self, ops: list[OpCost], key: int, token: bool) -> tuple[float, float]:
        work = _work(ops)
        (self._token_work if token else self._head_work)[key] = work
        return work

    def __call__(self, replica: Replica, planned: PlannedStep, dt: float) -> None:
        idx = replica.index
        step = self.steps.get(idx, 0)
        self.steps[idx] = step + 1
        self.replicas[idx] = replica
        now = float(replica.env.now)

        def fail(invariant: str, detail: str) -> InvariantViolation:
            return InvariantViolation(invariant, idx, step, now, detail)

        if not now >= self.last_now:
            raise fail("time_monotone", f"the clock went back from {self.last_now!r} s")
        self.last_now = now
        sched = replica.sched
        b = planned.batch
        if not 0 <= sched.free_blocks <= self.num_blocks:
            raise fail(
                "kv_blocks",
                f"{sched.free_blocks} free KV blocks, outside [0, capacity {self.num_blocks}]",
            )
        cache = sched.cache
        if cache is not None and len(cache.idle) > sched.free_blocks:
            raise fail("kv_blocks", f"{len(cache.idle)} idle cached blocks, more than the "
                                    f"{sched.free_blocks} free ones that hold them")
        running = len(sched.running)
        if running <= RECOUNT_EVERY_STEP_UP_TO or step % RECOUNT_PERIOD == 0:
            held = self._blocks_held(replica, decoding_now=b.decode_seqs > 0)
        else:
            held = sched.used_blocks
        if held != sched.used_blocks:
            raise fail(
                "kv_blocks",
                f"the scheduler counts {sched.used_blocks} KV blocks in use but its running "
                f"requests hold {held}",
            )
        if planned.num_seqs > self.max_seqs:
            raise fail(
                "batch_seqs", f"{planned.num_seqs} sequences > max_num_seqs {self.max_seqs}"
            )
        if b.tokens > self.max_tokens and not self._lone_recompute(planned):
            raise fail(
                "batch_tokens", f"{b.tokens} tokens > max_num_batched_tokens {self.max_tokens}"
            )
        if running > self.max_seqs:
            raise fail("running_seqs", f"{running} running > max_num_seqs {self.max_seqs}")
        if running != len(sched.prefilling) + sched.num_decoding:
            raise fail(
                "running_seqs",
                f"{running} running != {len(sched.prefilling)} prefilling + "
                f"{sched.num_decoding} decoding",
            )
        if not (math.isfinite(dt) and dt > 0):
            raise fail("step_time", f"step time {dt!r} s is not finite and positive")
        floor = self.floor_s(b)
        if dt < floor * (1 - REL_TOL):
            raise fail(
                "step_time",
                f"step time {dt:.9g} s is below the roofline floor {floor:.9g} s of its batch",
            )
        rows = b.sampled_rows
        self.sampled_rows += rows
        if rows and floor > 0:
            self.max_rate[idx] = max(self.max_rate.get(idx, 0.0), rows / floor)
        elif rows:
            self.max_rate[idx] = math.inf

    def _lone_recompute(self, planned: PlannedStep) -> bool:
        """A whole recomputed context prefilled alone (chunked prefill off)."""
        if self.engine.scheduler.chunked_prefill or planned.batch.decode_seqs:
            return False
        if len(planned.chunks) != 1:
            return False
        r, chunk = planned.chunks[0]
        return r.preemptions > 0 and chunk == r.target == r.input_tokens + r.generated

    def _blocks_held(self, replica: Replica, decoding_now: bool) -> int:
        """KV blocks the running requests hold once this step's reservations are made."""
        sched = replica.sched
        reserve_full = sched.cfg.reserve_full
        bs, state = sched.cfg.block_size, sched.cfg.state_blocks
        # cached tokens of a decoder = decode_start_kv + (step - decode_start_step); a decode
        # step writes one more token's KV, whose block is reserved before the step
        step = sched.step + (1 if decoding_now else 0) + bs - 1
        held = 0
        for r in sched.running.values():
            if r.decode_start_step >= 0 and not reserve_full and r.spec_cum is not None:
                held += _speculative_blocks(r, sched.step, bs, decoding_now) + state
            elif r.decode_start_step >= 0 and not reserve_full:
                held += (r.decode_start_kv + step - r.decode_start_step) // bs + state
            else:
                held += r.blocks
        cache = sched.cache
        if cache is not None:  # a cached block shared by k running requests is one block
            held -= sum(k - 1 for k in cache.refs.values() if k > 1)
        return held

    # ---- at the end -----------------------------------------------------------------------

    def finish(self, out: RunOutput) -> None:
        rec = out.records
        end = out.end_s

        def fail(invariant: str, detail: str, replica: int | None = None) -> InvariantViolation:
            return InvariantViolation(invariant, replica, None, end, detail)

        n = len(rec)
        arrived = int(np.count_nonzero(np.isfinite(rec["arrival_s"])))
        # Later turns of a session cut short are dropped without being sent.
        unsent = int(np.count_nonzero(rec["drop_reason"] == DROP_SESSION))
        dropped = int(np.count_nonzero(rec["drop_reason"] != 0)) - unsent
        ok = (rec["drop_reason"] == 0) & np.isfinite(rec["finish_s"])
        completed = int(np.count_nonzero(ok))
        in_flight = arrived - completed - dropped
        if in_flight < 0 or (out.status == "completed" and (in_flight or arrived + unsent != n)):
            raise fail(
                "conservation",
                f"status {out.status}: {n} requests, {arrived} arrived, {completed} completed, "
                f"{dropped} dropped on arrival, {unsent} unsent, {in_flight} in flight",
            )
        done = rec[ok]
        order = (
            (done["arrival_s"] <= done["scheduled_s"])
            & (done["scheduled_s"] <= done["first_token_s"])
            & (done["first_token_s"] <= done["finish_s"])
        )
        if not order.all():
            i = int(np.flatnonzero(ok)[np.argmin(order)])
            r = rec[i]
            raise fail(
                "request_times",
                f"request {i}: arrival {r['arrival_s']!r}, scheduled {r['scheduled_s']!r}, "
                f"first token {r['first_token_s']!r}, finish {r['finish_s']!r} out of order",
            )
        if out.status == "completed":
            for idx, rep in sorted(self.replicas.items()):
                s = rep.sched
                if s.free_blocks != self.num_blocks or s.running or len(s.waiting):
                    raise fail(
                        "kv_freed",
                        f"run completed with {s.used_blocks} KV blocks still in use, "
                        f"{len(s.running)} running and {len(s.waiting)} waiting",
                        idx,
                    )
        tokens = int(done["output_tokens"].sum())
        if self.first_sampled_elsewhere:
            tokens -= done.size
        if tokens > self.sampled_rows:
            raise fail(
                "sampled_tokens",
                f"{tokens} output tokens completed but only {self.sampled_rows} rows sampled",
            )

    def check_result(self, result: Summarized) -> None:
        """Bounds on the summary: throughput under the roofline ideal, every number finite."""
        summary = result.summary

        def fail(invariant: str, detail: str) -> InvariantViolation:
            return InvariantViolation(invariant, None, None, float(summary["duration_s"]), detail)

        for key, value in _numbers(summary):
            if not math.isfinite(value):
                raise fail("finite_result", f"{key} is {value!r}")
        bound = sum(self.max_rate.values())
        tps = float(summary["output_tokens_per_s"])
        if tps > bound * (1 + REL_TOL):
            raise fail(
                "throughput_bound",
                f"output_tokens_per_s {tps:.9g} exceeds the roofline bound {bound:.9g} "
                f"(sum over replicas of max sampled rows / floor time of a step)",
            )


def _work(ops: Iterable[OpCost]) -> tuple[float, float]:
    """(FLOPs, HBM bytes) of operators; communication moves bytes over links, not HBM."""
    flops = nbytes = 0.0
    for o in ops:
        flops += o.flops
        if o.bound != "communication":
            nbytes += o.bytes
    return flops, nbytes


def _numbers(data: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    """Every number in a nested result dict, with its dotted key (None and strings skipped)."""
    if isinstance(data, Mapping):
        for k, v in data.items():
            yield from _numbers(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(data, list | tuple):
        for i, v in enumerate(data):
            yield from _numbers(v, f"{prefix}[{i}]")
    elif isinstance(data, bool) or data is None or isinstance(data, str):
        return
    elif isinstance(data, int | float | np.integer | np.floating):
        yield prefix, float(data)


__all__ = ["InvariantChecker", "InvariantViolation"]


def _speculative_blocks(r: Request, step: int, bs: int, decoding_now: bool) -> int:
    """Blocks of a speculating decoder: its cached tokens, and during a verify step the
    larger of the KV the verify writes (last token + its drafts) and what it keeps."""
    kv = r.kv_tokens_at(step)
    if not decoding_now:
        return -(-kv // bs)
    drafts = int(r.spec_drafts[step - r.decode_start_step])
    return max(-(-(kv + 1 + drafts) // bs), -(-r.kv_tokens_at(step + 1) // bs))
