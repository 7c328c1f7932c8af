"""Typed transformer architecture parsed from an HF-style config.json (offline).

The cost model only ever sees an `Architecture`: one frozen record of the shapes that set
FLOPs and bytes. Parsing lives in `hf_config`, finding a config in `load`.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.model.recurrent import LinearAttentionSpec


class ModelError(ValueError):
    """A model name or config.json that cannot be turned into an Architecture."""


@dataclass(frozen=True, slots=True)
class MoESpec:
    """Mixture-of-experts shape of the MoE layers."""

    num_experts: int  # routed experts per MoE layer
    experts_per_token: int  # top-k
    expert_intermediate_size: int  # FFN width of one routed expert
    num_shared_experts: int  # always-active experts (DeepSeek, Qwen2-MoE style)
    shared_expert_intermediate_size: int  # FFN width of one shared expert
    first_dense_layers: int  # leading layers that use a dense MLP instead (DeepSeek-V3: 3)
    moe_layer_interval: int  # 1 = every layer after the dense ones is MoE


@dataclass(frozen=True, slots=True)
class MLASpec:
    """DeepSeek multi-head latent attention: low-rank compressed K/V (and Q)."""

    q_lora_rank: int  # 0 = no query compression (DeepSeek-V2-Lite)
    kv_lora_rank: int  # the compressed latent cached per token (512 for V3)
    qk_rope_head_dim: int  # decoupled RoPE key, also cached per token (64 for V3)
    qk_nope_head_dim: int
    v_head_dim: int


# The indexer key cache's layout (DeepSeek-V3.2's FP8 keys, block-scaled): bytes of an FP8 value
# and of an FP32 scale, and the values one scale covers (assumed: the DeepGEMM FP8 MQA-logits
# kernel's 128-value blocks; no published GLM-5 figure).
FP8_BYTES = 1
FP32_BYTES = 4
INDEX_SCALE_BLOCK = 128


@dataclass(frozen=True, slots=True)
class SparseAttentionSpec:
    """DeepSeek-V3.2-style sparse attention (DSA, GLM-5): a lightning indexer scores every
    cached token with a few small FP8 heads, and each query attends only to the `topk` best."""

    topk: int  # keys each query attends to (index_topk: 2048 in DeepSeek-V3.2 and GLM-5)
    index_heads: int  # the indexer's query heads (index_n_heads)
    index_head_dim: int  # the indexer's head width, also its cached key's (index_head_dim)


# Linear-layer groups a checkpoint may keep in BF16 while the rest takes the weight format:
# the attention input projections, the attention output projection, the dense MLP layers and
# the shared experts. Embeddings, the MoE router and the LM head are BF16 in every checkpoint
# this simulator costs.
MODULE_GROUPS = ("attention_in", "attention_out", "dense_mlp", "shared_experts")
ATTENTION_GROUPS = frozenset({"attention_in", "attention_out"})  # what "self_attn" names


@dataclass(frozen=True, slots=True)
class Architecture:
    """Shapes of a decoder-only transformer that set its FLOPs, bytes and KV cache."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # dense MLP width (gated: gate+up are 2 x this)
    vocab_size: int
    tie_word_embeddings: bool
    gated_mlp: bool  # SwiGLU-style (3 matrices) or plain (2 matrices)
    attention_bias: bool
    sliding_window: int | None  # tokens, for the layers that use a window
    num_sliding_layers: int  # how many of num_layers attend only within the window
    max_position_embeddings: int
    moe: MoESpec | None
    mla: MLASpec | None
    attention_sinks: bool = False  # gpt-oss learned per-head sink logits (negligible cost)
    num_mtp_layers: int = 0  # multi-token-prediction modules (DeepSeek-V3's nextn layers)
    # Module groups the checkpoint keeps in BF16 whatever the weight format (MODULE_GROUPS;
    # quantization_config.modules_to_not_convert names them, as gpt-oss does self_attn).
    bf16_modules: frozenset[str] = frozenset()
    # Width of the attention projections' input (0: hidden_size). An EAGLE-3 draft head's one
    # layer attends over [token embedding; fused hidden state], 2 x hidden (vLLM
    # llama_eagle3.py: qkv_input_size = 2 * hidden_size for layer 0).
    qkv_input_size: int = 0
    # Hidden-width inputs a drafter's input projection fuses into one (0: none), replicated on
    # every GPU in BF16. EAGLE-3 projects three target layers' hidden states, 3 x hidden ->
    # hidden (vLLM llama_eagle3.py `fc`); a DeepSeek MTP module its [embedding; hidden], 2 x
    # hidden -> hidden (deepseek_mtp.py `eh_proj`).
    fused_hidden_states: int = 0
    # Sparse attention (DSA): None for dense attention.
    sparse: SparseAttentionSpec | None = None
    # RMSNorm of q and k over all heads together (MiniMax-M2's qk_norm_type "per_layer"), not
    # per head: under tensor parallelism each rank holds some heads, so the norm's sum of
    # squares is all-reduced across the TP group on every layer (vLLM MiniMaxText01RMSNormTP).
    qk_norm_across_heads: bool = False
    # Hybrid models: recurrent layers (Gated DeltaNet in Qwen3-Next and Qwen3.5, Mamba-2 in
    # Nemotron-H) in place of some attention layers; None when every layer attends with softmax.
    linear: LinearAttentionSpec | None = None
    # FFN blocks where they stand apart from the mixers (Nemotron-H's hybrid_override_pattern
    # "-" blocks: a mixer block, Mamba-2 or attention, and an MLP block each have their own
    # norm and residual); None: one FFN in each of num_layers layers, as in a transformer.
    num_ffn_blocks: int | None = None
    # A sigmoid gate on each attention head's output, projected by q_proj beside the queries
    # (Qwen3-Next/Qwen3.5 attn_output_gate: q_proj is 2 x heads x head_dim wide).
    attn_output_gate: bool = False

    # --- derived counts, used by the cost model and the parameter-count tests ---

    @property
    def ffn_layers(self) -> int:
        """Layers with an FFN (dense MLP or MoE)."""
        return self.num_layers if self.num_ffn_blocks is None else self.num_ffn_blocks

    @property
    def residual_blocks(self) -> int:
        """Blocks behind a norm and a residual add, each ending in one TP all-reduce: a mixer
        and an FFN per transformer layer, 2 x num_layers, or Nemotron-H's separate blocks."""
        return self.num_layers + self.ffn_layers

    @property
    def num_moe_layers(self) -> int:
        if self.moe is None:
            return 0
        # Layers first_dense_layers, + interval, + 2 x interval, ... below ffn_layers: a count
        # in closed form (the cost model asks for it on every step it prices).
        span = self.ffn_layers - self.moe.first_dense_layers
        return max(0, -(-span // self.moe.moe_layer_interval))

    @property
    def num_linear_layers(self) -> int:
        """Recurrent (Gated DeltaNet or Mamba-2) layers (0 unless hybrid)."""
        return 0 if self.linear is None else self.linear.num_layers

    @property
    def softmax_attention_layers(self) -> int:
        """Layers that attend with softmax over a KV cache (all but the linear ones)."""
        return self.num_layers - self.num_linear_layers

    @property
    def num_dense_mlp_layers(self) -> int:
        return self.ffn_layers - self.num_moe_layers

    @property
    def q_dim(self) -> int:
        """Width of the query projection output (all heads)."""
        if self.mla is not None:
            qk_head = self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim
            return self.num_attention_heads * qk_head
        return self.num_attention_heads * self.head_dim

    @property
    def q_proj_width(self) -> int:
        """Output width of a non-MLA query projection: the queries, and the output gate when
        the model gates attention heads (attn_output_gate)."""
        gates = 2 if self.attn_output_gate else 1
        return gates * self.num_attention_heads * self.head_dim

    @property
    def attention_input_size(self) -> int:
        """Input width of the q/k/v projections (hidden_size unless the layer widens it)."""
        return self.qkv_input_size or self.hidden_size

    @property
    def fuse_params(self) -> int:
        """Parameters of the input projection fusing `fused_hidden_states` hidden states."""
        return self.fused_hidden_states * self.hidden_size * self.hidden_size

    @property
    def attention_params_per_layer(self) -> int:
        h = self.hidden_size
        if self.mla is not None:
            m = self.mla
            nh = self.num_attention_heads
            qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
            if m.q_lora_rank > 0:
                q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * nh * qk_head
            else:
                q = h * nh * qk_head
            kv_down = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
            kv_up = m.kv_lora_rank * nh * (m.qk_nope_head_dim + m.v_head_dim)
            o = nh * m.v_head_dim * h
            return q + kv_down + kv_up + o + self.indexer_params_per_layer
        h_in = self.attention_input_size
        q = h_in * self.q_proj_width
        kv = 2 * h_in * self.num_kv_heads * self.head_dim
        o = self.num_attention_heads * self.head_dim * h
        bias = 0
        if self.attention_bias:
            bias = (self.num_attention_heads + 2 * self.num_kv_heads) * self.head_dim
        return q + kv + o + bias

    def mlp_params(self, intermediate_size: int) -> int:
        """Parameters of one (gated or plain) FFN of the given width."""
        mats = 3 if self.gated_mlp else 2
        return mats * self.hidden_size * intermediate_size

    def keeps_bf16(self, group: str) -> bool:
        """Whether the checkpoint keeps module group `group` (MODULE_GROUPS) in BF16."""
        return group in self.bf16_modules

    @property
    def dense_mlp_params_per_layer(self) -> int:
        return self.mlp_params(self.intermediate_size)

    @property
    def routed_expert_params(self) -> int:
        """Parameters of one routed expert."""
        assert self.moe is not None
        return self.mlp_params(self.moe.expert_intermediate_size)

    @property
    def shared_expert_params_per_layer(self) -> int:
        if self.moe is None:
            return 0
        per_expert = self.mlp_params(self.moe.shared_expert_intermediate_size)
        return self.moe.num_shared_experts * per_expert

    @property
    def router_params_per_layer(self) -> int:
        return 0 if self.moe is None else self.hidden_size * self.moe.num_experts

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def norm_params(self) -> int:
        return (self.residual_blocks + 1) * self.hidden_size

    @property
    def total_params(self) -> int:
        """All parameters, every expert counted."""
        n = self.softmax_attention_layers * self.attention_params_per_layer
        if self.linear is not None:
            n += self.linear.num_layers * self.linear.params_per_layer(self.hidden_size)
        n += self.num_dense_mlp_layers * self.dense_mlp_params_per_layer
        if self.moe is not None:
            per_moe_layer = (
                self.moe.num_experts * self.routed_expert_params
                + self.shared_expert_params_per_layer
                + self.router_params_per_layer
            )
            n += self.num_moe_layers * per_moe_layer
        n += self.fuse_params
        return n + self.embedding_params + self.lm_head_params + self.norm_params

    @property
    def active_params(self) -> int:
        """Parameters touched by one token (top-k routed experts only)."""
        if self.moe is None:
            return self.total_params
        inactive = (self.moe.num_experts - self.moe.experts_per_token) * self.routed_expert_params
        return self.total_params - self.num_moe_layers * inactive

    @property
    def attention_window(self) -> int | None:
        """Most keys a query attends to on the windowed layers: a sliding window's length, or
        a sparse model's top-k (every layer). None: every layer attends to its whole context."""
        return self.sparse.topk if self.sparse is not None else self.sliding_window

    @property
    def windowed_attention_layers(self) -> int:
        """Layers whose attention is capped at `attention_window` keys per query (a sparse
        model's cache still holds every token: memory reads the sliding fields, not these)."""
        if self.sparse is not None:
            return self.softmax_attention_layers
        return self.num_sliding_layers

    @property
    def index_key_bytes(self) -> int:
        """Bytes one cached token's indexer key takes per layer: FP8 values plus one FP32
        scale per INDEX_SCALE_BLOCK of them (the block-scaled layout of DeepGEMM's FP8
        MQA-logits kernel that DeepSeek-V3.2's indexer runs on; assumed for GLM-5 too). 0
        without DSA."""
        if self.sparse is None:
            return 0
        d = self.sparse.index_head_dim
        return d * FP8_BYTES + FP32_BYTES * -(-d // INDEX_SCALE_BLOCK)

    @property
    def indexer_query_input_size(self) -> int:
        """What the indexer's queries are projected from: MLA's query latent (q_lora_rank),
        else the hidden state."""
        if self.mla is not None and self.mla.q_lora_rank:
            return self.mla.q_lora_rank
        return self.hidden_size

    @property
    def indexer_params_per_layer(self) -> int:
        """The indexer's projections: queries from `indexer_query_input_size`, one shared key
        and the per-head weights from the hidden state."""
        if self.sparse is None:
            return 0
        sp = self.sparse
        return (self.indexer_query_input_size * sp.index_heads * sp.index_head_dim
                + self.hidden_size * (sp.index_head_dim + sp.index_heads))

    def linear_state_bytes_per_seq(self, tp: int = 1) -> float:
        """Bytes one sequence's recurrent state takes on one of `tp` ranks over all
        recurrent layers: the recurrent state in its dtype (value heads split over TP) and the
        conv window, kernel - 1 past inputs of each channel in BF16. 0 unless hybrid."""
        if self.linear is None:
            return 0.0
        lin = self.linear
        return lin.num_layers * (lin.recurrent_state_bytes + lin.conv_state_bytes) / tp

    def kv_elements_per_token_per_layer(self) -> int:
        """Cached elements per token per layer (all KV heads; MLA caches the latent)."""
        if self.mla is not None:
            return self.mla.kv_lora_rank + self.mla.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim
