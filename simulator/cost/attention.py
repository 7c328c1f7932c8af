"""Attention FLOPs and bytes from batch aggregates, FlashAttention-style (no S x S in HBM).

Prefill attends each new token to its prefix and to the earlier tokens of its chunk:
a chunk of c tokens after p cached ones scores c*p + c(c+1)/2 query-key pairs. Decode reads
every cached token's K and V once per step, so its bytes grow with the summed context.
Each pair costs 2*d_qk FLOPs for the score and 2*d_v for the weighted value sum per head.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.model.architecture import Architecture


def prefill_pairs(chunk_tokens: int, offset_tokens: int) -> float:
    """Causal query-key pairs of a chunk of `chunk_tokens` after `offset_tokens` cached ones."""
    return chunk_tokens * offset_tokens + chunk_tokens * (chunk_tokens + 1) / 2.0


@dataclass(frozen=True, slots=True)
class AttentionDims:
    """Per-head widths the attention kernels multiply at, prefill and decode."""

    prefill_qk: int
    prefill_v: int
    decode_qk: int
    decode_v: int


def attention_dims(arch: Architecture) -> AttentionDims:
    """MLA prefill runs on up-projected heads (d_qk = nope + rope, d_v); its decode is
    "absorbed": queries move into the latent space, so scores span kv_lora_rank + rope dims and
    values the kv_lora_rank latent (DeepSeek-V2 paper, section 2.1; FlashMLA's d=576, dv=512)."""
    if arch.mla is not None:
        m = arch.mla
        return AttentionDims(
            m.qk_nope_head_dim + m.qk_rope_head_dim,
            m.v_head_dim,
            m.kv_lora_rank + m.qk_rope_head_dim,
            m.kv_lora_rank,
        )
    d = arch.head_dim
    return AttentionDims(d, d, d, d)


def windowed(total: float, count: float, window: int | None) -> float:
    """Aggregate of per-item min(x, window) bounded from the sum alone: exact when every item
    is on the same side of the window, otherwise an upper bound."""
    if window is None:
        return total
    return min(total, count * window)
