"""MiniMax-M2's q/k RMSNorm over all heads (qk_norm_type "per_layer"): under tensor parallelism
each rank holds some heads, so every layer all-reduces the norms' sums of squares across the
TP group before attention (vLLM MiniMaxText01RMSNormTP). Hand-derived from the comm model."""

from __future__ import annotations

import pytest

from simulator.cost import BatchShape, Formats, ParallelLayout, StepModel
from simulator.cost.comm import allreduce_time_s
from simulator.hardware.profile import load_hardware
from simulator.model.load import load_architecture

B200 = load_hardware("b200")
MINIMAX = load_architecture("minimax-m2.5")


def _row(arch_name: str, layout: ParallelLayout, seqs: int) -> float | None:
    model = StepModel(load_architecture(arch_name), B200, layout, Formats("fp8", "fp8", "bf16"))
    batch = BatchShape(decode_seqs=seqs, decode_context_tokens=seqs * 1536)
    rows = [o for o in model.cost(batch).ops if o.op == "qk_norm_allreduce"]
    return rows[0].time_s if rows else None


def test_parsed_from_the_hf_config() -> None:
    # minimax-m2.5.json: "use_qk_norm": true, "qk_norm_type": "per_layer"
    assert MINIMAX.qk_norm_across_heads
    assert not load_architecture("qwen3-32b").qk_norm_across_heads  # per-head q/k norm


def test_two_small_allreduces_per_layer_at_tp4() -> None:
    """4 sequences at TP 4: per layer, q's and k's sums of squares, 4 tokens x 4 B = 16 B
    each, all-reduced over 4 GPUs: latency + 2 x 3/4 x 16 B / bus bandwidth, x 2 x 62 layers
    (0.74 ms on B200, where latency dominates)."""
    got = _row("minimax-m2.5", ParallelLayout(4), 4)
    assert MINIMAX.num_layers == 62
    want = 2 * 62 * allreduce_time_s(4 * 4.0, 4, B200)
    assert got == pytest.approx(want, rel=1e-12)
    assert got == pytest.approx(124 * B200.allreduce_latency_s, rel=0.01)


def test_no_row_on_one_gpu_or_per_head_norms() -> None:
    assert _row("minimax-m2.5", ParallelLayout(1), 4) is None
    assert _row("qwen3-32b", ParallelLayout(4), 4) is None
