"""The cost of one engine step for a batch described by aggregates: the physics/simulation seam.

`StepModel` is built once per (model, GPU, layout, formats) and answers two questions:
`cost(batch)` gives the full per-operator breakdown (the teaching view), `time_s(batch)` the
same total through a fast path that memoizes the parts that depend only on the token count.
Both sum the same operator functions, so they cannot drift apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import numpy.typing as npt

from simulator.architecture import Architecture
from simulator.cost.attention import attention_dims, prefill_pairs, windowed
from simulator.cost.comm import allgather_time_s, allreduce_time_s, alltoall_time_s, p2p_time_s
from simulator.cost.gemm import gemm_bytes, gemm_compute_time_s
from simulator.cost.layout import Formats, ParallelLayout, check_formats, check_layout
from simulator.cost.layout import kv_heads_per_gpu as _kv_heads_per_gpu
from simulator.cost.ops import OpCost, roofline
from simulator.hardware import Hardware
from simulator.precision import (
    BF16_BYTES,
    FP32_BYTES,
    attention_tensor_format,
    gemm_tensor_format,
    get_format,
)

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class BatchShape:
    """One step's work per engine replica, as aggregates (O(1) to cost however large)."""

    prefill_tokens: int = 0  # new prompt tokens computed this step (all chunks)
    prefill_seqs: int = 0  # sequences with a prefill chunk this step
    prefill_attention_pairs: float = 0.0  # sum over chunks of c*p + c(c+1)/2
    prefill_context_tokens: int = 0  # sum over chunks of the cached prefix p they attend to
    prefill_sampled_seqs: int = 0  # chunks that finish their prompt and sample a token
    decode_seqs: int = 0
    decode_context_tokens: int = 0  # sum of cached tokens each decode attends to
    speculative_tokens_per_seq: int = 0  # draft tokens verified with each decode (later issue)

    @classmethod
    def one_chunk(
        cls,
        prefill_tokens: int = 0,
        offset_tokens: int = 0,
        decode_seqs: int = 0,
        decode_context_tokens: int = 0,
        completes_prompt: bool = True,
    ) -> BatchShape:
        """At most one prefill chunk of `prefill_tokens` after `offset_tokens` cached ones
        (sampling a token if it completes its prompt), alongside a decode batch."""
        chunk = prefill_tokens > 0
        return cls(
            prefill_tokens=prefill_tokens,
            prefill_seqs=int(chunk),
            prefill_attention_pairs=prefill_pairs(prefill_tokens, offset_tokens) if chunk else 0.0,
            prefill_context_tokens=offset_tokens if chunk else 0,
            prefill_sampled_seqs=int(chunk and completes_prompt),
            decode_seqs=decode_seqs,
            decode_context_tokens=decode_context_tokens,
        )

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decode_seqs * (1 + self.speculative_tokens_per_seq)

    @property
    def sampled_rows(self) -> int:
        return self.prefill_sampled_seqs + self.decode_seqs * (1 + self.speculative_tokens_per_seq)


@dataclass(frozen=True, slots=True)
class StepCost:
    step_time_s: float
    ops: tuple[OpCost, ...]
    compute_s: float
    memory_s: float
    communication_s: float
    overhead_s: float

    @property
    def bound(self) -> str:
        kinds = {
            "compute": self.compute_s,
            "memory": self.memory_s,
            "communication": self.communication_s,
            "overhead": self.overhead_s,
        }
        return max(kinds, key=lambda k: kinds[k])


def _sum_time(ops: list[OpCost]) -> float:
    return sum(o.time_s for o in ops)


@dataclass(frozen=True)
class StepModel:
    arch: Architecture
    hw: Hardware
    layout: ParallelLayout
    formats: Formats
    comm_overlap: float = 0.0  # fraction of communication hidden under compute (assumption)
    _token_cache: dict[int, float] = field(default_factory=dict, repr=False, compare=False)
    _head_cache: dict[int, float] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_layout(self.arch, self.layout)
        check_formats(self.hw, self.formats)
        if not 0.0 <= self.comm_overlap <= 1.0:
            raise ValueError(f"comm_overlap must be in [0, 1] (got {self.comm_overlap})")

    # ---- rates -------------------------------------------------------------------------

    @property
    def gemm_format(self) -> str:
        supported = frozenset(self.hw.dense_flops_per_s)
        return gemm_tensor_format(self.formats.weights, self.formats.activations, supported)

    @property
    def gemm_flops_per_s(self) -> float:
        return self.hw.dense_flops_per_s[self.gemm_format] * self.hw.gemm_compute_fraction

    @property
    def bf16_gemm_flops_per_s(self) -> float:
        fmt = attention_tensor_format(frozenset(self.hw.dense_flops_per_s))
        return self.hw.dense_flops_per_s[fmt] * self.hw.gemm_compute_fraction

    @property
    def attention_flops_per_s(self) -> float:
        fmt = attention_tensor_format(frozenset(self.hw.dense_flops_per_s))
        return self.hw.dense_flops_per_s[fmt] * self.hw.attention_compute_fraction

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hw.hbm_bytes_per_s * self.hw.hbm_bandwidth_fraction

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity above which a GEMM is compute-bound on this chip."""
        return self.gemm_flops_per_s / self.hbm_bytes_per_s

    # ---- building blocks ---------------------------------------------------------------

    def _gemm(
        self,
        op: str,
        m: int,
        n: int,
        k: int,
        layers: int,
        groups: int = 1,
        bf16: bool = False,
    ) -> OpCost:
        """`groups` same-shape GEMMs (MoE experts) launched as one grouped kernel per layer."""
        if bf16:
            rate, wb, ab = self.bf16_gemm_flops_per_s, BF16_BYTES, BF16_BYTES
        else:
            rate = self.gemm_flops_per_s
            wb = get_format(self.formats.weights).bytes_per_element
            ab = min(get_format(self.formats.activations).bytes_per_element, BF16_BYTES)
        flops = 2.0 * m * n * k * groups * layers
        nbytes = gemm_bytes(m, n, k, wb, ab) * groups * layers
        hw = self.hw
        compute_s = gemm_compute_time_s(m, n * groups, k, rate, hw.sm_count, hw.gemm_tiling)
        compute_s *= layers
        return roofline(
            op,
            flops,
            nbytes,
            rate,
            self.hbm_bytes_per_s,
            layers,
            self.hw.kernel_launch_overhead_s,
            compute_s,
        )

    def _elementwise(self, op: str, nbytes: float, kernels: int) -> OpCost:
        return roofline(
            op,
            0.0,
            nbytes,
            1.0,
            self.hbm_bytes_per_s,
            kernels,
            self.hw.kernel_launch_overhead_s,
            compute_s=0.0,
        )

    def _comm(self, op: str, time_s: float, nbytes: float) -> OpCost:
        t = time_s * (1.0 - self.comm_overlap)
        return OpCost(op, 0.0, nbytes, t, 0.0, "communication", 0)

    # ---- operators that depend only on the token count ----------------------------------

    def token_ops(self, tokens: int) -> list[OpCost]:
        """Projections, MLP/MoE, norms and collectives of `tokens` tokens through all layers."""
        if tokens <= 0:
            return []
        a, lay = self.arch, self.layout
        tp, dp, group = lay.tensor_parallel, lay.attention_data_parallel, lay.mlp_group
        h, L = a.hidden_size, a.num_layers
        ma = math.ceil(tokens / dp)  # tokens on one attention-DP rank
        ops: list[OpCost] = [self._elementwise("embedding", ma * h * BF16_BYTES, 1)]

        if a.mla is None:
            qkv_n = (a.num_attention_heads // tp + 2 * _kv_heads_per_gpu(a, tp)) * a.head_dim
            ops.append(self._gemm("qkv_proj", ma, qkv_n, h, L))
            o_k = a.num_attention_heads // tp * a.head_dim
        else:
            m, heads = a.mla, a.num_attention_heads // tp
            down_n = m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim
            ops.append(self._gemm("mla_down_proj", ma, down_n, h, L))
            q_in = m.q_lora_rank if m.q_lora_rank > 0 else h
            ops.append(
                self._gemm(
                    "mla_q_up_proj", ma, heads * (m.qk_nope_head_dim + m.qk_rope_head_dim), q_in, L
                )
            )
            ops.append(
                self._gemm(
                    "mla_kv_up_proj",
                    ma,
                    heads * (m.qk_nope_head_dim + m.v_head_dim),
                    m.kv_lora_rank,
                    L,
                )
            )
            o_k = heads * m.v_head_dim
        ops.append(self._gemm("o_proj", ma, h, o_k, L))

        # Collectives around attention and the FFN. Pure TP: two all-reduces per layer.
        # Attention-DP: all-reduce inside each TP group, then the FFN group gathers every
        # rank's tokens and scatters them back (SGLang-style DP attention).
        act_bytes = tokens * h * BF16_BYTES
        if dp == 1:
            if tp > 1:  # a single GPU has nothing to reduce: no row, no bytes on the wire
                ops.append(
                    self._comm(
                        "tp_allreduce",
                        2 * L * allreduce_time_s(act_bytes, tp, self.hw),
                        2 * L * act_bytes,
                    )
                )
        else:
            per_rank = ma * h * BF16_BYTES if tp > 1 else 0.0  # no all-reduce over one rank
            t = L * (
                allreduce_time_s(per_rank, tp, self.hw)
                + 2 * allgather_time_s(act_bytes, group, self.hw)
            )
            ops.append(self._comm("dp_gather_scatter", t, L * (per_rank + 2 * act_bytes)))

        ops.extend(self._ffn_ops(tokens))

        i_loc = a.intermediate_size / group
        norm_bytes = 6 * ma * h * BF16_BYTES  # two fused add+RMSNorm: read x, residual; write both
        # RoPE rotates this rank's queries and keys in place (read + write each).
        k_width = (
            a.mla.qk_rope_head_dim if a.mla is not None else _kv_heads_per_gpu(a, tp) * a.head_dim
        )
        rope_bytes = 2 * ma * (a.q_dim / tp + k_width) * BF16_BYTES
        act_fn_bytes = 3 * tokens * i_loc * BF16_BYTES if a.num_dense_mlp_layers else 0.0
        ops.append(
            self._elementwise(
                "norms_rope_activation",
                L * (norm_bytes + rope_bytes) + a.num_dense_mlp_layers * act_fn_bytes,
                4 * L,
            )
        )
        if lay.pipeline_parallel > 1:
            crosses = lay.gpus > self.hw.scale_up_domain_size
            t = (lay.pipeline_parallel - 1) * p2p_time_s(ma * h * BF16_BYTES, crosses, self.hw)
            ops.append(
                self._comm("pp_send_recv", t, (lay.pipeline_parallel - 1) * ma * h * BF16_BYTES)
            )
        return ops

    def _ffn_ops(self, tokens: int) -> list[OpCost]:
        a, lay = self.arch, self.layout
        group, h = lay.mlp_group, a.hidden_size
        ops: list[OpCost] = []
        gate_mult = 2 if a.gated_mlp else 1
        if a.num_dense_mlp_layers:
            n_loc = a.intermediate_size // group
            ops.append(
                self._gemm("mlp_up_gate", tokens, gate_mult * n_loc, h, a.num_dense_mlp_layers)
            )
            ops.append(self._gemm("mlp_down", tokens, h, n_loc, a.num_dense_mlp_layers))
        if a.moe is None or a.num_moe_layers == 0:
            return ops
        moe, Lm = a.moe, a.num_moe_layers
        ep = lay.expert_parallel
        expert_tp = group // ep
        ma = math.ceil(tokens / lay.attention_data_parallel)
        ops.append(self._gemm("moe_router", ma, moe.num_experts, h, Lm, bf16=True))
        # Expected distinct experts hit: each token picks k of E, so an expert is missed by
        # all T tokens with probability (1 - k/E)^T. Their weights are what decode streams.
        local_experts = moe.num_experts / ep
        p_hit = 1.0 - (1.0 - moe.experts_per_token / moe.num_experts) ** tokens
        touched = max(1, round(local_experts * p_hit))
        routed = tokens * moe.experts_per_token / ep  # token-expert pairs on this GPU
        m_e = math.ceil(routed / touched)
        ie = moe.expert_intermediate_size // expert_tp
        ops.append(self._gemm("moe_experts_up_gate", m_e, gate_mult * ie, h, Lm, groups=touched))
        ops.append(self._gemm("moe_experts_down", m_e, h, ie, Lm, groups=touched))
        if moe.num_shared_experts:
            ish = moe.num_shared_experts * moe.shared_expert_intermediate_size // group
            ops.append(self._gemm("moe_shared_up_gate", tokens, gate_mult * ish, h, Lm))
            ops.append(self._gemm("moe_shared_down", tokens, h, ish, Lm))
        ops.append(
            self._elementwise(
                "moe_permute_activation", Lm * routed * (2 * h + 3 * ie) * BF16_BYTES, 3 * Lm
            )
        )
        if ep > 1:
            a_bytes = min(get_format(self.formats.activations).bytes_per_element, BF16_BYTES)
            sent = tokens / group * moe.experts_per_token * h
            t = Lm * (
                alltoall_time_s(sent * a_bytes, ep, self.hw)
                + alltoall_time_s(sent * BF16_BYTES, ep, self.hw)
            )
            ops.append(self._comm("ep_alltoall", t, Lm * sent * (a_bytes + BF16_BYTES)))
        return ops

    def head_ops(self, rows: int) -> list[OpCost]:
        """LM head, logits gather and sampling for `rows` sampled positions."""
        if rows <= 0:
            return []
        a, tp = self.arch, self.layout.tensor_parallel
        ops = [self._gemm("lm_head", rows, a.vocab_size // tp, a.hidden_size, 1, bf16=True)]
        logit_bytes = rows * a.vocab_size * FP32_BYTES
        if tp > 1:
            ops.append(
                self._comm("logits_gather", allgather_time_s(logit_bytes, tp, self.hw), logit_bytes)
            )
        ops.append(self._elementwise("sampling", 2 * logit_bytes, 2))
        return ops

    # ---- operators that depend on the batch's contexts ---------------------------------

    @cached_property
    def _attn_consts(self) -> tuple[float, float, float, float, float, float, int, int, int]:
        """Per-step constants of attention: (prefill FLOPs per pair, decode FLOPs per pair,
        KV bytes per token per layer, Q/O bytes per prefill token per layer, rate, bandwidth,
        full layers, sliding layers, layers)."""
        a, tp = self.arch, self.layout.tensor_parallel
        heads = a.num_attention_heads // tp
        dims = attention_dims(a)
        kv_elems = (
            a.kv_elements_per_token_per_layer()
            if a.mla is not None
            else 2 * _kv_heads_per_gpu(a, tp) * a.head_dim
        )
        kv_tok_layer = kv_elems * get_format(self.formats.kv_cache).bytes_per_element
        return (
            2.0 * heads * (dims.prefill_qk + dims.prefill_v),
            2.0 * heads * (dims.decode_qk + dims.decode_v),
            kv_tok_layer,
            heads * (dims.prefill_qk + dims.prefill_v) * BF16_BYTES,
            self.attention_flops_per_s,
            self.hw.hbm_bytes_per_s * self.hw.attention_hbm_fraction,
            a.num_layers - a.num_sliding_layers,
            a.num_sliding_layers,
            a.num_layers,
        )

    def _attention_terms(
        self, b: BatchShape
    ) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
        """(FLOPs, bytes) of prefill and of decode attention over all layers, per GPU."""
        per_pair_p, per_pair_d, kv_tok, qo_tok, _, _, n_full, n_sw, _ = self._attn_consts
        dp = self.layout.attention_data_parallel
        window = self.arch.sliding_window
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

    def _attention_fixed_s(self) -> tuple[float, float]:
        """Per-layer fixed cost of the prefill kernel (a launch) and of the decode kernel (the
        intercept of the measured decode-attention line: launch plus split-KV merge)."""
        return self.hw.kernel_launch_overhead_s, self.hw.attention_decode_fixed_s

    def attention_ops(self, b: BatchShape) -> list[OpCost]:
        """Attention rows: compute at the attention kernels' rate, KV at their bandwidth."""
        *_, rate, bw, _, _, layers = self._attn_consts
        ops: list[OpCost] = []
        for name, terms, fixed in zip(
            ("attention_prefill", "attention_decode"),
            self._attention_terms(b),
            self._attention_fixed_s(),
            strict=True,
        ):
            if terms is not None:
                ops.append(roofline(name, terms[0], terms[1], rate, bw, layers, fixed))
        return ops

    def _attention_time_s(self, b: BatchShape) -> float:
        """sum(op.time_s for op in attention_ops(b)) without building rows (the hot path)."""
        consts = self._attn_consts
        rate, bw, layers = consts[4], consts[5], consts[8]
        prefill_fixed, decode_fixed = self._attention_fixed_s()
        prefill, decode = self._attention_terms(b)
        t = 0.0
        if prefill is not None:
            t += max(prefill[0] / rate, prefill[1] / bw) + layers * prefill_fixed
        if decode is not None:
            t += max(decode[0] / rate, decode[1] / bw) + layers * decode_fixed
        return t

    # ---- the two public questions ------------------------------------------------------

    def cost(self, b: BatchShape) -> StepCost:
        """Full per-operator breakdown of one step."""
        ops = self.token_ops(b.tokens)
        ops[1:1] = self.attention_ops(b)
        ops.extend(self.head_ops(b.sampled_rows))
        compute = sum(o.core_s for o in ops if o.bound == "compute")
        memory = sum(o.core_s for o in ops if o.bound == "memory")
        comm = sum(o.time_s for o in ops if o.bound == "communication")
        overhead = sum(o.launch_s for o in ops)
        return StepCost(
            compute + memory + comm + overhead, tuple(ops), compute, memory, comm, overhead
        )

    def _token_and_head_s(self, tokens: int, rows: int) -> float:
        """Time of everything but attention: memoized, it depends only on the two counts."""
        t = self._token_cache.get(tokens)
        if t is None:
            t = self._token_cache[tokens] = _sum_time(self.token_ops(tokens))
        h = self._head_cache.get(rows)
        if h is None:
            h = self._head_cache[rows] = _sum_time(self.head_ops(rows))
        return t + h

    def time_s(self, b: BatchShape) -> float:
        """Same total as cost(b).step_time_s, memoizing the token-count-only parts."""
        return self._token_and_head_s(b.tokens, b.sampled_rows) + self._attention_time_s(b)

    def decode_times_s(self, decode_seqs: int, context_tokens: FloatArray) -> FloatArray:
        """time_s of pure decode steps of `decode_seqs` sequences, one per summed context in
        `context_tokens`, vectorized (the serving engine's runs of unchanged batches). Same
        operations in the same order as the scalar path, so the floats agree."""
        base = self._token_and_head_s(decode_seqs, decode_seqs)
        per_pair_p, per_pair_d, kv_tok, _, rate, bw, n_full, n_sw, layers = self._attn_consts
        del per_pair_p
        dp = self.layout.attention_data_parallel
        ctx = (context_tokens + decode_seqs * 1) / dp
        if n_sw and self.arch.sliding_window is not None:
            ctx_sw = np.minimum(ctx, decode_seqs / dp * self.arch.sliding_window)
            work = n_full * ctx + n_sw * ctx_sw
        else:
            work = n_full * ctx + 0.0  # the scalar path adds n_sw * 0.0
        flops = per_pair_d * 1 * work
        nbytes = kv_tok * work
        fixed = layers * self.hw.attention_decode_fixed_s
        attention = np.maximum(flops / rate, nbytes / bw) + fixed
        result: FloatArray = base + attention
        return result
