"""The recurrence of a hybrid model's recurrent layers, Gated DeltaNet (Qwen3-Next, Qwen3.5)
or Mamba-2 (Nemotron-H): FLOPs and bytes from batch aggregates, the linear-attention
counterpart of `attention.py`. Neither cost grows with the context.

Gated DeltaNet: each value head keeps a key-dim x value-dim state S. A decode token updates
it by the gated delta rule, S <- a S (I - b k k^T) + b v k^T, and reads out o = S^T q (Yang,
Kautz and Hatamizadeh, "Gated Delta Networks", ICLR 2025, eq. 10): the decay (dk dv
multiplies), S k, the rank-one update and S^T q, about 7 dk dv FLOPs, and the whole state read
and written once per sequence and step. A prompt runs the paper's chunkwise form over chunks
of C tokens (section 3.2, the WY representation): per chunk K K^T, Q K^T (2 C^2 dk each), the
WY factors T K and T V (2 C^2 dk, 2 C^2 dv), the masked scores times the new values
(2 C^2 dv), and three products with the state (W S, Q S, K^T U: 2 C dk dv each), plus the
C x C triangular inverse (C^3 / 3). Per token: 6 dk dv + C (6 dk + 4 dv) + C^2 / 3. Each
chunk's state is written to HBM in BF16 and read back for the outputs (as the
flash-linear-attention kernels that vLLM and SGLang run do: chunk_gated_delta_rule_fwd_h
keeps one state per chunk).

Mamba-2 (Dao and Gu, "Transformers are SSMs", ICML 2024): a head's P x N state h decays by a
scalar, h <- exp(dt A) h + dt x B^T, and reads out y = h C: the decay (P N multiplies), the
outer product and its add (2 P N) and the read-out (2 P N), 5 P N FLOPs a decode token. A
prompt runs the SSD chunked algorithm (section 6) over chunks of Q tokens: per chunk and group
C B^T (2 Q^2 N), per head the decayed scores times x (2 Q^2 P), the chunk's state B^T x
(2 Q N P) and the states' contribution C h (2 Q N P). Per token: groups x 2 Q N plus heads x
(2 Q P + 4 N P). vLLM's mamba_chunk_scan_combined writes each chunk's state in FP32
(_chunk_state_fwd with states_in_fp32=True) and reads it back for the outputs.

Either kind's prompt also reads and writes its sequence's state once.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.cost.kernels import Kernels
from simulator.cost.ops import OpCost
from simulator.cost.shape import BatchShape
from simulator.model.precision import BF16_BYTES, FP32_BYTES
from simulator.model.recurrent import GATED_DELTANET, MAMBA2, LinearAttentionSpec

# FLOPs of one recurrent (decode) token per value head, in units of key dim x value dim: GDN's
# decay, S k, rank-one update and S^T q; Mamba-2's decay, outer product and read-out (module
# docstring).
DECODE_STATE_PASSES = {GATED_DELTANET: 7, MAMBA2: 5}
# Bytes per element of the per-chunk states the chunkwise prefill writes and reads back: BF16
# in flash-linear-attention's GDN kernels, FP32 in the Mamba-2 SSD kernels (module docstring).
CHUNK_STATE_BYTES = {GATED_DELTANET: BF16_BYTES, MAMBA2: FP32_BYTES}
# Operator-name prefix of each kind's rows (explain's tables).
OP_PREFIX = {GATED_DELTANET: "gdn", MAMBA2: "mamba"}


@dataclass(frozen=True, slots=True)
class LinearConsts:
    """Per-GPU constants of the recurrence for one layout: FLOPs per token, bytes per token
    and per sequence, and how many layers run it."""

    prefill_flops_per_token: float  # all of this GPU's value heads, one layer
    decode_flops_per_token: float
    io_bytes_per_token: float  # q, k, v read and o written, BF16
    chunk_state_bytes_per_token: float  # the per-chunk states written and read back
    state_bytes_per_seq: float  # one sequence's recurrent state, one layer, on this GPU
    layers: int
    op_prefix: str  # the kind's operator-name prefix (OP_PREFIX)


def prefill_flops_per_token(lin: LinearAttentionSpec, tp: int) -> float:
    """Chunkwise-prefill FLOPs of one token on one of `tp` ranks, one layer (module
    docstring): per value head for GDN; per group and per head for Mamba-2."""
    dk, dv, c = lin.key_head_dim, lin.value_head_dim, lin.chunk_tokens
    heads = lin.value_heads / tp
    if lin.is_mamba2:
        return lin.key_heads / tp * 2 * c * dk + heads * (2 * c * dv + 4 * dk * dv)
    return heads * (6 * dk * dv + c * (6 * dk + 4 * dv) + c * c / 3)


def linear_consts(lin: LinearAttentionSpec, tp: int) -> LinearConsts:
    """The recurrence's constants on one of `tp` ranks (value and key heads split over TP)."""
    dk, dv, c = lin.key_head_dim, lin.value_head_dim, lin.chunk_tokens
    heads = lin.value_heads / tp
    io = (2 * lin.key_heads * dk + 2 * lin.value_heads * dv) / tp * BF16_BYTES
    state = heads * lin.state_elements_per_head
    return LinearConsts(
        prefill_flops_per_token=prefill_flops_per_token(lin, tp),
        decode_flops_per_token=heads * DECODE_STATE_PASSES[lin.kind] * dk * dv,
        io_bytes_per_token=io,
        chunk_state_bytes_per_token=2 * state * CHUNK_STATE_BYTES[lin.kind] / c,
        state_bytes_per_seq=lin.recurrent_state_bytes / tp,
        layers=lin.num_layers,
        op_prefix=OP_PREFIX[lin.kind],
    )


def linear_terms(
    consts: LinearConsts, b: BatchShape, dp: int
) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """(FLOPs, bytes) over all linear layers, per GPU, of the prefill and of the decode part
    of batch `b`, split evenly over `dp` attention-DP ranks; None where the part is empty. A
    speculative step verifies 1 + k tokens per sequence in one recurrent pass (the state read
    and written once; keeping the drafts' intermediate states is not costed)."""
    c, layers = consts, consts.layers
    prefill = decode = None
    if b.prefill_tokens > 0:
        tokens = b.prefill_tokens / dp
        flops = c.prefill_flops_per_token * tokens
        nbytes = (c.io_bytes_per_token + c.chunk_state_bytes_per_token) * tokens
        nbytes += 2 * c.state_bytes_per_seq * b.prefill_seqs / dp
        prefill = (flops * layers, nbytes * layers)
    if b.decode_seqs > 0:
        decode = linear_decode_terms(consts, b.decode_seqs, 1 + b.speculative_tokens_per_seq, dp)
    return prefill, decode


def linear_decode_terms(
    consts: LinearConsts, decode_seqs: int, q_per_seq: int, dp: int
) -> tuple[float, float]:
    """(FLOPs, bytes) over all linear layers, per GPU, of `decode_seqs` sequences each
    decoding `q_per_seq` tokens: independent of their contexts."""
    seqs = decode_seqs / dp
    tokens = seqs * q_per_seq
    flops = consts.decode_flops_per_token * tokens
    nbytes = consts.io_bytes_per_token * tokens + 2 * consts.state_bytes_per_seq * seqs
    return flops * consts.layers, nbytes * consts.layers


def linear_consts_of(k: Kernels) -> LinearConsts | None:
    """The recurrence's constants on this layout; None unless the model is hybrid."""
    a = k.arch
    return None if a.linear is None else linear_consts(a.linear, k.layout.tensor_parallel)


def linear_rates(k: Kernels) -> tuple[float, float]:
    """(FLOP/s, bytes/s) of the recurrence's kernels: those of generic attention (the Triton
    kernels of flash-linear-attention and of vLLM's and SGLang's Mamba-2 SSD run on the same
    tensor cores and HBM; no measured rate of their own is known)."""
    return k.attention_flops_per_s, k.hw.hbm_bytes_per_s * k.hw.attention_hbm_fraction


def linear_projection_ops(k: Kernels, rank_tokens: int) -> list[OpCost]:
    """A hybrid model's recurrent layers around their recurrence, on one rank's tokens: the
    input projection (q, k, v and the output gate z with GDN's beta and decay; Mamba-2's z,
    x, B, C and dt), the causal conv over q, k and v (x, B and C) and the gated RMSNorm (each
    reads and writes its channels once), and the output projection; every width split over
    TP."""
    a, tp = k.arch, k.layout.tensor_parallel
    assert a.linear is not None
    lin, h, ma = a.linear, a.hidden_size, rank_tokens
    p = OP_PREFIX[lin.kind]
    bf16_in, bf16_out = a.keeps_bf16("attention_in"), a.keeps_bf16("attention_out")
    conv_norm_bytes = ma * (2 * lin.conv_channels + 3 * lin.value_width) / tp * BF16_BYTES
    return [
        k.gemm(f"{p}_in_proj", ma, lin.in_proj_width // tp, h, lin.num_layers, bf16=bf16_in),
        k.elementwise(f"{p}_conv_norm", lin.num_layers * conv_norm_bytes, 2 * lin.num_layers),
        k.gemm(f"{p}_out_proj", ma, h, lin.value_width // tp, lin.num_layers, bf16=bf16_out),
    ]
