"""Assemble a scenario into replicas, a router and a request source; run it; collect records."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import simpy

from simulator.cost import Formats, MemoryBudget, ParallelLayout, StepModel, memory_budget
from simulator.cost.draft import SpeculativeStepModel
from simulator.cost.kv_transfer import KVLinkCost, kv_link_cost
from simulator.cost.memory import require_fit
from simulator.engines.style import EngineStyle, load_engine_styles
from simulator.errors import InputError, tag_key
from simulator.hardware.profile import Hardware, load_hardware
from simulator.inputs.deployment import AggregatedDeployment, DisaggregatedDeployment, WorkerPool
from simulator.inputs.scenario import Scenario
from simulator.model.architecture import Architecture
from simulator.model.load import load_architecture
from simulator.serving.context_window import check_workload_fits, scenario_max_model_len
from simulator.serving.disaggregated import DisaggregatedPools, PoolSpec
from simulator.serving.metrics import DROP_BUDGET, DROP_CONTEXT, DROP_KV, RECORD_DTYPE
from simulator.serving.ranks_setup import (
    attention_dp_ranks,
    dense_dp_notes,
    expert_slots,
    imbalance_share,
    make_replicas,
    microbatch_slots,
    pipeline_summary,
)
from simulator.serving.replica import Replica, StepLog
from simulator.serving.request import Request
from simulator.serving.router import ROUTERS
from simulator.serving.scheduler import SchedulerConfig
from simulator.serving.spec_engine import SpeculativeEngine, build_speculative, speculative_stats
from simulator.serving.workload import RequestStream

TIMESERIES_COLUMNS = (
    "time_s",
    "replica",
    "batch_seqs",
    "decode_seqs",
    "prefill_tokens",
    "running",
    "waiting",
    "kv_used_fraction",
    "step_time_s",
    "compute_s",
    "memory_s",
    "communication_s",
    "overhead_s",
    "host_s",
)


@dataclass(frozen=True)
class Engine:
    """Everything the physics says about one replica of the scenario's deployment."""

    arch: Architecture
    hw: Hardware
    step_model: StepModel
    memory: MemoryBudget
    scheduler: SchedulerConfig
    style: EngineStyle
    # Disaggregated deployments: this engine is the decode pool's; its prefill pool's engine.
    prefill_pool: Engine | None = None
    kv_link: KVLinkCost | None = None
    # prompt + output tokens one request may hold (deployment.max_model_len, else the model's)
    max_model_len: int = 0
    speculative: SpeculativeEngine | None = None

    @property
    def replica_model(self) -> StepModel | SpeculativeStepModel:
        """What a replica costs its steps with: the target alone, or target plus drafter."""
        return self.speculative.model if self.speculative is not None else self.step_model


@dataclass
class RunOutput:
    records: npt.NDArray[Any]
    step_log: StepLog
    resume_gaps_s: list[float]
    status: str  # completed | time_limit | queue_limit
    preemptions: int
    warnings: list[str] = field(default_factory=list)
    busy_s: list[float] = field(default_factory=list)
    decode_end_s: list[npt.NDArray[np.float64]] = field(default_factory=list)  # per replica
    token_history: dict[int, tuple[list[tuple[int, int]], list[float]]] = field(
        default_factory=dict
    )  # preempted requests only: (earlier decode-step ranges, re-prefill token times)
    end_s: float = 0.0
    pools: DisaggregatedPools | None = None  # disaggregated runs: both pools and transfers
    speculative: dict[str, Any] | None = None  # the result's `speculative` block
    # Speculative runs: per request, the tokens it emitted at each of its decode steps.
    spec_emitted: dict[int, npt.NDArray[np.int64]] = field(default_factory=dict)
    attention_dp_imbalance_share: float | None = None  # attention-DP runs: waits for the slowest
    pipeline: dict[str, Any] | None = None  # pipeline-parallel runs: stages and bubbles


def _resolve_model(name: str, base_dir: Path | None) -> str:
    if base_dir is not None and name.endswith(".json") and not Path(name).is_absolute():
        return str(base_dir / name)
    return name


def build_engine(
    scenario: Scenario, base_dir: Path | None = None, hardware: Hardware | None = None
) -> Engine:
    """Load model and GPU, check the layout and memory fit, size the KV block pool."""
    dep = scenario.deployment
    try:
        arch = load_architecture(_resolve_model(scenario.model, base_dir))
    except ValueError as exc:
        tag_key(exc, "model")
        raise
    try:
        hw = hardware if hardware is not None else load_hardware(scenario.hardware.gpu)
    except ValueError as exc:
        tag_key(exc, "hardware.gpu")
        raise
    max_model_len, window_text = scenario_max_model_len(scenario, arch)
    check_workload_fits(scenario, max_model_len, window_text, base_dir)
    if isinstance(dep, DisaggregatedDeployment):
        # Each pool has its own layout, precision and scheduler; its GPUs hold a whole copy.
        pools: dict[str, Engine] = {}
        for name, pool in (("prefill", dep.prefill), ("decode", dep.decode)):
            try:
                pools[name] = _build_engine(pool, arch, hw, 0.0, base_dir)
            except ValueError as exc:
                tag_key(exc, f"deployment.{name}")
                raise
        link = _kv_link(dep, arch, hw, pools["decode"])
        return replace(pools["decode"], prefill_pool=pools["prefill"], kv_link=link,
                       max_model_len=max_model_len)
    try:
        engine = _build_engine(dep, arch, hw, dep.comm_overlap, base_dir)
        if dep.speculative is not None:
            engine = _with_speculative(engine, dep, scenario.workload.kind, base_dir)
    except ValueError as exc:
        tag_key(exc, "deployment")
        raise
    return replace(engine, max_model_len=max_model_len)


def _build_engine(
    dep: AggregatedDeployment | WorkerPool,
    arch: Architecture,
    hw: Hardware,
    comm_overlap: float,
    base_dir: Path | None = None,
) -> Engine:
    layout = _layout(dep, arch)
    p = dep.precision
    formats = Formats(p.weights, p.activations, p.kv_cache)
    slots = expert_slots(dep.moe_routing, arch, layout, base_dir)
    step_model = StepModel(arch, hw, layout, formats, comm_overlap, slots)
    s = dep.scheduler
    style = load_engine_styles()[dep.engine]
    budget = memory_budget(
        arch,
        hw,
        layout,
        formats,
        dep.gpu_memory_utilization,
        s.max_num_batched_tokens,
        s.max_num_seqs,
        fraction_of_free=style.memory_fraction_of == "free",
    )
    require_fit(arch, hw, layout, formats, budget)
    # Each attention-DP rank has its own KV pool: the replica's capacity split evenly.
    # Each attention-DP rank, or pipeline micro-batch slot, has its own share of the KV pool.
    shares = layout.attention_data_parallel * microbatch_slots(layout)
    num_blocks = budget.kv_capacity_tokens // shares // s.block_size
    if num_blocks < 1:
        raise InputError(
            f"deployment: the KV cache holds {budget.kv_capacity_tokens} tokens, less than one "
            f"block of {s.block_size}; use more GPUs, a smaller format or a higher "
            f"gpu_memory_utilization"
        )
    if dep.overhead is not None:
        style = EngineStyle(
            style.name,
            dep.overhead.step_s,
            dep.overhead.per_seq_s,
            style.overlap_cpu_with_gpu,
            style.kv_admission,
            style.memory_fraction_of,
            style.front_end,
            style.mix_prefill_decode,
        )
    cfg = SchedulerConfig(
        s.max_num_seqs,
        s.max_num_batched_tokens,
        s.chunked_prefill,
        s.policy,
        s.block_size,
        num_blocks,
        style.kv_admission == "reserve_full",
        style.mix_prefill_decode,
    )
    return Engine(arch, hw, step_model, budget, cfg, style)


def _with_speculative(
    engine: Engine, dep: AggregatedDeployment, kind: str | None, base_dir: Path | None
) -> Engine:
    """The engine with its drafter: costed steps, and a KV pool shrunk by the drafter's share."""
    assert dep.speculative is not None
    spec = build_speculative(dep.speculative, kind, engine.step_model, engine.memory, base_dir)
    num_blocks = spec.kv_capacity_tokens // dep.scheduler.block_size
    if num_blocks < 1:
        raise InputError(
            "deployment.speculative: the drafter's weights and KV leave less than one KV "
            "block for the target; use more GPUs, a smaller format or no speculation"
        )
    cfg = replace(engine.scheduler, num_blocks=num_blocks)
    return replace(engine, scheduler=cfg, speculative=spec)


def _layout(pool: AggregatedDeployment | WorkerPool, arch: Architecture) -> ParallelLayout:
    return ParallelLayout(
        pool.tensor_parallel,
        pool.pipeline_parallel,
        attention_dp_ranks(pool, arch),
        pool.expert_parallel,
        pool.moe_routing.redundant_experts,
    )


def _kv_link(
    dep: DisaggregatedDeployment, arch: Architecture, hw: Hardware, decode: Engine
) -> KVLinkCost:
    kv = dep.kv_transfer
    pair = dep.prefill.gpus_per_replica + dep.decode.gpus_per_replica
    if kv.link == "nvlink" and pair > hw.scale_up_domain_size:
        raise InputError(
            f"deployment.kv_transfer.link: nvlink needs a prefill and a decode replica in one "
            f"NVLink domain, but they use {pair} GPUs and {hw.name}'s domain has "
            f"{hw.scale_up_domain_size}; use link: network or smaller replicas"
        )
    return kv_link_cost(
        hw,
        kv.link,
        _layout(dep.prefill, arch),
        _layout(dep.decode, arch),
        decode.memory.kv_bytes_per_token_per_gpu,
        arch.num_layers,
        gb_per_s=kv.gb_per_s,
        latency_s=kv.latency_s,
        layerwise=kv.layerwise,
    )


def pool_spec(engine: Engine, pool: WorkerPool) -> PoolSpec:
    return PoolSpec(
        pool.replicas,
        pool.gpus_per_replica,
        engine.scheduler,
        engine.step_model,
        engine.style,
        engine.memory.kv_capacity_tokens,
    )


CheckHook = Callable[[Replica, Any, float], None]
UNSTABLE_MIN_REQUESTS = 8  # fewer arrivals say nothing about a trend


def run(
    scenario: Scenario,
    engine: Engine,
    stream: RequestStream,
    *,
    timeseries: bool = False,
    check: CheckHook | None = None,
) -> RunOutput:
    """Simulate the request stream through the deployment's replicas."""
    dep = scenario.deployment
    n = len(stream)
    records = np.zeros(n, dtype=RECORD_DTYPE)
    for name in ("arrival_s", "scheduled_s", "first_token_s", "finish_s"):
        records[name] = math.nan
    records["input_tokens"] = stream.input_tokens
    records["output_tokens"] = stream.output_tokens
    records["replica"] = -1
    records["decode_first_step"] = -1
    records["decode_last_step"] = -1
    token_history: dict[int, tuple[list[tuple[int, int]], list[float]]] = {}
    spec_emitted: dict[int, npt.NDArray[np.int64]] = {}

    env = simpy.Environment()
    log = StepLog(timeseries)
    stop = env.event()
    state = {"ended": 0, "next": 0}
    max_context = engine.max_model_len or engine.arch.max_position_embeddings
    cfg = engine.scheduler
    limits = scenario.limits

    def finish(r: Request) -> None:
        rec = records[r.index]
        rec["scheduled_s"] = r.scheduled_s
        rec["first_token_s"] = r.first_token_s
        rec["finish_s"] = r.finish_s
        rec["preemptions"] = r.preemptions
        rec["replica"] = r.replica
        decoded = r.decode_last_step >= 0
        rec["decode_first_step"] = r.decode_start_step if decoded else -1
        rec["decode_last_step"] = r.decode_last_step
        if r.past_segments is not None or r.resume_tokens_s is not None:
            token_history[r.index] = (r.past_segments or [], r.resume_tokens_s or [])
        if r.spec_done is not None:
            spec_emitted[r.index] = np.concatenate(r.spec_done)
        ended()

    def ended() -> None:
        state["ended"] += 1
        if state["ended"] == n and not stop.triggered:
            stop.succeed("completed")
        elif stream.closed_loop_concurrency is not None:
            send_next()

    if engine.speculative is not None:
        cfg = replace(
            cfg, speculative=engine.speculative.decoding(stream, scenario.workload.seed, cfg)
        )
    route = ROUTERS[dep.router]
    pools: DisaggregatedPools | None = None
    warnings_pre: list[str] = []
    make_request: Callable[[int, float, int, int, int], Request] = Request
    fits_ever: Callable[[int, int], bool]
    if isinstance(dep, DisaggregatedDeployment):
        assert engine.prefill_pool is not None and engine.kv_link is not None
        pools = DisaggregatedPools(
            env, pool_spec(engine.prefill_pool, dep.prefill), pool_spec(engine, dep.decode),
            engine.kv_link, route, stream.output_tokens, finish, log, check,
        )
        replicas, everyone, cfg = pools.prefill, pools.replicas, engine.prefill_pool.scheduler
        fits_ever = pools.fits_ever
        make_request = pools.entry_request
    else:
        parts = (engine.replica_model, engine.style, cfg)
        replicas = make_replicas(dep, engine.arch, parts, env, finish, log, check)
        warnings_pre = dense_dp_notes(dep, engine.arch)
        everyone = replicas
        first = replicas[0].sched
        fits_ever = lambda inp, out: first.fits_ever(Request(0, 0.0, inp, out, 0))  # noqa: E731

    def send(i: int) -> bool:
        """Route request i now; False if it was dropped on arrival."""
        records[i]["arrival_s"] = env.now
        inp, out = int(stream.input_tokens[i]), int(stream.output_tokens[i])
        r = make_request(i, env.now, inp, out, int(stream.priority[i]))
        reason = 0
        if inp + out > max_context:
            reason = DROP_CONTEXT
        elif not fits_ever(inp, out):
            reason = DROP_KV
        elif not cfg.chunked_prefill and inp > cfg.max_num_batched_tokens:
            reason = DROP_BUDGET
        if reason:
            records[i]["drop_reason"] = reason
            state["ended"] += 1
            if state["ended"] == n and not stop.triggered:
                stop.succeed("completed")
            return False
        target = route(replicas, i)
        assert isinstance(target, Replica)
        target.submit(r)
        cap = limits.max_waiting_requests
        if cap is not None and target.waiting_count > cap and not stop.triggered:
            stop.succeed("queue_limit")
        return True

    def send_next() -> None:
        """Closed loop: keep one more request in flight (skipping any dropped on arrival)."""
        while state["next"] < n:
            i = state["next"]
            state["next"] = i + 1
            if send(i):
                return

    # Waiting requests (all replicas) just after the arrivals that end each quarter of the
    # stream: the evidence for the "unstable" warning. Offline runs queue everything at t=0
    # by design, so they are not sampled.
    queue_marks: list[int] = []
    quarter_ends: set[int] = set()
    if n >= UNSTABLE_MIN_REQUESTS and stream.arrival_s[-1] > stream.arrival_s[0]:
        quarter_ends = {n * k // 4 - 1 for k in (1, 2, 3, 4)}

    def open_loop() -> Any:
        arrivals = stream.arrival_s
        for i in range(n):
            delay = arrivals[i] - env.now
            if delay > 0:
                yield env.timeout(delay)
            state["next"] = i + 1
            send(i)
            if i in quarter_ends:
                queue_marks.append(sum(rep.waiting_count for rep in everyone))

    if stream.closed_loop_concurrency is not None:
        for _ in range(min(stream.closed_loop_concurrency, n)):
            send_next()
    else:
        env.process(open_loop())

    if limits.max_simulated_time_s is not None:
        horizon_s = float(limits.max_simulated_time_s)

        def timer() -> Any:
            yield env.timeout(horizon_s)
            if not stop.triggered:
                stop.succeed("time_limit")

        env.process(timer())

    if n == 0:
        status = "completed"
    else:
        try:
            status = str(env.run(until=stop))
        except RuntimeError as exc:  # no events left yet requests unfinished: a scheduler bug
            raise RuntimeError(f"simulation stalled with requests in flight: {exc}") from None
    warnings: list[str] = [] if pools is not None else warnings_pre
    batch_cap = sum(rep.max_num_seqs for rep in replicas)
    if unstable_queue(queue_marks, batch_cap):
        marks = ", ".join(str(q) for q in queue_marks)
        warnings.append(
            f"unstable: queue grew throughout the run (waiting requests after 25/50/75/100% of "
            f"the arrivals: {marks}; more than max_num_seqs × replicas = {batch_cap} at the "
            f"last arrival): requests arrive faster than the deployment serves them, so "
            f"latencies grow with num_requests; lower the rate or add capacity"
        )
    decoders = pools.decode if pools is not None else replicas
    return RunOutput(
        records,
        log,
        [g for rep in everyone for g in rep.resume_gaps_s],
        status,
        sum(rep.preemptions for rep in everyone),
        warnings=warnings,
        busy_s=[rep.busy_s for rep in everyone],
        decode_end_s=[
            np.frombuffer(clock, dtype=np.float64) for rep in decoders for clock in rep.clocks()
        ],
        attention_dp_imbalance_share=imbalance_share(replicas),
        pipeline=pipeline_summary(replicas),
        token_history=token_history,
        end_s=float(env.now),
        pools=pools,
        speculative=speculative_stats(engine.speculative, cfg, replicas),
        spec_emitted=spec_emitted,
    )


def unstable_queue(marks: list[int], batch_cap: int) -> bool:
    """The rule of the "unstable" warning: waiting requests sampled at the end of each quarter
    of the arrivals rose every quarter, and at the last arrival more wait than one full batch
    of every replica could take (max_num_seqs × replicas)."""
    return (
        len(marks) == 4
        and all(a < b for a, b in itertools.pairwise(marks))
        and marks[-1] > batch_cap
    )

