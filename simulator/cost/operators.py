"""The operator lists of one step: what each layer's kernels cost as roofline rows.

`token_ops` and `head_ops` depend only on token and row counts (so the fast path memoizes
them); the attention rows depend on the batch's contexts. Pure functions over a `Kernels`.
"""

from __future__ import annotations

import math

from simulator.cost.attention import attention_dims, windowed
from simulator.cost.comm import (
    allgather_time_s,
    allreduce_time_s,
    alltoall_time_s,
    dp_gather,
    pipeline_hop_times_s,
)
from simulator.cost.kernels import Kernels
from simulator.cost.layout import kv_heads_per_gpu as _kv_heads_per_gpu
from simulator.cost.linear_attention import (
    linear_consts_of,
    linear_projection_ops,
    linear_rates,
    linear_terms,
)
from simulator.cost.moe_routing import busiest_rank, rank_slots
from simulator.cost.ops import OpCost, roofline
from simulator.cost.shape import BatchShape
from simulator.model.precision import BF16_BYTES, FP32_BYTES, get_format

# (prefill FLOPs per pair, decode FLOPs per pair, KV bytes per token per layer, Q/O bytes per
# prefill token per layer, prefill FLOP/s, prefill bytes/s, full, sliding and all layers,
# decode FLOP/s, decode bytes/s)
AttentionConsts = tuple[float, float, float, float, float, float, int, int, int, float, float]


def token_ops(k: Kernels, tokens: int) -> list[OpCost]:
    """Projections, MLP/MoE, norms and collectives of `tokens` tokens through all layers,
    split evenly over the attention-DP ranks."""
    if tokens <= 0:
        return []
    rank_tokens = math.ceil(tokens / k.layout.attention_data_parallel)
    return rank_ops(k, rank_tokens, tokens) + group_ops(k, tokens, rank_tokens)


def rank_ops(k: Kernels, rank_tokens: int, tokens: int) -> list[OpCost]:
    """What one attention-DP rank runs on its own `rank_tokens` tokens: embedding, the
    attention projections, norms and RoPE (`tokens`: the whole step's, for the dense-MLP
    activation the FFN group applies to all of them)."""
    if rank_tokens <= 0 and tokens <= 0:
        return []
    a, tp = k.arch, k.layout.tensor_parallel
    h, L, La = a.hidden_size, a.num_layers, a.softmax_attention_layers
    ma = rank_tokens
    # Module groups the checkpoint keeps BF16 (modules_to_not_convert and the like).
    bf16_attn, bf16_out = a.keeps_bf16("attention_in"), a.keeps_bf16("attention_out")
    ops: list[OpCost] = []
    if ma > 0:
        ops.append(k.elementwise("embedding", ma * h * BF16_BYTES, 1))
        if a.mla is None:
            qkv_n = a.q_proj_width // tp + 2 * _kv_heads_per_gpu(a, tp) * a.head_dim
            h_in = a.attention_input_size
            ops.append(k.gemm("qkv_proj", ma, qkv_n, h_in, La, bf16=bf16_attn))
            o_k = a.num_attention_heads // tp * a.head_dim
        else:
            m, heads = a.mla, a.num_attention_heads // tp
            down_n = m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim
            ops.append(k.gemm("mla_down_proj", ma, down_n, h, L, bf16=bf16_attn))
            q_in = m.q_lora_rank if m.q_lora_rank > 0 else h
            q_n = heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
            ops.append(k.gemm("mla_q_up_proj", ma, q_n, q_in, L, bf16=bf16_attn))
            kv_n = heads * (m.qk_nope_head_dim + m.v_head_dim)
            ops.append(k.gemm("mla_kv_up_proj", ma, kv_n, m.kv_lora_rank, L, bf16=bf16_attn))
            o_k = heads * m.v_head_dim
        if a.sparse is not None:  # the indexer: queries from the query latent; key, weights
            sp = a.sparse
            ops.append(k.gemm("dsa_indexer_q_proj", ma, sp.index_heads * sp.index_head_dim,
                              a.indexer_query_input_size, L, bf16=bf16_attn))
            ops.append(k.gemm("dsa_indexer_k_proj", ma, sp.index_head_dim + sp.index_heads, h,
                              L, bf16=bf16_attn))
        ops.append(k.gemm("o_proj", ma, h, o_k, La, bf16=bf16_out))
        if a.linear is not None:
            ops.extend(linear_projection_ops(k, ma))
    i_loc = a.intermediate_size / k.layout.mlp_group
    norm_bytes = 3 * ma * h * BF16_BYTES  # a fused add+RMSNorm a block: read x, residual; write
    # RoPE rotates this rank's queries and keys in place (read + write each).
    k_width = (
        a.mla.qk_rope_head_dim if a.mla is not None else _kv_heads_per_gpu(a, tp) * a.head_dim
    )
    rope_bytes = 2 * ma * (a.q_dim / tp + k_width) * BF16_BYTES
    act_fn_bytes = 3 * tokens * i_loc * BF16_BYTES if a.num_dense_mlp_layers else 0.0
    ops.append(
        k.elementwise(
            "norms_rope_activation",
            a.residual_blocks * norm_bytes + La * rope_bytes
            + a.num_dense_mlp_layers * act_fn_bytes,
            2 * a.residual_blocks,
        )
    )
    return ops


def group_ops(k: Kernels, tokens: int, rank_tokens: int) -> list[OpCost]:
    """What every GPU of the replica runs together on all `tokens` tokens of the step: the
    collectives around attention (attention-DP: the cheaper of a gather padded to the busiest
    rank's `rank_tokens` and an all-reduce of the summed ones, comm.dp_gather), the MLP/MoE, and
    the pipeline sends."""
    if tokens <= 0:
        return []
    a, lay = k.arch, k.layout
    tp, dp, group = lay.tensor_parallel, lay.attention_data_parallel, lay.mlp_group
    h, L, Lf = a.hidden_size, a.num_layers, a.ffn_layers
    ma = rank_tokens
    ops: list[OpCost] = []
    # Collectives around attention and the FFN. Pure TP: one all-reduce per residual block
    # (two per transformer layer); with expert parallelism too, since every GPU holds every
    # token, runs its own experts on them and the FFN's all-reduce sums the partial outputs
    # (SGLang's default EP "uses All-Reduce or All-Gather for token dispatch",
    # --moe-a2a-backend none; TensorRT-LLM fuses the MoE finalize into that all-reduce,
    # flashinfer trtllm_moe_finalize_allreduce_fusion).
    # Attention-DP: all-reduce inside each TP group, then the FFN group gathers every
    # rank's tokens and scatters them back (SGLang-style DP attention), except on MoE layers
    # that dispatch all-to-all instead (ffn_ops).
    if dp == 1:
        act_bytes = tokens * h * BF16_BYTES
        if tp > 1:  # a single GPU has nothing to reduce: no row, no bytes on the wire
            ops.append(
                k.comm(
                    "tp_allreduce",
                    a.residual_blocks * allreduce_time_s(act_bytes, tp, k.hw),
                    a.residual_blocks * act_bytes,
                )
            )
    else:
        per_rank = ma * h * BF16_BYTES if tp > 1 else 0.0  # no all-reduce over one rank
        gathered = Lf - a.num_moe_layers if lay.moe_all_to_all else Lf
        gather_s, gather_bytes = dp_gather(tokens * h * BF16_BYTES, dp * ma * h * BF16_BYTES,
                                           group, k.hw)
        t = L * allreduce_time_s(per_rank, tp, k.hw) + gathered * 2 * gather_s
        ops.append(
            k.comm("dp_gather_scatter", t, L * per_rank + gathered * 2 * gather_bytes)
        )

    if a.qk_norm_across_heads and tp > 1:
        # q and k each normalised over all heads: one FP32 sum of squares per token and
        # tensor all-reduced across the TP group on every layer, before attention can run
        # (vLLM MiniMaxText01RMSNormTP for MiniMax-M2's q_norm and k_norm): latency-bound.
        nbytes = ma * FP32_BYTES  # this rank's tokens (all of them without attention DP)
        ops.append(k.comm("qk_norm_allreduce", 2 * L * allreduce_time_s(nbytes, tp, k.hw),
                          2 * L * nbytes))
    ops.extend(ffn_ops(k, tokens))
    if lay.pipeline_parallel > 1:
        pp, nbytes = lay.pipeline_parallel, ma * h * BF16_BYTES
        t = sum(pipeline_hop_times_s(nbytes, pp, lay.gpus // pp, k.hw))
        ops.append(k.comm("pp_send_recv", t, (pp - 1) * nbytes))
    return ops


def ffn_ops(k: Kernels, tokens: int) -> list[OpCost]:
    a, lay = k.arch, k.layout
    group, h = lay.mlp_group, a.hidden_size
    ops: list[OpCost] = []
    gate_mult = 2 if a.gated_mlp else 1
    if a.num_dense_mlp_layers:
        n_loc = a.intermediate_size // group
        bf16 = a.keeps_bf16("dense_mlp")
        ops.append(
            k.gemm("mlp_up_gate", tokens, gate_mult * n_loc, h, a.num_dense_mlp_layers, bf16=bf16)
        )
        ops.append(k.gemm("mlp_down", tokens, h, n_loc, a.num_dense_mlp_layers, bf16=bf16))
    if a.moe is None or a.num_moe_layers == 0:
        return ops
    moe, Lm = a.moe, a.num_moe_layers
    ep = lay.expert_parallel
    expert_tp = group // ep
    ma = math.ceil(tokens / lay.attention_data_parallel)
    ops.append(k.gemm("moe_router", ma, moe.num_experts, h, Lm, bf16=True))
    # Expected distinct experts hit: each token picks k of E, so an expert is missed by
    # all T tokens with probability (1 - k/E)^T. Their weights are what decode streams.
    # The busiest EP rank sets the time: its slots' expected hits and routed pairs, with the
    # scatter of a step's random routing (cost/moe_routing.py busiest_rank).
    slots = rank_slots(moe.num_experts, ep, k.expert_slots)
    draws = ep if k.routing_scatter else 1  # one draw: this rank's mean counts
    hit, routed = busiest_rank(slots, draws, moe.experts_per_token, tokens)
    touched = max(1, round(hit))
    hot = routed * ep / (tokens * moe.experts_per_token)
    if k.moe_unfused:  # every local expert reads its weights and computes every token
        touched = max(1, round(moe.num_experts / ep))
        routed = tokens * touched
    m_e = math.ceil(routed / touched)
    ie = moe.expert_intermediate_size // expert_tp
    ops.append(k.gemm("moe_experts_up_gate", m_e, gate_mult * ie, h, Lm, groups=touched))
    ops.append(k.gemm("moe_experts_down", m_e, h, ie, Lm, groups=touched))
    if moe.num_shared_experts:
        ish = moe.num_shared_experts * moe.shared_expert_intermediate_size // group
        bf16 = a.keeps_bf16("shared_experts")
        ops.append(k.gemm("moe_shared_up_gate", tokens, gate_mult * ish, h, Lm, bf16=bf16))
        ops.append(k.gemm("moe_shared_down", tokens, h, ish, Lm, bf16=bf16))
    ops.append(
        k.elementwise(
            "moe_permute_activation", Lm * routed * (2 * h + 3 * ie) * BF16_BYTES, 3 * Lm
        )
    )
    block_fixed = k.moe_block_fixed(Lm)
    if block_fixed is not None:
        ops.append(block_fixed)
    if lay.moe_all_to_all:  # dispatch in the activation format, combine in BF16
        a_bytes = min(get_format(k.formats.activations).bytes_per_element, BF16_BYTES)
        # The busiest rank receives `hot` times the mean rank's routed activations.
        sent = tokens / group * moe.experts_per_token * h * hot
        t = Lm * (
            alltoall_time_s(sent * a_bytes, ep, k.hw)
            + alltoall_time_s(sent * BF16_BYTES, ep, k.hw)
        )
        ops.append(k.comm("ep_alltoall", t, Lm * sent * (a_bytes + BF16_BYTES)))
    return ops

def head_ops(k: Kernels, rows: int) -> list[OpCost]:
    """LM head, logits gather and sampling for `rows` sampled positions."""
    if rows <= 0:
        return []
    a, tp = k.arch, k.layout.tensor_parallel
    ops = [k.gemm("lm_head", rows, a.vocab_size // tp, a.hidden_size, 1, bf16=True)]
    logit_bytes = rows * a.vocab_size * FP32_BYTES
    if tp > 1:
        ops.append(
            k.comm("logits_gather", allgather_time_s(logit_bytes, tp, k.hw), logit_bytes)
        )
    ops.append(k.elementwise("sampling", 2 * logit_bytes, 2))
    return ops


def attention_consts(k: Kernels) -> AttentionConsts:
    """Per-step constants of attention: (prefill FLOPs per pair, decode FLOPs per pair,
    KV bytes per token per layer, Q/O bytes per prefill token per layer, prefill rate and
    bandwidth, full layers, sliding layers, layers, decode rate and bandwidth)."""
    a, tp = k.arch, k.layout.tensor_parallel
    heads = a.num_attention_heads // tp
    dims = attention_dims(a)
    kv_elems = (
        a.kv_elements_per_token_per_layer()
        if a.mla is not None
        else 2 * _kv_heads_per_gpu(a, tp) * a.head_dim
    )
    kv_tok_layer = kv_elems * get_format(k.formats.kv_cache).bytes_per_element
    prefill_rate, decode_rate, decode_bw = attention_rates(k)
    bw = k.hw.hbm_bytes_per_s * k.hw.attention_hbm_fraction
    return (
        2.0 * heads * (dims.prefill_qk + dims.prefill_v),
        2.0 * heads * (dims.decode_qk + dims.decode_v),
        kv_tok_layer,
        heads * (dims.prefill_qk + dims.prefill_v) * BF16_BYTES,
        prefill_rate,
        bw,
        a.softmax_attention_layers - a.windowed_attention_layers,
        a.windowed_attention_layers,
        a.softmax_attention_layers,
        decode_rate,
        decode_bw,
    )


def attention_rates(k: Kernels) -> tuple[float, float, float]:
    """(prefill FLOP/s, decode FLOP/s, decode bytes/s) of the attention kernel class the
    architecture runs (hardware/attention_classes.py): prefill by head dim or MLA's
    non-absorbed kernel, decode on FlashMLA's rates for absorbed MLA. Attention sinks (gpt-oss)
    add one logit per head and row, no class of their own: B200's decode line is fitted to
    trtllm-gen rows run with sinks (flashinfer PR #1415)."""
    generic = k.attention_flops_per_s
    bw = k.hw.hbm_bytes_per_s * k.hw.attention_hbm_fraction
    classes = k.hw.attention_classes
    if classes is None:
        return generic, generic, bw
    a = k.arch
    if a.mla is None:
        return generic * classes.head_dim_multiplier(a.head_dim), generic, bw
    prefill = generic * classes.mla_prefill_multiplier
    if classes.mla_decode_compute_fraction is None or classes.mla_decode_hbm_fraction is None:
        return prefill, generic, bw
    peak = generic / k.hw.attention_compute_fraction
    return (
        prefill,
        peak * classes.mla_decode_compute_fraction,
        k.hw.hbm_bytes_per_s * classes.mla_decode_hbm_fraction,
    )


def attention_terms(
    k: Kernels, consts: AttentionConsts, b: BatchShape, ranks: int | None = None
) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """(FLOPs, bytes) of prefill and of decode attention over all layers, per GPU. `b` is
    split evenly over `ranks` attention-DP ranks (default: the layout's; 1 for one rank's
    own batch)."""
    per_pair_p, per_pair_d, kv_tok, qo_tok, _, _, n_full, n_sw, _, _, _ = consts
    dp = k.layout.attention_data_parallel if ranks is None else ranks
    window = k.arch.attention_window
    prefill = decode = None
    if b.prefill_tokens > 0:
        pairs = b.prefill_attention_pairs / dp
        kv_tokens = (b.prefill_context_tokens + b.prefill_tokens) / dp
        if n_sw:
            pairs_sw = windowed(pairs, b.prefill_tokens / dp, window)
            kv_sw = windowed(kv_tokens, (b.prefill_seqs + b.prefill_tokens) / dp, window)
        else:
            pairs_sw = kv_sw = 0.0
        flops = per_pair_p * (n_full * pairs + n_sw * pairs_sw)
        nbytes = kv_tok * (n_full * kv_tokens + n_sw * kv_sw)
        nbytes += (n_full + n_sw) * qo_tok * b.prefill_tokens / dp
        prefill = (flops, nbytes)
    if b.decode_seqs > 0:
        q_per_seq = 1 + b.speculative_tokens_per_seq
        ctx = (b.decode_context_tokens + b.decode_seqs * q_per_seq) / dp
        ctx_sw = windowed(ctx, b.decode_seqs / dp, window) if n_sw else 0.0
        work = n_full * ctx + n_sw * ctx_sw
        decode = (per_pair_d * q_per_seq * work, kv_tok * work)
    return prefill, decode

# A sparse model's indexer per step: (FLOPs per query-key pair, bytes per cached token, per
# layer); None without sparse attention.
IndexerConsts = tuple[float, float] | None


def indexer_consts(k: Kernels) -> IndexerConsts:
    """Per-step constants of the lightning indexer: every query's index heads score a key
    with 2 x heads x head dim FLOPs and read its index key (Architecture.index_key_bytes)."""
    sp = k.arch.sparse
    if sp is None:
        return None
    return 2.0 * sp.index_heads * sp.index_head_dim, float(k.arch.index_key_bytes)


def indexer_terms(
    k: Kernels, consts: IndexerConsts, b: BatchShape, ranks: int | None = None
) -> tuple[float, float] | None:
    """(FLOPs, bytes) over all layers, per GPU, of a sparse model's lightning indexer: every
    query scores every cached token, prefill and decode alike; no window (it chooses the
    top-k). Its heads are taken whole on every TP rank (assumed), its batch split over
    attention-DP ranks as attention's. None without sparse attention or work."""
    if consts is None:
        return None
    per_pair, key = consts
    dp = k.layout.attention_data_parallel if ranks is None else ranks
    pairs = tokens = 0.0
    if b.prefill_tokens > 0:
        pairs += b.prefill_attention_pairs / dp
        tokens += (b.prefill_context_tokens + b.prefill_tokens) / dp
    if b.decode_seqs > 0:
        q_per_seq = 1 + b.speculative_tokens_per_seq
        ctx = (b.decode_context_tokens + b.decode_seqs * q_per_seq) / dp
        pairs += ctx * q_per_seq
        tokens += ctx
    if pairs <= 0:
        return None
    layers = k.arch.softmax_attention_layers
    return per_pair * pairs * layers, key * tokens * layers


def attention_fixed_s(k: Kernels) -> tuple[float, float]:
    """Per-layer fixed cost of the prefill kernel (a launch) and of the decode kernel (the
    intercept of the measured decode-attention line: launch plus split-KV merge)."""
    return k.hw.kernel_launch_overhead_s, k.hw.attention_decode_fixed_s


def attention_ops(
    k: Kernels, consts: AttentionConsts, b: BatchShape, ranks: int | None = None
) -> list[OpCost]:
    """Attention rows: compute at the attention kernels' rate, KV at their bandwidth."""
    rate, bw, layers, decode_rate, decode_bw = consts[4], consts[5], consts[8], *consts[9:]
    ops: list[OpCost] = []
    for name, terms, fixed, r, w in zip(
        ("attention_prefill", "attention_decode"),
        attention_terms(k, consts, b, ranks),
        attention_fixed_s(k),
        (rate, decode_rate),
        (bw, decode_bw),
        strict=True,
    ):
        if terms is not None:
            ops.append(roofline(name, terms[0], terms[1], r, w, layers, fixed))
    idx = indexer_terms(k, indexer_consts(k), b, ranks)
    if idx is not None:  # at the decode attention kernel's rates (assumed), one launch a layer
        ops.append(roofline("dsa_indexer", idx[0], idx[1], decode_rate, decode_bw, layers,
                            k.hw.kernel_launch_overhead_s))
    lin = linear_consts_of(k)
    if lin is not None:
        dp = k.layout.attention_data_parallel if ranks is None else ranks
        p = lin.op_prefix
        for name, terms in zip((f"{p}_prefill", f"{p}_decode"), linear_terms(lin, b, dp),
                               strict=True):
            if terms is not None:
                ops.append(roofline(name, terms[0], terms[1], *linear_rates(k), lin.layers,
                                    k.hw.kernel_launch_overhead_s))
    return ops
