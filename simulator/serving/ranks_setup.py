"""Assembly of attention-DP and expert-parallel engines: how many ranks a replica has, where
routed tokens land (the busiest EP rank's expert slots), and the replicas a run builds."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from simulator.cost.draft import SpeculativeStepModel
from simulator.cost.layout import ParallelLayout
from simulator.cost.moe_routing import hottest_rank_slots, normalized, uniform_loads, zipf_loads
from simulator.cost.step import StepModel
from simulator.engines.style import EngineStyle
from simulator.errors import InputError
from simulator.inputs.deployment import AggregatedDeployment, MoeRouting, WorkerPool
from simulator.model.architecture import Architecture
from simulator.serving.clock import Clock
from simulator.serving.pipelined_replica import PipelinedReplica
from simulator.serving.ranked_replica import RankedReplica
from simulator.serving.replica import Replica, StepLog
from simulator.serving.request import Request
from simulator.serving.router import ROUTERS
from simulator.serving.sched_types import SchedulerConfig


def attention_dp_ranks(pool: AggregatedDeployment | WorkerPool, arch: Architecture) -> int:
    """Attention-DP ranks inside one engine. A dense model has no layer that joins the ranks,
    so its attention-DP ranks are independent replicas (`replicas_per_engine`)."""
    return pool.attention_data_parallel if arch.moe is not None else 1


def microbatch_slots(layout: ParallelLayout) -> int:
    """Micro-batches a replica keeps in flight: one per pipeline stage (attention-DP engines
    step their ranks in lockstep through the stages, one batch at a time)."""
    return layout.pipeline_parallel if layout.attention_data_parallel == 1 else 1


def replicas_per_engine(pool: AggregatedDeployment | WorkerPool, arch: Architecture) -> int:
    return 1 if arch.moe is not None else pool.attention_data_parallel


def dense_dp_notes(pool: AggregatedDeployment, arch: Architecture) -> list[str]:
    dp = pool.attention_data_parallel
    if arch.moe is not None or dp == 1:
        return []
    return [
        f"{arch.name} is dense: attention_data_parallel {dp} runs as {dp} independent "
        f"replicas per engine ({pool.replicas * dp} in all), since no MoE layer joins the ranks"
    ]


def read_load_profile(path: Path) -> list[float]:
    """Per-expert loads from a text/CSV file: numbers separated by commas or whitespace
    (a non-numeric first line is a header)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"deployment.moe_routing.profile: cannot read {path}: {exc}") from None
    lines = text.strip().splitlines()
    if lines and not re.match(r"^\s*[-+0-9.eE,\s]+$", lines[0]):
        lines = lines[1:]
    fields = [f for line in lines for f in re.split(r"[,\s]+", line.strip()) if f]
    try:
        return [float(f) for f in fields]
    except ValueError as exc:
        raise InputError(
            f"deployment.moe_routing.profile: {path} holds a non-number ({exc}); give one load "
            f"per expert, in expert order"
        ) from None


def expert_slots(
    routing: MoeRouting, arch: Architecture, layout: ParallelLayout, base_dir: Path | None
) -> tuple[float, ...] | None:
    """The busiest EP rank's slot shares, or None for uniform routing without copies."""
    moe = arch.moe
    if moe is None:
        if routing.skew != "uniform" or routing.profile or routing.redundant_experts:
            raise InputError(f"deployment.moe_routing: {arch.name} is dense and has no experts")
        return None
    if routing.profile is not None:
        path = Path(routing.profile)
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        raw = read_load_profile(path)
        if len(raw) != moe.num_experts:
            raise InputError(
                f"deployment.moe_routing.profile: {path} has {len(raw)} loads; {arch.name} has "
                f"{moe.num_experts} experts"
            )
        try:
            loads = normalized(raw)
        except ValueError as exc:
            raise InputError(f"deployment.moe_routing.profile: {path}: {exc}") from None
    elif routing.skew == "zipf":
        loads = zipf_loads(moe.num_experts, routing.s)
    elif routing.redundant_experts == 0:
        return None
    else:
        loads = uniform_loads(moe.num_experts)
    try:
        return hottest_rank_slots(loads, layout.expert_parallel, routing.redundant_experts)
    except ValueError as exc:
        raise InputError(f"deployment.moe_routing: {exc}") from None


def speculative_key(dep: AggregatedDeployment | WorkerPool) -> str:
    """Where a deployment's speculative block sits: only a decode pool of a disaggregated
    deployment speculates there."""
    return "deployment.speculative" if isinstance(dep, AggregatedDeployment) else (
        "deployment.decode.speculative")


def make_replicas(
    dep: AggregatedDeployment | WorkerPool,
    arch: Architecture,
    engine: tuple[StepModel | SpeculativeStepModel, EngineStyle, SchedulerConfig],
    env: Clock,
    finish: Callable[[Request], None],
    log: StepLog,
    check: Callable[[Replica, Any, float], None] | None,
) -> list[Replica]:
    """The run's replicas: attention-DP engines of ranks, or plain ones."""
    model, style, cfg = engine
    target = model if isinstance(model, StepModel) else model.target
    ranks = target.layout.attention_data_parallel
    count = dep.replicas * replicas_per_engine(dep, arch)
    slots = microbatch_slots(target.layout)
    if slots > 1 and not isinstance(model, StepModel):
        raise InputError(
            f"{speculative_key(dep)}: speculative decoding with pipeline micro-batches "
            f"(pipeline_parallel {target.layout.pipeline_parallel}) is not simulated yet; remove "
            f"speculative or use pipeline_parallel 1"
        )
    if ranks > 1:
        router = ROUTERS[dep.attention_dp_router]
        return [
            RankedReplica(env, i, cfg, model, style, finish, log, ranks, router, check)
            for i in range(count)
        ]
    if slots > 1:
        return [
            PipelinedReplica(env, i, cfg, target, style, finish, log, check)
            for i in range(count)
        ]
    return [Replica(env, i, cfg, model, style, finish, log, check) for i in range(count)]


def pipeline_summary(replicas: Sequence[Replica]) -> dict[str, Any] | None:
    """The result's `pipeline` block: layers and busy share per stage, and the bubble share
    (stage idle time while the replica had a micro-batch in some stage)."""
    piped = [r for r in replicas if isinstance(r, PipelinedReplica)]
    if not piped:
        return None
    stats = [r.pipeline_stats() for r in piped]
    stages = stats[0]["stages"]
    busy = [sum(s["stage_busy_s"][i] for s in stats) for i in range(stages)]
    span = sum(r.active_span_s for r in piped)
    return {
        "stages": stages,
        "layers_per_stage": stats[0]["layers_per_stage"],
        "stage_busy_fraction": [b / span if span > 0 else 0.0 for b in busy],
        "bubble_share": max(0.0, 1.0 - sum(busy) / (stages * span)) if span > 0 else 0.0,
    }


def imbalance_share(replicas: Sequence[Replica]) -> float | None:
    """Share of attention-DP step time spent waiting for the slowest rank (None: no ranks)."""
    ranked = [
        r for r in replicas if isinstance(r, RankedReplica) and not isinstance(r, PipelinedReplica)
    ]
    if not ranked:
        return None
    busy = sum(r.busy_s for r in ranked)
    return max(0.0, sum(r.imbalance_s for r in ranked) / busy) if busy > 0 else 0.0
