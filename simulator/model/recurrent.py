"""The recurrent layers of a hybrid model: Gated DeltaNet (Qwen3-Next, Qwen3.5) or Mamba-2
(Nemotron-H). Each keeps, per sequence, a fixed-size state in place of a growing KV cache.

Both are linear attention with a decaying state, so one shape describes them (Dao and Gu,
"Transformers are SSMs", ICML 2024, section 3: Mamba-2's SSD is linear attention whose mask
is a scalar decay per head). A Mamba-2 layer's C and B, shared by the heads of a group, play
the queries and keys (its groups are the key heads, its state size the key dim); x plays the
values (its heads and head dim are the value heads and value dim). The kinds differ in their
small projections, their parameter count and the recurrence's FLOPs (cost/linear_attention.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.model.precision import BF16_BYTES

GATED_DELTANET = "gated_deltanet"
MAMBA2 = "mamba2"
RECURRENT_KINDS = (GATED_DELTANET, MAMBA2)


@dataclass(frozen=True, slots=True)
class LinearAttentionSpec:
    """A hybrid model's recurrent layers. Gated DeltaNet (Yang, Kautz and Hatamizadeh, "Gated
    Delta Networks", ICLR 2025; HF configs' linear_* keys) or Mamba-2 (Nemotron-H's mamba_*,
    ssm_state_size and n_groups keys): per sequence a state of value heads x key dim x value
    dim plus a short causal-convolution window over the q/k/v (x/B/C) channels."""

    num_layers: int  # recurrent layers; the model's other mixer layers attend with softmax
    key_heads: int  # GDN linear_num_key_heads; Mamba-2 n_groups (B and C per group)
    value_heads: int  # GDN linear_num_value_heads; Mamba-2 mamba_num_heads
    key_head_dim: int  # GDN linear_key_head_dim; Mamba-2 ssm_state_size (N)
    value_head_dim: int  # GDN linear_value_head_dim; Mamba-2 mamba_head_dim (P)
    conv_kernel: int  # the causal conv keeps kernel - 1 past inputs
    state_bytes_per_element: int  # the recurrent state's dtype
    kind: str = GATED_DELTANET  # RECURRENT_KINDS
    # Tokens per chunk of the chunkwise prefill kernel: flash-linear-attention's 64 for GDN;
    # a Mamba-2 config's chunk_size (the SSD kernels' block along the sequence).
    chunk_tokens: int = 64

    @property
    def is_mamba2(self) -> bool:
        return self.kind == MAMBA2

    @property
    def qkvz_width(self) -> int:
        """The fused input projection's wide outputs: queries and keys (Mamba-2: C and B, one
        each per group), values (x) and the output gate z."""
        return 2 * self.key_heads * self.key_head_dim + 2 * self.value_heads * self.value_head_dim

    @property
    def ba_width(self) -> int:
        """The input projection's per-head scalars: GDN's beta and decay, Mamba-2's time step
        dt (its decay A is a parameter, not projected)."""
        return self.value_heads if self.is_mamba2 else 2 * self.value_heads

    @property
    def in_proj_width(self) -> int:
        """Output width of the whole input projection."""
        return self.qkvz_width + self.ba_width

    @property
    def conv_channels(self) -> int:
        """Channels of the causal convolution: q, k and v (Mamba-2: x, B and C), not z."""
        return 2 * self.key_heads * self.key_head_dim + self.value_heads * self.value_head_dim

    @property
    def value_width(self) -> int:
        """Width of the layer's output before out_proj: all value heads."""
        return self.value_heads * self.value_head_dim

    @property
    def state_elements_per_head(self) -> int:
        """One value head's recurrent state: a key dim x value dim matrix."""
        return self.key_head_dim * self.value_head_dim

    @property
    def recurrent_state_bytes(self) -> int:
        """One sequence's recurrent state in one layer, all value heads, in its dtype."""
        return self.value_heads * self.state_elements_per_head * self.state_bytes_per_element

    @property
    def conv_state_bytes(self) -> float:
        """One sequence's conv window in one layer: kernel - 1 past inputs of each channel, in
        BF16 (the activations')."""
        return self.conv_channels * (self.conv_kernel - 1) * BF16_BYTES

    def params_per_layer(self, hidden: int) -> int:
        """The input and output projections and the depthwise conv, plus the small per-head
        and norm weights: GDN's decay (A_log, dt_bias) and a norm over one head; Mamba-2's
        conv bias, A_log, D and dt_bias, and a gated norm over all heads (vLLM
        MambaMixer2: conv1d with bias, RMSNormGated over the intermediate width)."""
        projections = hidden * self.in_proj_width + self.value_width * hidden
        conv = self.conv_channels * self.conv_kernel
        if self.is_mamba2:
            return projections + conv + self.conv_channels + 3 * self.value_heads \
                + self.value_width
        return projections + conv + 2 * self.value_heads + self.value_head_dim
