"""Build the engine of a scenario: model, GPU, layout, memory fit, scheduler limits, engine
style, drafter and, for disaggregated deployments, both pools and the KV link between them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from simulator.cost import Formats, MemoryBudget, ParallelLayout, StepModel, memory_budget
from simulator.cost.draft import SpeculativeStepModel
from simulator.cost.kv_transfer import KVLinkCost, kv_link_cost
from simulator.cost.memory import require_fit
from simulator.engines.style import EngineStyle, engine_style
from simulator.errors import InputError, tag_key
from simulator.hardware.profile import Hardware, load_hardware
from simulator.inputs.deployment import (
    AggregatedDeployment,
    DisaggregatedDeployment,
    WorkerPool,
)
from simulator.inputs.scenario import Scenario
from simulator.inputs.workload import Workload
from simulator.model.architecture import ATTENTION_GROUPS, Architecture
from simulator.model.load import load_architecture
from simulator.serving.disaggregated import PoolSpec
from simulator.serving.engine_hardware import engine_hardware
from simulator.serving.ranks_setup import (
    attention_dp_ranks,
    expert_slots,
    microbatch_slots,
)
from simulator.serving.sched_types import SchedulerConfig
from simulator.serving.spec_engine import SpeculativeEngine, build_speculative
from simulator.workload.context_window import check_workload_fits, scenario_max_model_len


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

    def burst_rounds(self, workload: Workload) -> float:
        """Rounds a closed loop's start-up burst sets TTFT for: the style's
        closed_loop_burst_rounds, of the pool where the burst queues (the prefill pool of a
        P/D deployment), for identical requests, whose arrivals stay a train as long as the
        engine keeps them so; 1 where lengths are drawn, since requests finishing at
        different times break the train up within a round (docs/closed-loops.md)."""
        identical = all(getattr(spec, "kind", None) == "fixed"
                        for spec in (workload.input_tokens, workload.output_tokens))
        return (self.prefill_pool or self).style.closed_loop_burst_rounds if identical else 1.0


def _resolve_model(name: str, base_dir: Path | None) -> str:
    if base_dir is not None and name.endswith(".json") and not Path(name).is_absolute():
        return str(base_dir / name)
    return name


def build_engine(
    scenario: Scenario,
    base_dir: Path | None = None,
    hardware: Hardware | None = None,
    profiles: Mapping[str, Hardware] | None = None,
) -> Engine:
    """Load model and GPU, check the layout and memory fit, size the KV block pool.
    `hardware` replaces the scenario's GPU profile (the uncertainty band's perturbed copies);
    `profiles` stands in for shipped profiles by name, the scenario's and any pool's (a
    calibration overlay's values applied to them)."""
    known = profiles or {}

    def profile(name: str) -> Hardware:
        return known[name] if name in known else load_hardware(name)

    dep = scenario.deployment
    try:
        arch = load_architecture(_resolve_model(scenario.model, base_dir))
    except ValueError as exc:
        tag_key(exc, "model")
        raise
    try:
        hw = hardware if hardware is not None else profile(scenario.hardware.gpu)
    except ValueError as exc:
        tag_key(exc, "hardware.gpu")
        raise
    max_model_len, window_text = scenario_max_model_len(scenario, arch)
    check_workload_fits(scenario, max_model_len, window_text, base_dir)
    if isinstance(dep, DisaggregatedDeployment):
        # Each pool has its own layout, precision and scheduler; its GPUs hold a whole copy.
        # A pool with its own `hardware` costs its steps on that GPU profile.
        pools: dict[str, Engine] = {}
        for name, pool in (("prefill", dep.prefill), ("decode", dep.decode)):
            pool_hw = hw
            if pool.hardware is not None:
                try:
                    pool_hw = profile(pool.hardware.gpu)
                except ValueError as exc:
                    tag_key(exc, f"deployment.{name}.hardware.gpu")
                    raise
            try:
                pools[name] = _build_engine(pool, arch, pool_hw, 0.0, base_dir)
                if pool.speculative is not None:  # the schema lets only the decode pool draft
                    pools[name] = _with_speculative(pools[name], pool, scenario.workload.kind,
                                                    base_dir, f"deployment.{name}.speculative")
            except ValueError as exc:
                tag_key(exc, f"deployment.{name}")
                raise
        link = _kv_link(dep, arch, pools["prefill"].hw, pools["decode"])
        return replace(pools["decode"], prefill_pool=pools["prefill"], kv_link=link,
                       max_model_len=max_model_len)
    try:
        engine = _build_engine(dep, arch, hw, dep.comm_overlap, base_dir)
        if dep.speculative is not None:
            engine = _with_speculative(engine, dep, scenario.workload.kind, base_dir,
                                       "deployment.speculative")
    except ValueError as exc:
        tag_key(exc, "deployment")
        raise
    return replace(engine, max_model_len=max_model_len)


_STEP_MODELS: dict[str, StepModel] = {}
MAX_SHARED_STEP_MODELS = 64


def shared_step_model(
    arch: Architecture,
    hw: Hardware,
    layout: ParallelLayout,
    formats: Formats,
    comm_overlap: float,
    slots: tuple[float, ...] | None,
    moe_unfused: bool = False,
) -> StepModel:
    """One StepModel per configuration in a process, so its memoized step parts (pure
    functions of the configuration) carry over between the runs that share it: the sweep
    points of one config at different loads, the band's reruns. Keyed by the full repr of
    every input (a perturbed profile of the same name is another key)."""
    key = repr((arch, hw, layout, formats, comm_overlap, slots, moe_unfused))
    model = _STEP_MODELS.get(key)
    if model is None:
        if len(_STEP_MODELS) >= MAX_SHARED_STEP_MODELS:
            _STEP_MODELS.clear()
        model = _STEP_MODELS[key] = StepModel(
            arch, hw, layout, formats, comm_overlap, slots, moe_unfused
        )
    return model


def _build_engine(
    dep: AggregatedDeployment | WorkerPool,
    arch: Architecture,
    hw: Hardware,
    comm_overlap: float,
    base_dir: Path | None = None,
) -> Engine:
    layout = _layout(dep, arch)
    if dep.attention_kernel is not None:
        hw = hw.with_prefill_kernel(dep.attention_kernel)
    p = dep.precision
    # The deployment overrides the checkpoint's BF16 module groups, in full or for attention.
    if p.keep_bf16 is not None:
        arch = replace(arch, bf16_modules=frozenset(p.keep_bf16))
    elif p.keep_attention_bf16 is not None:
        kept = arch.bf16_modules - ATTENTION_GROUPS
        arch = replace(
            arch, bf16_modules=kept | ATTENTION_GROUPS if p.keep_attention_bf16 else kept
        )
    formats = Formats(p.weights, p.activations, p.kv_cache)
    slots = expert_slots(dep.moe_routing, arch, layout, base_dir)
    if dep.moe_kernel == "unfused" and (arch.moe is None or arch.num_moe_layers == 0):
        raise InputError(
            f"deployment.moe_kernel: 'unfused' prices a mixture-of-experts layer, and "
            f"{arch.name} has none; leave moe_kernel out (fused) for a dense model"
        )
    style = engine_style(dep.engine, dep.engine_version)
    hw = engine_hardware(hw, arch, p.weights, style, dep.overhead)
    step_model = shared_step_model(
        arch, hw, layout, formats, comm_overlap, slots, dep.moe_kernel == "unfused"
    )
    s = dep.scheduler
    if not dep.cuda_graphs:
        style = style.eager()
    if arch.linear is not None:
        style = style.for_hybrid(speculative=dep.speculative is not None)
    # Per-layer host dispatch counts transformer-layer equivalents: two residual blocks each
    # (Nemotron-H's mixer and MLP blocks stand apart; 2 x num_layers elsewhere).
    style = style.with_layers(arch.residual_blocks / 2 / layout.pipeline_parallel)
    budget = memory_budget(
        arch,
        hw,
        layout,
        formats,
        dep.gpu_memory_utilization,
        s.max_num_batched_tokens,
        s.max_num_seqs,
        fraction_of_free=style.memory_fraction_of == "free",
        state_pool_share=style.state_pool_share,
        state_slots_per_request=style.state_slots_per_request,
        states_paged=style.states_paged,
    )
    require_fit(arch, hw, layout, formats, budget)
    max_seqs = s.max_num_seqs
    if budget.max_seqs_by_state is not None:
        if budget.max_seqs_by_state < 1:
            raise InputError(
                f"deployment: {style.name}'s state pool holds no running request of "
                f"{arch.name} ({budget.state_bytes_per_seq_per_gpu / 1e6:.0f} MB of recurrent "
                f"state each, {style.state_slots_per_request} slots a request); use more GPUs "
                f"or a smaller format")
        max_seqs = min(max_seqs, budget.max_seqs_by_state)
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
        style = style.with_host_cost(dep.overhead.step_s, dep.overhead.per_seq_s,
                                     dep.overhead.request_latency_s).with_burst_rounds(
            dep.overhead.burst_rounds)
    cfg = SchedulerConfig(
        max_seqs,
        s.max_num_batched_tokens,
        s.chunked_prefill,
        s.policy,
        s.block_size,
        num_blocks,
        style.kv_admission == "reserve_full",
        style.mix_prefill_decode if s.mix_prefill_decode is None else s.mix_prefill_decode,
        recv_interval_steps=s.recv_interval_steps,
        max_prefill_tokens=(
            s.max_prefill_tokens if s.max_prefill_tokens is not None else style.max_prefill_tokens
        ),
        mix_whole_prompts=style.mix_whole_prompts,
        state_blocks=state_blocks(budget, s.block_size, style),
        prefix_caching=s.prefix_caching,
        **_offload_tier(dep, hw, budget.kv_bytes_per_token_per_gpu * s.block_size, shares),
    )
    return Engine(arch, hw, step_model, budget, cfg, style)


def state_blocks(budget: MemoryBudget, block_size: int, style: EngineStyle) -> int:
    """KV blocks one running request's recurrent state takes when the engine pages states in
    its KV pool (style states_paged): the state's bytes over a block's, rounded up (vLLM
    sizes its hybrid pages so a state fills whole pages). 0 without a state, or where states
    are pooled or reserved up front."""
    per_seq = budget.state_bytes_per_seq_per_gpu
    if per_seq <= 0 or not style.states_paged:
        return 0
    return math.ceil(per_seq / (block_size * budget.kv_bytes_per_token_per_gpu))


def _with_speculative(
    engine: Engine, dep: AggregatedDeployment | WorkerPool, kind: str | None,
    base_dir: Path | None, key: str,
) -> Engine:
    """The engine with its drafter: costed steps, and a KV pool shrunk by the drafter's share
    (each attention-DP rank keeps its own share, drafter KV included). `key`: where the
    speculative block sits, for the messages."""
    assert dep.speculative is not None
    layout = engine.step_model.layout
    if microbatch_slots(layout) > 1:
        raise InputError(
            f"{key}: speculative decoding with pipeline micro-batches (pipeline_parallel "
            f"{layout.pipeline_parallel}) is not simulated yet; remove speculative or use "
            f"pipeline_parallel 1"
        )
    spec = build_speculative(dep.speculative, kind, engine.step_model, engine.memory, base_dir,
                             key)
    num_blocks = spec.kv_capacity_tokens // layout.attention_data_parallel
    num_blocks //= dep.scheduler.block_size
    if num_blocks < 1:
        raise InputError(
            f"{key}: the drafter's weights and KV leave less than one KV block for the "
            f"target; use more GPUs, a smaller format or no speculation"
        )
    return replace(engine, scheduler=replace(engine.scheduler, num_blocks=num_blocks),
                   speculative=spec)


def _layout(pool: AggregatedDeployment | WorkerPool, arch: Architecture) -> ParallelLayout:
    return ParallelLayout(
        pool.tensor_parallel,
        pool.pipeline_parallel,
        attention_dp_ranks(pool, arch),
        pool.expert_parallel,
        pool.moe_routing.redundant_experts,
        pool.moe_dispatch == "all_to_all",
    )


def _offload_tier(dep: AggregatedDeployment | WorkerPool, hw: Hardware, block_bytes: float,
                  shares: int) -> dict[str, Any]:
    """The scheduler's host tier (deployment.kv_offload): blocks it holds per KV pool share,
    and seconds to load one block back over the host link. Each GPU holds and loads its own
    shard of a block (block_bytes are per GPU), all of a replica's GPUs at once."""
    off = dep.kv_offload
    if off is None:
        return {}
    where = "deployment.kv_offload"
    if not dep.scheduler.prefix_caching:
        raise InputError(f"{where}: the host tier keeps what the prefix cache evicts; set "
                         f"deployment.scheduler.prefix_caching: true or leave kv_offload out")
    host = hw.host_memory_bytes_per_gpu
    if host is not None and off.cpu_gb_per_gpu * 1e9 > host:
        raise InputError(f"{where}.cpu_gb_per_gpu: {off.cpu_gb_per_gpu:g} GB is more than "
                         f"{hw.name}'s host memory per GPU, {host / 1e9:g} GB (its profile)")
    link = off.link_gb_per_s * 1e9 if off.link_gb_per_s is not None else hw.host_link_bytes_per_s
    if link is None:
        raise InputError(f"{where}.link_gb_per_s: {hw.name}'s profile records no host link; "
                         f"give the host-to-GPU bandwidth per GPU in GB/s")
    return {"offload_blocks": int(off.cpu_gb_per_gpu * 1e9 // block_bytes) // shares,
            "reload_s_per_block": block_bytes / link}


def _moved_kv_bytes_per_token_per_gpu(decode: Engine) -> float:
    """KV bytes per prompt token and decode GPU a transfer moves. A speculating decode pool
    needs its drafter's KV of the prompt too (MTP and EAGLE heads attend over the whole
    context). We model it as built where the prompt is and moved with the target's, as
    SGLang's P/D transfer sends the draft model's KV pages beside the target's
    (sgl-project/sglang PR #20698 separates the two pointer groups); the prefill pool's own
    drafter pass over the prompt (one MTP layer or EAGLE head beside the whole model) is not
    costed. Recomputing it on the decode side instead would be a prefill of the drafter there."""
    spec = decode.speculative
    draft = spec.draft_kv_bytes_per_token_per_gpu if spec is not None else 0.0
    return decode.memory.kv_bytes_per_token_per_gpu + draft


def _kv_link(
    dep: DisaggregatedDeployment, arch: Architecture, prefill_hw: Hardware, decode: Engine
) -> KVLinkCost:
    """The replica-pair link; pools on different machines move KV at the slower side's NICs
    (and the longer latency)."""
    kv = dep.kv_transfer
    hw = decode.hw
    own = [n for n, p in (("prefill", dep.prefill), ("decode", dep.decode)) if p.hardware]
    if kv.link == "nvlink" and own:
        raise InputError(
            f"deployment.kv_transfer.link: nvlink needs both pools in one NVLink domain, but "
            f"deployment.{own[0]}.hardware puts the {own[0]} pool on machines of its own; "
            f"use link: network"
        )
    pair = dep.prefill.gpus_per_replica + dep.decode.gpus_per_replica
    if kv.link == "nvlink" and pair > hw.scale_up_domain_size:
        raise InputError(
            f"deployment.kv_transfer.link: nvlink needs a prefill and a decode replica in one "
            f"NVLink domain, but they use {pair} GPUs and {hw.name}'s domain has "
            f"{hw.scale_up_domain_size}; use link: network or smaller replicas"
        )
    links = [
        kv_link_cost(
            side,
            kv.link,
            _layout(dep.prefill, arch),
            _layout(dep.decode, arch),
            _moved_kv_bytes_per_token_per_gpu(decode),
            arch.num_layers,
            gb_per_s=kv.gb_per_s,
            latency_s=kv.latency_s,
            layerwise=kv.layerwise,
            state_bytes_per_request_per_gpu=decode.memory.state_bytes_per_seq_per_gpu,
        )
        for side in (prefill_hw, hw)
    ]
    slow = min(links, key=lambda c: c.bytes_per_s)
    return replace(slow, latency_s=max(c.latency_s for c in links))


def pool_spec(
    engine: Engine, pool: WorkerPool, cfg: SchedulerConfig | None = None
) -> PoolSpec:
    """What a pool's replicas are built from; `cfg` replaces the engine's scheduler settings
    (a speculating decode pool's carry the run's acceptance draws)."""
    spec = engine.speculative
    return PoolSpec(
        pool.replicas,
        pool.gpus_per_replica,
        cfg if cfg is not None else engine.scheduler,
        engine.replica_model,
        engine.style,
        spec.kv_capacity_tokens if spec is not None else engine.memory.kv_capacity_tokens,
        pool,
    )
