"""Step-cost physics as executable specs: hand-derived roofline cases with the arithmetic in
comments, format and layout rules, and hypothesis properties (fast path == breakdown,
monotonicity in bandwidth, throughput, batch, context and KV precision)."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cost import (
    BatchShape,
    Formats,
    LayoutError,
    MemoryFitError,
    ParallelLayout,
    StepModel,
    memory_budget,
    prefill_pairs,
    require_fit,
)
from simulator.cost.comm import allreduce_time_s
from simulator.cost.gemm import tiled_gemm
from simulator.cost.memory import kv_bytes_per_token_per_gpu
from simulator.hardware.profile import GemmTiling, load_hardware
from simulator.model.load import load_architecture
from simulator.model.precision import gemm_tensor_format, get_format

FAST = settings(max_examples=30, deadline=None)

H100 = load_hardware("h100-sxm")
HOPPER = frozenset(H100.dense_flops_per_s)  # {bf16, fp16, fp8, int8}: no FP4 tensor cores
BLACKWELL = frozenset(load_hardware("b200").dense_flops_per_s)  # adds fp4

FP8 = get_format("fp8").bytes_per_element  # 1 + 1/4096: e4m3 + one FP32 scale per 128x128
BF16 = 2.0
FP8_ALL = Formats("fp8", "fp8", "fp8")


def _rows(step) -> dict[str, object]:
    return {o.op: o for o in step.ops}


def decode(seqs: int, context: int, spec: int = 0) -> BatchShape:
    return BatchShape(
        decode_seqs=seqs, decode_context_tokens=seqs * context, speculative_tokens_per_seq=spec
    )


def prefill(tokens: int, offset: int = 0) -> BatchShape:
    return BatchShape.one_chunk(tokens, offset)


# ---- 1. hand-derived decode: Llama-3.1-70B FP8, TP4, batch 64, context 2048, H100 ----------


def test_fp8_format_bytes_include_block_scales() -> None:
    # 8 bits + one 32-bit scale per 128 x 128 block = 8 + 32/16384 bits = (1 + 1/4096) bytes.
    assert FP8 == 1 + 1 / 4096


def test_llama70b_fp8_tp4_decode_by_hand() -> None:
    # Published shapes (meta-llama/Llama-3.1-70B config.json).
    L, h, nq, nkv, d, inter, vocab, tp = 80, 8192, 64, 8, 128, 28672, 128256, 4
    seqs, ctx = 64, 2048
    arch = load_architecture("llama-3.1-70b")
    assert (arch.num_layers, arch.hidden_size, arch.num_attention_heads) == (L, h, nq)
    assert (arch.num_kv_heads, arch.head_dim, arch.intermediate_size) == (nkv, d, inter)
    assert arch.vocab_size == vocab
    layout = ParallelLayout(tensor_parallel=tp)
    model = StepModel(arch, H100, layout, FP8_ALL)
    budget = memory_budget(arch, H100, layout, FP8_ALL)

    # -- weights per GPU --
    # attention per layer per GPU: Q and O 2 x 8192 x 64 x 128 / 4 = 33,554,432
    #                              K and V 2 x 8192 x (8/4 = 2 heads) x 128 = 4,194,304
    # MLP per layer per GPU: 3 x 8192 x 28672 / 4 = 176,160,768
    attn_params = 2 * h * nq * d // tp + 2 * h * (nkv // tp) * d
    mlp_params = 3 * h * inter // tp
    assert attn_params == 37_748_736 and mlp_params == 176_160_768
    linear_params = L * (attn_params + mlp_params)  # 17,112,760,320
    assert linear_params == 17_112_760_320
    linear_bytes = linear_params * FP8  # 17,116,938,240 (block scales add 4.18 MB)
    assert linear_bytes == 17_116_938_240
    # BF16 (kept unquantized): norms (2 x 80 + 1) x 8192, not sharded; embedding and LM head
    # vocab-parallel over TP: 128256 x 8192 / 4 = 262,668,288 params each.
    norm_bytes = (2 * L + 1) * h * BF16  # 2,637,824
    head_bytes = vocab * h / tp * BF16  # 525,336,576
    weights = linear_bytes + norm_bytes + 2 * head_bytes  # 18,170,249,216
    assert weights == 18_170_249_216
    assert budget.weights_bytes_per_gpu == pytest.approx(weights, rel=1e-9)

    # -- KV per token per GPU: 80 layers x (K, V) x 2 heads x 128 x (1 + 1/4096) = 40,970 B --
    kv_per_token = L * 2 * (nkv // tp) * d * FP8
    assert kv_per_token == 40_970
    assert budget.kv_bytes_per_token_per_gpu == pytest.approx(kv_per_token, rel=1e-9)
    assert not budget.kv_heads_replicated

    # -- the step: 64 sequences each read 2048 cached tokens plus the one being written --
    step = model.cost(decode(seqs, ctx))
    rows = _rows(step)
    kv_read = kv_per_token * seqs * (ctx + 1)  # 40,970 x 131,136 = 5,372,641,920 B
    assert kv_read == 5_372_641_920
    att = rows["attention_decode"]
    assert att.bytes == pytest.approx(kv_read, rel=1e-9)
    assert att.bound == "memory"
    # decode attention line: KV / (0.75 x 3.35 TB/s) + 15 us per layer = 2.138 ms + 1.2 ms
    assert att.time_s == pytest.approx(kv_read / (3.35e12 * 0.75) + L * 15e-6, rel=1e-9)

    # Each GEMM row: weights once + FP8 activations in + BF16 out, per layer, x 80 layers.
    def gemm_row_bytes(m: int, n: int, k: int, layers: int, wb: float, ab: float) -> float:
        return layers * (n * k * wb + m * k * ab + m * n * BF16)

    m = seqs
    qkv_n = (nq // tp + 2 * (nkv // tp)) * d  # (16 + 4) x 128 = 2560
    expected = {
        "qkv_proj": gemm_row_bytes(m, qkv_n, h, L, FP8, FP8),  # 1,746,298,880
        "o_proj": gemm_row_bytes(m, h, nq // tp * d, L, FP8, FP8),
        "mlp_up_gate": gemm_row_bytes(m, 2 * inter // tp, h, L, FP8, FP8),
        "mlp_down": gemm_row_bytes(m, h, inter // tp, L, FP8, FP8),
        "lm_head": gemm_row_bytes(m, vocab // tp, h, 1, BF16, BF16),  # BF16 head, 1 "layer"
    }
    assert expected["qkv_proj"] == 1_746_298_880
    hbm = 3.35e12 * 0.80  # datasheet x hbm_bandwidth_fraction
    for op, nbytes in expected.items():
        row = rows[op]
        assert row.bytes == pytest.approx(nbytes, rel=1e-9), op
        assert row.bound == "memory", op  # 64 rows: ~125 FLOP/B, far below the ~517 ridge
        kernels = 1 if op == "lm_head" else L
        # + 1.5 us launch per kernel (h100-sxm kernel_launch_overhead_us); 64 rows of dense FP8
        # split K over the SMs, so the dense class streams at the chip's full 0.80.
        assert row.time_s == pytest.approx(nbytes / hbm + kernels * 1.5e-6, rel=1e-9), op
    # The streamed weights are exactly the linear layers + LM head (embedding is a lookup).
    streamed_weights = sum(
        r.bytes - L * (m * k * FP8 + m * n * BF16)
        for r, (n, k) in (
            (rows["qkv_proj"], (qkv_n, h)),
            (rows["o_proj"], (h, nq // tp * d)),
            (rows["mlp_up_gate"], (2 * inter // tp, h)),
            (rows["mlp_down"], (h, inter // tp)),
        )
    )
    assert streamed_weights == pytest.approx(linear_bytes, rel=1e-9)

    # -- HBM floor: (17.117 GB linear + 0.525 GB LM head + 5.373 GB KV) / 2.68 TB/s = 8.59 ms --
    floor = (linear_bytes + head_bytes + kv_read) / hbm
    assert floor == pytest.approx(8.588e-3, rel=1e-3)
    assert step.step_time_s >= floor
    # Launch overheads (~3.8 ms) and 160 all-reduces (~2 ms) sit on top; the model is
    # memory-bound and stays within 2x of the pure streaming floor (15.1 ms today).
    assert step.step_time_s <= 2.0 * floor
    assert step.bound == "memory"


# ---- 2. hand-derived prefill: Llama-3.1-8B BF16, TP1, 4096 tokens, H100 ------------------


def test_llama8b_prefill_4096_by_hand() -> None:
    L, h, nq, nkv, d, inter, vocab, T = 32, 4096, 32, 8, 128, 14336, 128256, 4096
    arch = load_architecture("llama-3.1-8b")
    model = StepModel(arch, H100, ParallelLayout(), Formats())
    step = model.cost(prefill(T))
    rows = _rows(step)
    # Linear params per layer: Q, O 4096^2 each; K, V 2 x 4096 x 8 x 128; MLP 3 x 4096 x 14336
    per_layer = 2 * h * nq * d + 2 * h * nkv * d + 3 * h * inter  # 218,103,808
    assert per_layer == 218_103_808
    linear_params = L * per_layer  # 6,979,321,856
    gemm_flops = 2 * T * linear_params  # 5.7175e13
    assert gemm_flops == 57_174_604_644_352
    layer_ops = ("qkv_proj", "o_proj", "mlp_up_gate", "mlp_down")
    assert sum(rows[o].flops for o in layer_ops) == pytest.approx(gemm_flops, rel=1e-12)
    # Only the last prompt position is sampled: LM head 2 x 1 x 128256 x 4096
    assert rows["lm_head"].flops == 2 * 1 * vocab * h
    # Causal pairs 4096 x 4097 / 2 = 8,390,656; per pair per head 2 x (128 + 128) FLOPs
    pairs = T * (T + 1) / 2
    assert pairs == 8_390_656
    attn_flops = pairs * L * nq * 2 * (d + d)  # 4.399e12
    assert rows["attention_prefill"].flops == pytest.approx(attn_flops, rel=1e-12)
    for op in (*layer_ops, "attention_prefill"):
        assert rows[op].bound == "compute", op
    assert step.bound == "compute"
    peak = 989e12
    assert step.step_time_s >= (gemm_flops + attn_flops) / peak  # 62.3 ms at 100% of peak
    # Tighter: GEMMs at 0.70 and attention at 0.60 of peak are lower bounds on their rows.
    assert step.step_time_s >= gemm_flops / (0.70 * peak) + attn_flops / (0.60 * peak)
    assert step.step_time_s <= 1.3 * (gemm_flops / (0.70 * peak) + attn_flops / (0.60 * peak))


# ---- 3. GEMM tile and wave quantization ---------------------------------------------------


def gemm_compute_time_s(m: int, n: int, k: int, rate: float, sms: int, tiles: GemmTiling) -> float:
    return tiled_gemm(m, n, k, rate, sms, tiles)[0]

RATE = 1e15
SMS = 132
TILES = load_hardware("h100-sxm").gemm_tiling  # 64-row small tile, 128 x 128, K slices >= 256


def test_one_more_row_costs_one_whole_wave() -> None:
    # N = 8192 -> 64 column tiles of 128. M = 256 -> 2 row tiles of 128 -> 128 tiles <= 132 SMs:
    # one wave (split-K is 132 // 128 = 1). M = 257 -> 3 row tiles -> 192 tiles -> 2 waves.
    n, k = 8192, 8192
    wave_s = 2 * 128 * 128 * k / (RATE / SMS)  # one tile's FLOPs at one SM's rate = 35.4 us
    t256 = gemm_compute_time_s(256, n, k, RATE, SMS, TILES)
    t257 = gemm_compute_time_s(257, n, k, RATE, SMS, TILES)
    assert t256 == pytest.approx(wave_s, rel=1e-12)
    assert t257 == pytest.approx(2 * wave_s, rel=1e-12)
    assert t257 - t256 == pytest.approx(wave_s, rel=1e-12)
    # ...while the FLOPs grew by only 1/256.
    # Filling the partial wave costs nothing more: M = 384 is still 192 tiles, 2 waves.
    assert gemm_compute_time_s(384, n, k, RATE, SMS, TILES) == t257
    # 2 waves hold 264 tiles: 4 row tiles x 64 = 256 still fits; 5 x 64 = 320 needs a third.
    assert gemm_compute_time_s(512, n, k, RATE, SMS, TILES) == pytest.approx(2 * wave_s, rel=1e-12)
    assert gemm_compute_time_s(513, n, k, RATE, SMS, TILES) == pytest.approx(3 * wave_s, rel=1e-12)


def test_split_k_when_few_tiles() -> None:
    # Decode GEMM: M = 1 uses the 64-row tile; N = 4096 -> 32 tiles < 132 SMs.
    # split = min(132 // 32 = 4, 8192 // 256 = 32) = 4: each SM runs one tile over K/4 = 2048.
    t = gemm_compute_time_s(1, 4096, 8192, RATE, SMS, TILES)
    assert t == pytest.approx(2 * 64 * 128 * 2048 / (RATE / SMS), rel=1e-12)
    # K limits the split: N = 128 (1 tile), K = 512 -> split = min(132, 512 // 256 = 2) = 2.
    t = gemm_compute_time_s(1, 128, 512, RATE, SMS, TILES)
    assert t == pytest.approx(2 * 64 * 128 * 256 / (RATE / SMS), rel=1e-12)
    # Crossing M = 64 switches to the 128-row tile: same 32 tiles, twice the tile FLOPs.
    assert gemm_compute_time_s(65, 4096, 8192, RATE, SMS, TILES) == pytest.approx(
        2 * gemm_compute_time_s(64, 4096, 8192, RATE, SMS, TILES), rel=1e-12
    )
    assert gemm_compute_time_s(0, 4096, 8192, RATE, SMS, TILES) == 0.0


# ---- 4. number formats and the Hopper FP4 rule -------------------------------------------


def test_format_bits() -> None:
    assert get_format("mxfp4").bits_per_element == 4.25  # 4 + 8-bit E8M0 scale / 32
    assert get_format("nvfp4").bits_per_element == 4.5  # 4 + 8-bit E4M3 scale / 16
    assert get_format("int4").bits_per_element == 4.125  # 4 + FP16 scale / 128
    assert get_format("bf16").bits_per_element == 16
    with pytest.raises(ValueError, match="unknown number format"):
        get_format("fp7")


@pytest.mark.parametrize(
    ("weights", "activations", "chip", "expected"),
    [
        ("nvfp4", "fp8", HOPPER, "fp8"),  # FP4 weights dequantized to the FP8 activations
        ("nvfp4", "nvfp4", HOPPER, "fp8"),  # no FP4 tensor cores: next wider is FP8
        ("nvfp4", "nvfp4", BLACKWELL, "fp4"),
        ("mxfp4", "mxfp4", BLACKWELL, "fp4"),
        ("int4", "bf16", HOPPER, "bf16"),  # weight-only: multiply at the activation format
        ("int4", "fp8", HOPPER, "fp8"),
        ("fp8", "bf16", HOPPER, "bf16"),  # the wider operand wins
        ("fp8", "fp8", HOPPER, "fp8"),
        ("fp8", "int8", HOPPER, "bf16"),  # same width, different kinds: no mixed kernel
        ("bf16", "bf16", BLACKWELL, "bf16"),
    ],
)
def test_gemm_tensor_format(weights: str, activations: str, chip: frozenset, expected: str) -> None:
    assert gemm_tensor_format(weights, activations, chip) == expected


def test_int4_activations_rejected() -> None:
    with pytest.raises(ValueError, match="weight-only"):
        gemm_tensor_format("int4", "int4", HOPPER)
    arch = load_architecture("llama-3.1-8b")
    with pytest.raises(LayoutError, match="weight-only"):
        StepModel(arch, H100, ParallelLayout(), Formats("int4", "int4", "bf16"))


def test_nvfp4_on_hopper_saves_bytes_not_flops_nor_decode_time() -> None:
    arch = load_architecture("llama-3.1-70b")
    layout = ParallelLayout(tensor_parallel=4)
    fp8 = StepModel(arch, H100, layout, FP8_ALL)
    fp4 = StepModel(arch, H100, layout, Formats("nvfp4", "fp8", "fp8"))
    assert fp4.gemm_format == fp8.gemm_format == "fp8"
    assert fp4.gemm_flops_per_s == fp8.gemm_flops_per_s == 1979e12 * 0.70
    b = decode(64, 2048)
    r8, r4 = _rows(fp8.cost(b)), _rows(fp4.cost(b))
    # mlp_down weights per GPU: 80 x 8192 x 7168; the difference is (1 + 1/4096 - 0.5625) B each
    saved = 80 * 8192 * 7168 * (FP8 - 0.5625)
    assert r8["mlp_down"].bytes - r4["mlp_down"].bytes == pytest.approx(saved, rel=1e-9)
    for op in ("qkv_proj", "o_proj", "mlp_up_gate", "mlp_down"):
        assert r4[op].bytes < r8[op].bytes
        assert r4[op].flops == r8[op].flops
    # Hopper has no FP4 tensor cores: the kernel dequantizes the weights in its main loop
    # (weight-only class, h100-sxm gemm_classes): it streams them at the dense 0.80 of 3.35 TB/s
    # but pays 12.6 us per launch on top of the 1.5 us launch (the Marlin row: 27.0 us for
    # 34.6 MB at M=1 and M=4). mlp_down: its bytes / 2.68 TB/s + 80 x (1.5 + 12.6) us.
    assert fp4.gemm_class(64).kernel_class == "weight_only"
    assert fp8.gemm_class(64).kernel_class == "dense"
    row = r4["mlp_down"]
    assert row.time_s == pytest.approx(
        row.bytes / (0.80 * 3.35e12) + 80 * (1.5e-6 + 12.6e-6), rel=1e-9
    )
    # The step: about 17.6 GB of FP8 weights per GPU at 2.68 TB/s is 6.6 ms, at 0.5625 B a
    # parameter 3.7 ms, a 2.9 ms saving; the 4 weight GEMMs x 80 layers x 12.6 us = 4.0 ms of
    # fixed latency outweigh it, so FP4 on Hopper decodes a little slower than FP8 at batch 64
    # (measured here: 14.97 ms against 13.43 ms).
    assert fp8.time_s(b) < fp4.time_s(b) < 1.2 * fp8.time_s(b)


# ---- 5. MoE: expected experts touched ----------------------------------------------------


def _moe_rows(tokens: int) -> tuple[float, float]:
    arch = load_architecture("deepseek-v3")
    model = StepModel(arch, H100, ParallelLayout(), FP8_ALL)
    rows = _rows(model.cost(decode(tokens, 1)))
    return rows["moe_experts_up_gate"].bytes, rows["moe_experts_down"].bytes


def _moe_up_bytes(touched: int, m_e: int) -> float:
    # DeepSeek-V3: 61 layers - 3 dense = 58 MoE layers; expert width 2048, gated (up+gate 4096)
    # per touched expert: 4096 x 7168 FP8 weights + m_e x 7168 FP8 in + m_e x 4096 BF16 out.
    return 58 * touched * (4096 * 7168 * FP8 + m_e * 7168 * FP8 + m_e * 4096 * BF16)


def test_moe_experts_touched() -> None:
    # 1 token picks top-8 of 256: 8 experts, 1 row each.
    up, _ = _moe_rows(1)
    assert up == pytest.approx(_moe_up_bytes(8, 1), rel=1e-9)
    # 32 tokens: 256 x (1 - (1 - 8/256)^32) = 163.3 -> 163 experts, ceil(256 / 163) = 2 rows
    assert round(256 * (1 - (1 - 8 / 256) ** 32)) == 163
    up, _ = _moe_rows(32)
    assert up == pytest.approx(_moe_up_bytes(163, 2), rel=1e-9)
    # 4096 tokens: all 256 experts (miss probability (31/32)^4096 ~ e^-130), 4096 x 8 / 256 rows
    up, _ = _moe_rows(4096)
    assert up == pytest.approx(_moe_up_bytes(256, 128), rel=1e-9)


def test_moe_bytes_grow_monotonically_and_saturate() -> None:
    sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    totals = [sum(_moe_rows(t)) for t in sizes]
    assert all(a <= b for a, b in itertools.pairwise(totals))
    # Once all experts are touched only activation bytes grow: doubling 2048 -> 4096 tokens
    # adds far less than going 1 -> 2048 did (the weights are streamed once either way).
    assert totals[-1] - totals[-2] < 0.1 * (totals[-2] - totals[0])
    # Saturated weight bytes: 256 experts x 58 layers x (4096 + 2048) x 7168 FP8
    weights = 58 * 256 * (4096 * 7168 + 7168 * 2048) * FP8
    assert totals[-1] >= weights
    assert totals[-2] >= weights


# ---- 6. MLA latent vs GQA heads under TP -------------------------------------------------


def test_mla_kv_per_token_is_tp_invariant() -> None:
    arch = load_architecture("deepseek-v3")
    # 61 layers x (kv_lora_rank 512 + rope 64) x FP8: every rank caches the whole latent
    expected = 61 * (512 + 64) * FP8
    for tp in (1, 2, 4, 8):
        got = kv_bytes_per_token_per_gpu(arch, ParallelLayout(tensor_parallel=tp), "fp8")
        assert got == pytest.approx(expected, rel=1e-12)


def test_gqa_kv_per_token_halves_until_heads_run_out() -> None:
    arch = load_architecture("llama-3.1-70b")

    def per_token(tp: int) -> float:
        return kv_bytes_per_token_per_gpu(arch, ParallelLayout(tensor_parallel=tp), "bf16")

    # 80 layers x 2 (K, V) x heads on the rank x 128 x 2 bytes
    assert per_token(1) == 80 * 2 * 8 * 128 * 2 == 327_680
    assert per_token(2) == 163_840
    assert per_token(4) == 81_920
    assert per_token(8) == 40_960  # one KV head per rank
    assert per_token(16) == 40_960  # 8 heads < 16 ranks: replicated, no further saving
    assert per_token(32) == 40_960
    for tp, replicated in ((8, False), (16, True), (32, True)):
        budget = memory_budget(arch, H100, ParallelLayout(tensor_parallel=tp), Formats())
        assert budget.kv_heads_replicated is replicated


# ---- 7. communication ---------------------------------------------------------------------


def test_tp1_has_no_communication() -> None:
    model = StepModel(load_architecture("llama-3.1-8b"), H100, ParallelLayout(), Formats())
    step = model.cost(decode(32, 1024))
    assert not [o for o in step.ops if o.bound == "communication"]
    assert step.communication_s == 0.0


def test_attention_dp_without_tp_only_gathers() -> None:
    # DeepSeek-V3 tp=1 x attention_dp=8, ep=8: no all-reduce inside a 1-GPU TP group; per layer
    # the FFN group all-gathers the 64 tokens' hidden states and reduce-scatters them back.
    model = _model("dsv3-dp8-ep8")
    rows = _rows(model.cost(decode(64, 1024)))
    assert "tp_allreduce" not in rows
    act = 64 * 7168 * BF16  # 917,504 B gathered
    row = rows["dp_gather_scatter"]
    assert row.bytes == 61 * 2 * act
    # each: 7 us + 7/8 x 917,504 B / 300 GB/s = 9.68 us; x 2 x 61 layers = 1.18 ms
    assert row.time_s == pytest.approx(61 * 2 * (7e-6 + 7 / 8 * act / 300e9), rel=1e-12)


def test_allreduce_by_hand() -> None:
    # 1 MB over 8 H100s (one NVLink domain): 7 us + 2 x 7/8 x 1e6 B / 300 GB/s = 12.83 us
    t8 = allreduce_time_s(1e6, 8, H100)
    assert t8 == pytest.approx(7e-6 + 2 * 7 / 8 * 1e6 / 300e9, rel=1e-12)
    assert t8 == pytest.approx(12.833e-6, rel=1e-4)
    # 16 GPUs leave the 8-GPU domain: (7 + 16) us + 2 x 15/16 x 1e6 / (50 GB/s x 0.9) = 64.7 us
    t16 = allreduce_time_s(1e6, 16, H100)
    assert t16 == pytest.approx(23e-6 + 2 * 15 / 16 * 1e6 / 45e9, rel=1e-12)
    assert t16 > 4 * t8
    assert allreduce_time_s(1e6, 1, H100) == 0.0


# ---- 8. memory fit ------------------------------------------------------------------------


def test_405b_bf16_tp4_does_not_fit_h100() -> None:
    arch = load_architecture("llama-3.1-405b")
    layout = ParallelLayout(tensor_parallel=4)
    budget = memory_budget(arch, H100, layout, Formats())
    # 126 layers x (Q,O 2 x 16384 x 128 x 128 / 4 + K,V 2 x 16384 x 2 x 128
    #               + MLP 3 x 16384 x 53248 / 4) x 2 B = 200,823,275,520
    # + norms 253 x 16384 x 2 + embedding and head 2 x 128256 x 16384 / 4 x 2 = 202.93 GB
    per_layer = 2 * 16384 * 128 * 128 // 4 + 2 * 16384 * 2 * 128 + 3 * 16384 * 53248 // 4
    weights = 126 * per_layer * 2 + 253 * 16384 * 2 + 2 * 128256 * 16384 // 4 * 2
    assert weights == 202_932_912_128
    assert budget.weights_bytes_per_gpu == pytest.approx(weights, rel=1e-9)
    assert not budget.fits
    with pytest.raises(MemoryFitError) as info:
        require_fit(arch, H100, layout, Formats(), budget)
    msg = str(info.value)
    assert "needs 2" in msg and "86 GB" in msg  # 81,559 MiB = 85.5e9 bytes
    need = int(re.search(r"needs (\d+) GB", msg).group(1))
    assert 203 <= need <= 205


def test_deepseek_v3_fp8_fits_h200_not_h100() -> None:
    arch = load_architecture("deepseek-v3")
    layout = ParallelLayout(tensor_parallel=8)
    h200 = load_hardware("h200-sxm")
    fits = memory_budget(arch, h200, layout, FP8_ALL)
    assert fits.fits and fits.kv_capacity_tokens > 0
    require_fit(arch, h200, layout, FP8_ALL, fits)
    # ~671e9 params / 8 at ~1 byte = ~85 GB of weights per GPU > 77 GB usable of 85.5
    tight = memory_budget(arch, H100, layout, FP8_ALL)
    assert 80e9 < tight.weights_bytes_per_gpu < 90e9
    with pytest.raises(MemoryFitError, match="86 GB"):
        require_fit(arch, H100, layout, FP8_ALL, tight)


# ---- 9. fast path == full breakdown -------------------------------------------------------

COMBOS = {
    "llama70b-tp4-fp8": ("llama-3.1-70b", "h100-sxm", ParallelLayout(4), FP8_ALL),
    "llama8b-pp2-int4": ("llama-3.1-8b", "h100-sxm", ParallelLayout(1, 2), Formats("int4")),
    "dsv3-tp8-mla-moe": ("deepseek-v3", "h200-sxm", ParallelLayout(8), FP8_ALL),
    "dsv3-dp8-ep8": ("deepseek-v3", "h200-sxm", ParallelLayout(1, 1, 8, 8), FP8_ALL),
    "gptoss-sliding": ("gpt-oss-120b", "b200", ParallelLayout(2), Formats("mxfp4", "bf16", "fp8")),
    "mixtral-tp2-ep2": ("mixtral-8x7b", "h100-sxm", ParallelLayout(2, 1, 1, 2), Formats()),
    "qwen35-hybrid-dp2": ("qwen3.5-397b-a17b", "b200", ParallelLayout(4, 1, 2, 4), FP8_ALL),
}
_MODELS: dict[str, StepModel] = {}


def _model(key: str) -> StepModel:
    if key not in _MODELS:
        name, gpu, layout, formats = COMBOS[key]
        _MODELS[key] = StepModel(load_architecture(name), load_hardware(gpu), layout, formats)
    return _MODELS[key]


@st.composite
def batches(draw) -> BatchShape:
    chunks = draw(
        st.lists(st.tuples(st.integers(1, 4096), st.integers(0, 16384)), max_size=3)
    )
    finishing = draw(st.integers(0, len(chunks)))
    seqs = draw(st.integers(0, 512))
    ctx = draw(st.integers(0, 32768)) if seqs else 0
    b = BatchShape(
        prefill_tokens=sum(c for c, _ in chunks),
        prefill_seqs=len(chunks),
        prefill_attention_pairs=sum(prefill_pairs(c, p) for c, p in chunks),
        prefill_context_tokens=sum(p for _, p in chunks),
        prefill_sampled_seqs=finishing,
        decode_seqs=seqs,
        decode_context_tokens=seqs * ctx,
        speculative_tokens_per_seq=draw(st.integers(0, 3)) if seqs else 0,
    )
    if b.tokens == 0:
        b = dataclasses.replace(b, decode_seqs=1, decode_context_tokens=ctx)
    return b


@FAST
@given(key=st.sampled_from(sorted(COMBOS)), b=batches())
def test_fast_path_equals_breakdown(key: str, b: BatchShape) -> None:
    model = _model(key)
    step = model.cost(b)
    assert model.time_s(b) == pytest.approx(step.step_time_s, rel=1e-12)
    assert model.time_s(b) == pytest.approx(step.step_time_s, rel=1e-12)  # memoized twice
    total = step.compute_s + step.memory_s + step.communication_s + step.overhead_s
    assert step.step_time_s == pytest.approx(total, rel=1e-12)
    assert step.step_time_s == pytest.approx(sum(o.time_s for o in step.ops), rel=1e-12)


# ---- 10. monotonicity ---------------------------------------------------------------------

MONO = ("llama70b-tp4-fp8", "dsv3-tp8-mla-moe", "gptoss-sliding", "dsv3-dp8-ep8")


def _with_hw(key: str, **changes: object) -> StepModel:
    m = _model(key)
    return StepModel(m.arch, dataclasses.replace(m.hw, **changes), m.layout, m.formats)


@FAST
@given(key=st.sampled_from(MONO), b=batches(), factor=st.floats(1.0, 8.0))
def test_more_bandwidth_or_flops_never_slower(key: str, b: BatchShape, factor: float) -> None:
    base = _model(key)
    t = base.time_s(b)
    hw = base.hw
    faster_hbm = _with_hw(key, hbm_bytes_per_s=hw.hbm_bytes_per_s * factor)
    faster_tc = _with_hw(
        key, dense_flops_per_s={k: v * factor for k, v in hw.dense_flops_per_s.items()}
    )
    assert faster_hbm.time_s(b) <= t * (1 + 1e-12)
    assert faster_tc.time_s(b) <= t * (1 + 1e-12)


@FAST
@given(
    key=st.sampled_from(MONO),
    seqs=st.integers(1, 1024),
    more=st.integers(0, 1024),
    ctx=st.integers(0, 65536),
    longer=st.integers(0, 65536),
)
def test_bigger_batch_or_longer_context_never_faster(
    key: str, seqs: int, more: int, ctx: int, longer: int
) -> None:
    model = _model(key)
    t = model.time_s(decode(seqs, ctx))
    assert model.time_s(decode(seqs + more, ctx)) >= t * (1 - 1e-12)
    assert model.time_s(decode(seqs, ctx + longer)) >= t * (1 - 1e-12)


def test_decode_batch_sweep_is_monotone() -> None:
    # Exhaustive over the tile/expert-count boundaries (1..300 rows) for a dense and a MoE model.
    for key in ("llama70b-tp4-fp8", "dsv3-tp8-mla-moe", "mixtral-tp2-ep2"):
        model = _model(key)
        times = [model.time_s(decode(s, 1024)) for s in range(1, 301)]
        assert all(a <= b * (1 + 1e-12) for a, b in itertools.pairwise(times)), key


KV_FORMATS = ("bf16", "fp16", "fp8", "int8", "mxfp4", "nvfp4", "int4")
KV_MODELS = ("llama-3.1-8b", "llama-3.1-70b", "deepseek-v3", "gpt-oss-120b", "qwen3-235b-a22b")


@FAST
@given(
    name=st.sampled_from(KV_MODELS),
    tp=st.sampled_from([1, 2, 4, 8]),
    gpu=st.sampled_from(["h100-sxm", "h200-sxm", "b200"]),
    pair=st.tuples(st.sampled_from(KV_FORMATS), st.sampled_from(KV_FORMATS)),
)
def test_lower_precision_kv_never_lowers_capacity(
    name: str, tp: int, gpu: str, pair: tuple[str, str]
) -> None:
    arch, hw = load_architecture(name), load_hardware(gpu)
    small, big = sorted(pair, key=lambda f: get_format(f).bytes_per_element)
    layout = ParallelLayout(tensor_parallel=tp)
    lo = memory_budget(arch, hw, layout, Formats("fp8", "fp8", small))
    hi = memory_budget(arch, hw, layout, Formats("fp8", "fp8", big))
    assert lo.kv_bytes_per_token_per_gpu <= hi.kv_bytes_per_token_per_gpu
    assert lo.kv_capacity_tokens >= hi.kv_capacity_tokens
    if hi.fits:
        bits = get_format(big).bits_per_element / get_format(small).bits_per_element
        assert lo.kv_capacity_tokens >= math.floor(hi.kv_capacity_tokens * bits) - bits


def test_sliding_window_layers_hold_one_window_per_sequence() -> None:
    """gpt-oss-120b: 36 layers alternate 128-token sliding windows and full attention, 8 KV
    heads of 64 dims. Per cached token only the 18 full layers store K and V:
    18 x 2 x 8 x 64 = 18,432 elements; each running sequence holds at most one window in the
    18 sliding layers: 18 x 128 x 2 x 8 x 64 = 2,359,296 elements, reserved for max_num_seqs."""
    arch = load_architecture("gpt-oss-120b")
    hw = load_hardware("b200")
    layout, formats = ParallelLayout(), Formats("mxfp4", "fp8", "fp8")
    fp8 = get_format("fp8").bytes_per_element
    assert kv_bytes_per_token_per_gpu(arch, layout, "fp8") == pytest.approx(18_432 * fp8)
    budget = memory_budget(arch, hw, layout, formats, 0.9, 8192, 256)
    assert budget.window_reserve_bytes_per_gpu == pytest.approx(256 * 2_359_296 * fp8)
    fewer_seqs = memory_budget(arch, hw, layout, formats, 0.9, 8192, 64)
    assert fewer_seqs.kv_capacity_tokens > budget.kv_capacity_tokens


def test_trtllm_memory_fraction_is_of_free_memory() -> None:
    """vLLM: weights + activations + KV <= 0.9 x HBM. TensorRT-LLM: KV = 0.9 x (HBM - weights -
    activations). Llama-3.3-70B FP8 at TP1 on H200 (140.4 GiB = 150.8e9 bytes as CUDA reports
    it): with W + A bytes taken first, the TRT-LLM pool is 0.9 x (HBM - W - A) and the vLLM
    pool 0.9 x HBM - W - A; the difference is exactly 0.1 x (W + A)."""
    arch, hw = load_architecture("llama-3.3-70b"), load_hardware("h200-sxm")
    layout, formats = ParallelLayout(), Formats("fp8", "fp8", "fp8")
    total = memory_budget(arch, hw, layout, formats, 0.9, 8192, 256)
    free = memory_budget(arch, hw, layout, formats, 0.9, 8192, 256, fraction_of_free=True)
    taken = total.weights_bytes_per_gpu + total.activation_bytes_per_gpu
    assert free.kv_bytes_per_gpu == pytest.approx(0.9 * (140.4 * 2**30 - taken), rel=1e-12)
    assert free.kv_bytes_per_gpu - total.kv_bytes_per_gpu == pytest.approx(0.1 * taken, rel=1e-9)


def test_one_chunk_batch_fields() -> None:
    """A 100-token chunk after 300 cached tokens scores 100 x 300 + 100 x 101 / 2 = 35,050
    query-key pairs; an empty chunk leaves every prefill field at zero."""
    b = BatchShape.one_chunk(100, 300, decode_seqs=4, decode_context_tokens=4000)
    assert (b.prefill_tokens, b.prefill_seqs, b.prefill_context_tokens) == (100, 1, 300)
    assert b.prefill_attention_pairs == 35_050 and b.prefill_sampled_seqs == 1
    assert b.tokens == 104 and b.sampled_rows == 5
    assert BatchShape.one_chunk(100, 300, completes_prompt=False).prefill_sampled_seqs == 0
    empty_chunk = BatchShape.one_chunk(0, 300, 2, 10)
    assert empty_chunk == BatchShape(decode_seqs=2, decode_context_tokens=10)


@pytest.mark.parametrize(
    ("model", "layout"),
    [
        ("llama-3.1-8b", ParallelLayout()),
        ("gpt-oss-120b", ParallelLayout(tensor_parallel=2)),  # sliding-window layers
        ("qwen3-235b-a22b", ParallelLayout(tensor_parallel=8)),
        ("deepseek-v3", ParallelLayout(tensor_parallel=8)),  # MLA
        ("glm-5", ParallelLayout(tensor_parallel=8, expert_parallel=8)),  # MLA + DSA indexer
        ("qwen3.5-397b-a17b", ParallelLayout(tensor_parallel=4)),  # Gated DeltaNet hybrid
    ],
)
def test_decode_step_times_float_by_float_are_the_vectorized_floats(
    model: str, layout: ParallelLayout
) -> None:
    """The serving engine costs short decode runs float by float and long ones with numpy;
    a run's clock must not depend on which: the floats are equal, bit for bit."""
    import numpy as np

    m = StepModel(load_architecture(model), load_hardware("h200-sxm"), layout, Formats())
    for n, kv, steps in ((1, 100, 5), (37, 41_000, 40), (256, 1_000_003, 64)):
        vector = m.decode_times_s(n, kv + n * np.arange(steps, dtype=np.float64)).tolist()
        assert m.decode_step_times_s(n, kv, steps) == vector
        assert vector[0] == m.time_s(BatchShape(decode_seqs=n, decode_context_tokens=kv))
