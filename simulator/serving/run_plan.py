"""A planned run of pure decode steps: every step's time and end, and the replica's busy and
GPU totals after each, costed at once while nothing changes the batch (nothing taken in, no
prefill, no finish before the last step, no block shortage). The replica walks it event by
event (replica.Replica._decode_walk), so the run passes arrivals that the engine holds back,
and commits the steps done whenever the walk wakes."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import numpy as np

from simulator.cost.step import StepModel
from simulator.engines.style import EngineStyle
from simulator.serving.scheduler import Scheduler

# Longer runs are costed with numpy (its per-call cost is worth it), shorter ones float by
# float; both give the same floats.
VECTOR_STEPS = 32


@dataclass(slots=True)
class RunPlan:
    """Steps 0..steps-1 of a run. Sums are taken step by step, in order (as the clock and the
    totals add them stepping one by one), so every float equals the step-by-step one."""

    decoders: int  # sequences in every step
    dts: list[float]  # wall time of each step
    ends: list[float]  # end time of each step
    busy_s: list[float]  # the replica's busy time before step 0 and after each step
    gpu_s: list[float]  # the replica's GPU time likewise
    steps: int
    finishing: bool  # the last step is the one in which the next request finishes
    blocks: int  # new KV blocks the whole run takes


def plan_run(sched: Scheduler, model: StepModel, style: EngineStyle, now: float, busy_s: float,
             gpu_s: float, cap: int, min_steps: int) -> RunPlan | None:
    """The next at most `cap` pure decode steps that can run unchanged from `now`: up to the
    step in which a request finishes, and short of the step that would find no free KV block
    (that one preempts, step by step). None when fewer than `min_steps` can run."""
    to_finish = sched.steps_before_next_finish() + 1
    if min(cap, to_finish) < min_steps:
        return None
    steps, blocks = sched.steps_within_blocks(min(cap, to_finish))
    if steps < min_steps:
        return None
    n, kv = sched.num_decoding, sched.decode_kv_sum
    if steps >= VECTOR_STEPS:
        gpu = model.decode_times_s(n, kv + n * np.arange(steps, dtype=np.float64)).tolist()
    else:
        gpu = model.decode_step_times_s(n, kv, steps)
    host_s = style.host_time_s(n)
    floor = style.dispatch_floor_s
    held = [g if g >= floor else floor for g in gpu] if floor > 0 else gpu
    if style.overlap_cpu_with_gpu:
        dts = [g if g >= host_s else host_s for g in held]
    else:
        dts = [g + host_s for g in held]
    ends = list(accumulate(dts, initial=now))[1:]
    busy = list(accumulate(dts, initial=busy_s))
    return RunPlan(n, dts, ends, busy, list(accumulate(gpu, initial=gpu_s)), steps,
                   steps == to_finish, blocks)
