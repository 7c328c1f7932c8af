"""Memory per GPU: sharded weights, activation workspace, and what is left for the KV cache.

Linear-layer weights take the weight format; embeddings, LM head, norms and the MoE router stay
BF16, as published FP8/FP4 checkpoints keep them. Memory outside the framework's pool (CUDA
context, NCCL buffers, CUDA graphs) is not modelled: its size depends on the setup and is
unknown here, so `gpu_memory_utilization` is the user's knob for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.cost.layout import Formats, ParallelLayout, kv_heads_per_gpu
from simulator.hardware.profile import Hardware
from simulator.model.architecture import Architecture
from simulator.model.precision import BF16_BYTES, FP32_BYTES, get_format


class MemoryFitError(ValueError):
    """The layout does not fit in GPU memory; the message says by how much."""


@dataclass(frozen=True, slots=True)
class MemoryBudget:
    weights_bytes_per_gpu: float
    activation_bytes_per_gpu: float
    usable_bytes_per_gpu: float  # HBM x gpu_memory_utilization
    kv_bytes_per_gpu: float  # what is left for the KV cache
    kv_bytes_per_token_per_gpu: float
    kv_capacity_tokens: int  # per engine replica (attention-DP ranks each hold their own cache)
    kv_heads_replicated: bool  # fewer KV heads than TP ranks: each rank stores a copy
    window_reserve_bytes_per_gpu: float = 0.0  # sliding-window layers: one window per sequence
    # Gated DeltaNet layers (hybrid models): the recurrent states set aside, and the running
    # sequences per attention-DP rank they leave room for (None: no cap of their own).
    state_reserve_bytes_per_gpu: float = 0.0
    state_bytes_per_seq_per_gpu: float = 0.0
    max_seqs_by_state: int | None = None

    @property
    def fits(self) -> bool:
        return self.kv_bytes_per_gpu > 0


def layers_per_stage(arch: Architecture, pp: int) -> int:
    return math.ceil(arch.num_layers / pp)


def attention_weight_params_per_gpu(arch: Architecture, tp: int) -> float:
    """Attention projection parameters one TP rank holds for one layer."""
    h = arch.hidden_size
    if arch.mla is not None:
        m, nh = arch.mla, arch.num_attention_heads
        qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
        # q_a and kv_a down-projections are small and replicated on every rank (vLLM).
        replicated = h * m.q_lora_rank + h * (m.kv_lora_rank + m.qk_rope_head_dim)
        q_in = m.q_lora_rank if m.q_lora_rank > 0 else h
        sharded = q_in * nh * qk_head + m.kv_lora_rank * nh * (m.qk_nope_head_dim + m.v_head_dim)
        sharded += nh * m.v_head_dim * h
        # A sparse model's indexer (small: 9.4M of GLM-5's 174M attention parameters a layer)
        # taken replicated on every rank, like the down-projections (assumed).
        return replicated + arch.indexer_params_per_layer + sharded / tp
    h_in = arch.attention_input_size  # q/k/v read h_in; o writes h
    q_and_o = (h_in * arch.q_proj_width + h * arch.num_attention_heads * arch.head_dim) / tp
    kv = 2 * h_in * kv_heads_per_gpu(arch, tp) * arch.head_dim
    return q_and_o + kv


def attention_out_params_per_gpu(arch: Architecture, tp: int) -> float:
    """The output projection's share of attention_weight_params_per_gpu (heads x v dim ->
    hidden, sharded over TP)."""
    v_dim = arch.mla.v_head_dim if arch.mla is not None else arch.head_dim
    return arch.num_attention_heads * v_dim * arch.hidden_size / tp


def ffn_weight_params_per_gpu(
    arch: Architecture, layout: ParallelLayout
) -> tuple[float, float, float]:
    """(dense-MLP layer, routed experts of a MoE layer, shared experts of a MoE layer) params
    one GPU holds for one layer of each kind."""
    group = layout.mlp_group
    dense = arch.dense_mlp_params_per_layer / group
    if arch.moe is None:
        return dense, 0.0, 0.0
    ep = layout.expert_parallel
    expert_tp = group // ep
    slots = arch.moe.num_experts + layout.redundant_experts  # EPLB copies take memory too
    experts = slots / ep * arch.routed_expert_params / expert_tp
    return dense, experts, arch.shared_expert_params_per_layer / group


def weights_bytes_per_gpu(arch: Architecture, layout: ParallelLayout, formats: Formats) -> float:
    """Bytes of weights on the most loaded GPU (a pipeline stage's share of layers)."""
    wb = get_format(formats.weights).bytes_per_element
    pp = layout.pipeline_parallel
    share = layers_per_stage(arch, pp) / arch.num_layers
    dense_p, routed_p, shared_p = ffn_weight_params_per_gpu(arch, layout)
    tp, La, Lm = layout.tensor_parallel, arch.softmax_attention_layers, arch.num_moe_layers
    out = La * attention_out_params_per_gpu(arch, tp)
    attention = La * attention_weight_params_per_gpu(arch, tp)
    if arch.linear is not None:  # Gated DeltaNet layers: every projection split over TP
        lin, Ll = arch.linear, arch.linear.num_layers
        out += Ll * lin.value_width * arch.hidden_size / tp
        attention += Ll * lin.params_per_layer(arch.hidden_size) / tp
    # Each linear group at the weight format, or BF16 where the checkpoint keeps it so
    # (architecture.MODULE_GROUPS, from modules_to_not_convert or the precision block); a
    # hybrid's Gated DeltaNet projections count with attention's (linear_attn names them).
    groups = {
        "attention_in": attention - out,
        "attention_out": out,
        "dense_mlp": arch.num_dense_mlp_layers * dense_p,
        "shared_experts": Lm * shared_p,
    }
    linear = Lm * routed_p  # routed experts: always the weight format
    bf16_params: float = Lm * arch.router_params_per_layer + arch.norm_params
    for group, params in groups.items():
        if arch.keeps_bf16(group):
            bf16_params += params
        else:
            linear += params
    bf16_params += arch.fuse_params  # a drafter's input projection: replicated, BF16
    linear_bytes = share * (linear * wb + bf16_params * BF16_BYTES)
    # Vocab-parallel embedding and LM head over TP; with PP they sit on the first/last stage.
    embed = arch.embedding_params / layout.tensor_parallel
    head = arch.lm_head_params / layout.tensor_parallel
    vocab_bytes = (embed + head if pp == 1 else max(embed, head)) * BF16_BYTES
    return linear_bytes + vocab_bytes


def _kv_elements_per_layer(arch: Architecture, layout: ParallelLayout) -> int:
    if arch.mla is not None:
        return arch.mla.kv_lora_rank + arch.mla.qk_rope_head_dim
    return 2 * kv_heads_per_gpu(arch, layout.tensor_parallel) * arch.head_dim


def stage_layer_split(arch: Architecture, pp: int) -> tuple[int, int]:
    """(full-attention, sliding-window) layers on the most loaded pipeline stage; a hybrid
    model's Gated DeltaNet layers are neither (they keep a state, state_bytes_per_seq)."""
    stage = layers_per_stage(arch, pp)
    if arch.linear is not None:
        stage = min(stage, math.ceil(stage * arch.softmax_attention_layers / arch.num_layers))
    if arch.sliding_window is None or arch.num_sliding_layers == 0:
        return stage, 0
    if arch.num_sliding_layers == arch.num_layers:
        return 0, stage
    sliding = min(stage, round(stage * arch.num_sliding_layers / arch.num_layers))
    return stage - sliding, sliding


def kv_bytes_per_token_per_gpu(arch: Architecture, layout: ParallelLayout, kv_format: str) -> float:
    """KV bytes one GPU stores per cached token: its stage's layers, its share of KV heads.

    MLA caches one latent (kv_lora_rank + rope dims) per token that every TP rank needs whole,
    so TP does not shrink it; GQA heads split over TP until each rank has one, then replicate.
    Sliding-window layers keep only the last `window` tokens of each sequence (vLLM's hybrid
    KV cache manager), so they are charged per sequence (below), not per token, unless every
    layer slides, when the per-token count is the conservative bound.
    """
    full, sliding = stage_layer_split(arch, layout.pipeline_parallel)
    layers = full if full else sliding
    kv = _kv_elements_per_layer(arch, layout) * get_format(kv_format).bytes_per_element
    # A sparse model also caches each token's indexer key (FP8, whatever the KV format).
    return layers * (kv + arch.index_key_bytes)


def sliding_kv_bytes_per_seq_per_gpu(
    arch: Architecture, layout: ParallelLayout, kv_format: str
) -> float:
    """KV bytes a running sequence holds in sliding-window layers at most (one window)."""
    full, sliding = stage_layer_split(arch, layout.pipeline_parallel)
    if not full or not sliding or arch.sliding_window is None:
        return 0.0
    per_layer = _kv_elements_per_layer(arch, layout) * get_format(kv_format).bytes_per_element
    return sliding * arch.sliding_window * per_layer


def state_bytes_per_seq_per_gpu(arch: Architecture, layout: ParallelLayout) -> float:
    """One running sequence's Gated DeltaNet state on one GPU: its stage's share of the linear
    layers, value heads split over TP (Architecture.linear_state_bytes_per_seq). 0 unless
    the model is hybrid."""
    share = layers_per_stage(arch, layout.pipeline_parallel) / arch.num_layers
    return arch.linear_state_bytes_per_seq(layout.tensor_parallel) * share


def activation_bytes_per_gpu(
    arch: Architecture, layout: ParallelLayout, max_batched_tokens: int, max_seqs: int
) -> float:
    """Peak transient activations of one step at the scheduler's token budget.

    Two live buffers of the widest per-token activation (residual stream plus the widest
    projection output on this rank) and the FP32 logits of every sampled sequence.
    """
    tp, group = layout.tensor_parallel, layout.mlp_group
    widest = max(
        (arch.q_proj_width + 2 * arch.num_kv_heads * arch.head_dim) / tp,
        0 if arch.linear is None else arch.linear.qkvz_width / tp,
        2 * arch.intermediate_size / group,
        0
        if arch.moe is None
        else 2 * arch.moe.experts_per_token * arch.moe.expert_intermediate_size / group,
    )
    tokens = max_batched_tokens  # scheduler limits apply per attention-DP rank
    per_token = (arch.hidden_size + widest) * BF16_BYTES * 2
    logits = max_seqs * arch.vocab_size / tp * FP32_BYTES
    return tokens * per_token + logits


def memory_budget(
    arch: Architecture,
    hw: Hardware,
    layout: ParallelLayout,
    formats: Formats,
    gpu_memory_utilization: float = 0.9,
    max_batched_tokens: int = 8192,
    max_seqs: int = 256,
    fraction_of_free: bool = False,
    state_pool_share: float | None = None,
    state_slots_per_request: int = 1,
    states_paged: bool = False,
) -> MemoryBudget:
    """Weights, activations and the KV pool on one GPU.

    `gpu_memory_utilization` caps all of the framework's memory (vLLM, SGLang:
    weights + activations + KV <= fraction x HBM), or with `fraction_of_free` it is the share
    of the memory left after weights and activations that becomes KV cache (TensorRT-LLM's
    KvCacheConfig.free_gpu_memory_fraction, default 0.9). A hybrid model's recurrent states
    come out of that memory first: `state_pool_share` of it set aside as a pool whose slots,
    `state_slots_per_request` a running request, cap the running requests (SGLang), or with
    no share one state per schedulable sequence (max_seqs) is reserved, unless
    `states_paged`: the scheduler then takes each running request's state out of the KV pool
    as pages (vLLM's hybrid KV manager; serving/engine_build.state_blocks).
    """
    weights = weights_bytes_per_gpu(arch, layout, formats)
    acts = activation_bytes_per_gpu(arch, layout, max_batched_tokens, max_seqs)
    if fraction_of_free:
        free = hw.hbm_bytes - weights - acts
        usable = weights + acts + max(0.0, free) * gpu_memory_utilization
    else:
        usable = hw.hbm_bytes * gpu_memory_utilization
    kv_avail = usable - weights - acts
    per_token = kv_bytes_per_token_per_gpu(arch, layout, formats.kv_cache)
    # Sliding-window layers: reserve one window per schedulable sequence on this DP rank.
    seqs_per_rank = max_seqs  # max_num_seqs applies per attention-DP rank
    per_seq = sliding_kv_bytes_per_seq_per_gpu(arch, layout, formats.kv_cache)
    window_reserve = seqs_per_rank * per_seq
    kv_avail -= window_reserve
    state_seq = state_bytes_per_seq_per_gpu(arch, layout)
    state_reserve, seq_cap = 0.0, None
    if state_seq > 0 and state_pool_share is not None:
        slots = int(max(0.0, kv_avail) * state_pool_share // state_seq)
        state_reserve, seq_cap = slots * state_seq, slots // state_slots_per_request
    elif state_seq > 0 and not states_paged:
        state_reserve = seqs_per_rank * state_seq
    kv_avail -= state_reserve
    tokens = int(kv_avail // per_token) * layout.attention_data_parallel if kv_avail > 0 else 0
    replicated = arch.mla is None and arch.num_kv_heads < layout.tensor_parallel
    return MemoryBudget(
        weights, acts, usable, kv_avail, per_token, tokens, replicated, window_reserve,
        state_reserve, state_seq, seq_cap,
    )


def describe_layout(layout: ParallelLayout) -> str:
    parts = [f"tp={layout.tensor_parallel}"]
    if layout.pipeline_parallel > 1:
        parts.append(f"pp={layout.pipeline_parallel}")
    if layout.attention_data_parallel > 1:
        parts.append(f"attention_dp={layout.attention_data_parallel}")
    if layout.expert_parallel > 1:
        parts.append(f"ep={layout.expert_parallel}")
    return ", ".join(parts)


def require_fit(
    arch: Architecture, hw: Hardware, layout: ParallelLayout, formats: Formats, budget: MemoryBudget
) -> None:
    """Raise MemoryFitError naming how many GB the layout needs against what the GPU has."""
    if budget.fits:
        return
    need = (budget.weights_bytes_per_gpu + budget.activation_bytes_per_gpu) / 1e9
    raise MemoryFitError(
        f"{arch.name} {formats.weights} needs {need:.0f} GB per GPU at {describe_layout(layout)} "
        f"({budget.weights_bytes_per_gpu / 1e9:.0f} GB weights + "
        f"{budget.activation_bytes_per_gpu / 1e9:.1f} GB activations) before any KV cache; "
        f"{hw.name} has {hw.hbm_bytes / 1e9:.0f} GB "
        f"({budget.usable_bytes_per_gpu / 1e9:.0f} GB usable at the memory utilization limit)"
    )
