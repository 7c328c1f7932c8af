"""What the end of a step writes for one scheduler: its decode-step clock, its decoders'
inter-token gaps (the step log, the source of ITL), and the requests that finished. A plain
replica is one such rank; an attention-DP replica has D of them, a pipelined one P slots."""

from __future__ import annotations

from array import array
from collections.abc import Callable

import simpy

from simulator.serving.request import Request
from simulator.serving.sched_types import PlannedStep, SchedulerConfig
from simulator.serving.scheduler import Scheduler


class StepLog:
    """Per-step records kept compactly (typed arrays): the source of ITL and the time series."""

    def __init__(self, detailed: bool) -> None:
        # Inter-token gaps as (gap, how many tokens had it): a decode step's duration, plus for
        # decoders that sat out prefill-only steps (chunked prefill off) the time they waited.
        self.itl_s = array("d")
        self.itl_weight = array("d")
        self.detailed = detailed
        self.rows: list[tuple[float, ...]] = []  # time series, only when asked


class Rank:
    """One scheduler with its decode-step clock, its routing load and its held-back decoders:
    an attention-DP rank, a pipeline slot, or a plain replica's only scheduler."""

    def __init__(self, env: simpy.Environment, index: int, cfg: SchedulerConfig) -> None:
        self.env = env  # with index and sched, what the invariant checker reads of a replica
        self.index = index  # the rank's clock id: replica x D + rank
        self.sched = Scheduler(cfg)
        self.assigned = 0
        self.finished = 0
        # Decoders held back by prefill-only steps: [count, seconds waited so far] groups.
        self.stalled: list[list[float]] = []
        self.decode_end_s = array("d")  # end time of each decode step, by decode-step number
        self.wakeup: simpy.Event | None = None  # a pipelined slot's own idle wait

    @property
    def outstanding_requests(self) -> int:
        return self.assigned - self.finished

    @property
    def outstanding_tokens(self) -> int:
        return self.sched.outstanding_tokens

    def prefix_hit_tokens(self, r: Request) -> int:
        """Prompt tokens of `r` found in this rank's prefix cache now."""
        return self.sched.prefix_hit_tokens(r)


def commit_rank(rk: Rank, planned: PlannedStep, end_s: float, dt: float, log: StepLog,
                on_finish: Callable[[Request], None]) -> None:
    """Commit one scheduler's step of `dt` ending at `end_s`: its clock, its decoders' gaps,
    and each finished request, counted on the rank and handed to `on_finish`."""
    sched = rk.sched
    decoded = planned.batch.decode_seqs
    if decoded:
        rk.decode_end_s.append(end_s)
    if decoded and not rk.stalled:  # log_gaps' common case, inline
        log.itl_s.append(dt)
        log.itl_weight.append(decoded)
    else:
        log_gaps(log, sched.num_decoding, rk.stalled, decoded, dt)
    for r in sched.commit(planned, end_s):
        rk.finished += 1
        on_finish(r)
    if decoded and sched.last_emitted > decoded:
        # A step that emits n tokens for a sequence gives one gap and n-1 zeros.
        log.itl_s.append(0.0)
        log.itl_weight.append(float(sched.last_emitted - decoded))


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
