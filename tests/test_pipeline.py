"""Pipeline parallelism with micro-batches in flight, and layouts beyond one NVLink domain."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.api import simulate
from simulator.cost import Formats, ParallelLayout, StepModel
from simulator.cost.comm import stage_boundary_crosses
from simulator.cost.moe_routing import expected_max_binomial
from simulator.cost.pipeline import stage_layers, stage_times
from simulator.cost.shape import BatchShape
from simulator.engines.style import load_engine_styles
from simulator.hardware.profile import load_hardware
from simulator.model.load import load_architecture
from simulator.model.precision import get_format

FP8 = Formats("fp8", "fp8", "fp8")


def scenario(
    tp: int, pp: int, concurrency: int, n: int, gpu: str = "h100-sxm", nodes: int = 1
) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "name": "pp",
        "model": "llama-3.3-70b",
        "hardware": {"gpu": gpu, "gpus_per_node": 8, "nodes": nodes},
        "deployment": {
            "tensor_parallel": tp,
            "pipeline_parallel": pp,
            "precision": {"weights": "fp8", "activations": "fp8", "kv_cache": "fp8"},
            "scheduler": {"max_num_seqs": 256, "max_num_batched_tokens": 8192},
        },
        "workload": {
            "arrival": {"kind": "closed_loop", "concurrency": concurrency},
            "input_tokens": {"kind": "fixed", "value": 1000},
            "output_tokens": {"kind": "fixed", "value": 200},
            "num_requests": n,
            "seed": 0,
        },
    }


def model(tp: int, pp: int, gpu: str = "h100-sxm") -> StepModel:
    return StepModel(
        load_architecture("llama-3.3-70b"), load_hardware(gpu), ParallelLayout(tp, pp), FP8
    )


def test_layer_split_follows_vllm() -> None:
    # 80 // 3 = 26 each, the 2 left over to the stages before the last: 27, 27, 26.
    assert stage_layers(80, 3) == [27, 27, 26]
    assert stage_layers(61, 2) == [31, 30]
    assert stage_layers(94, 4) == [23, 24, 24, 23]


def test_stages_and_sends_sum_to_one_micro_batch_latency() -> None:
    m = model(2, 3)
    b = BatchShape(decode_seqs=64, decode_context_tokens=64 * 1500)
    st = stage_times(m, b)
    assert st.latency_s == pytest.approx(m.time_s(b), rel=1e-12)
    # Stage imbalance: 27 vs 26 layers of the same per-layer work, plus the LM head on the last.
    assert st.stages_s[0] > st.stages_s[2] - sum(o.time_s for o in m.head_ops(64))
    assert len(st.hops_s) == 2


def test_batch_one_latency_is_the_sum_of_stages() -> None:
    # One request alone: each decode step walks both stages in turn, so TPOT = stage 0 (with
    # the host's per-step work, vLLM style: host + GPU serial) + send + stage 1.
    r = simulate(scenario(4, 2, 1, 1), check=True)
    m = model(4, 2)
    st = stage_times(m, BatchShape(decode_seqs=1, decode_context_tokens=1100))
    style = load_engine_styles()["vllm"]
    step = style.step_time_s(st.stages_s[0], 1) + st.hops_s[0] + st.stages_s[1]
    assert r.summary["tpot_s"]["p50"] == pytest.approx(step, rel=0.01)


def test_high_load_throughput_approaches_twice_one_stage_minus_bubbles() -> None:
    # PP2 × TP4 holds two micro-batch slots, each the size of one TP4 replica's batch
    # (half the layers per GPU, so each slot's half of the KV pool holds as many tokens).
    # With both slots busy the stages overlap: throughput -> 2 × (1 - bubble share) × TP4's.
    one = simulate(scenario(4, 1, 512, 2048)).summary
    two = simulate(scenario(4, 2, 512, 2048), check=True).summary
    ratio = two["output_tokens_per_s"] / one["output_tokens_per_s"]
    bubble = two["pipeline"]["bubble_share"]
    assert 1.8 < ratio < 2.0
    assert ratio == pytest.approx(2 * (1 - bubble), abs=0.05)
    assert two["pipeline"]["layers_per_stage"] == [40, 40]
    # Alone, one micro-batch keeps one stage of two busy at a time: half the time is bubble.
    alone = simulate(scenario(4, 2, 1, 1)).summary["pipeline"]
    assert alone["bubble_share"] == pytest.approx(0.5, abs=0.02)


def test_only_boundaries_between_nodes_cross_the_domain() -> None:
    hw = load_hardware("h100-sxm")  # 8 GPUs per NVLink domain
    # PP4 × TP4 on 16 GPUs: stages on GPUs 0-3, 4-7 | 8-11, 12-15: only boundary 1 crosses.
    assert [stage_boundary_crosses(s, 4, hw) for s in range(3)] == [False, True, False]


def test_tp16_over_two_nodes_pays_the_scale_out_all_reduce() -> None:
    hw = load_hardware("h100-sxm")
    arch = load_architecture("llama-3.3-70b")
    m8, m16 = model(8, 1), model(16, 1)
    b = BatchShape(decode_seqs=1, decode_context_tokens=1100)
    ar = {m: next(o for o in mm.cost(b).ops if o.op == "tp_allreduce").time_s
          for m, mm in (("8", m8), ("16", m16))}
    # Hand: 2 all-reduces per layer of 1 token × 8192 × 2 bytes = 16384 B.
    # TP8 (NVLink): 160 × (7 us + 2·7/8·16384 / 300e9) ; TP16 leaves the 8-GPU domain:
    # 160 × (7 + 16 us + 2·15/16·16384 / (50e9 × 0.9)).
    nbytes = arch.hidden_size * 2
    L2 = 2 * arch.num_layers
    tp8 = L2 * (hw.allreduce_latency_s + 2 * 7 / 8 * nbytes / hw.allreduce_bus_bytes_per_s)
    so_bw = hw.scale_out_bytes_per_s * hw.scale_out_fraction
    tp16 = L2 * (hw.allreduce_latency_s + hw.scale_out_latency_s + 2 * 15 / 16 * nbytes / so_bw)
    assert ar["8"] == pytest.approx(tp8, rel=1e-9)
    assert ar["16"] == pytest.approx(tp16, rel=1e-9)
    # Per token TP16 halves the GEMM work but pays the scale-out collectives: slower overall.
    assert m16.time_s(b) > m8.time_s(b)
    assert m16.time_s(b) - m8.time_s(b) < ar["16"] - ar["8"]
    t8 = simulate(scenario(8, 1, 1, 2)).summary["tpot_s"]["p50"]
    t16 = simulate(scenario(16, 1, 1, 2, nodes=2)).summary["tpot_s"]["p50"]
    assert t16 > t8


def test_gb200_nvl72_keeps_tp16_in_one_domain() -> None:
    m = model(16, 1, "gb200")
    hw = m.hw
    b = BatchShape(decode_seqs=1, decode_context_tokens=1100)
    ar = next(o for o in m.cost(b).ops if o.op == "tp_allreduce").time_s
    nbytes = m.arch.hidden_size * 2
    hand = 2 * m.arch.num_layers * (
        hw.allreduce_latency_s + 2 * 15 / 16 * nbytes / hw.allreduce_bus_bytes_per_s
    )
    assert ar == pytest.approx(hand, rel=1e-9)


def test_ep16_over_two_nodes_pays_the_scale_out_all_to_all() -> None:
    # DeepSeek-R1, attention-DP16 + EP16 with an all-to-all dispatch (DeepEP-style) on two
    # 8-GPU H100 nodes, 16 tokens (one per rank): each GPU dispatches 16/16 × 8 experts × 7168
    # hidden = 57344 elements (FP8) and combines them back in BF16, per MoE layer, over the NIC
    # since 16 > the 8-GPU domain. The busiest GPU receives more than the mean 8 pairs:
    # 128 pairs on 16 GPUs, E[max of 16 Binomial(128, 1/16)] (tests/test_moe_scatter.py).
    arch = load_architecture("deepseek-r1")
    hw = load_hardware("h100-sxm")
    m = StepModel(arch, hw, ParallelLayout(1, 1, 16, 16, moe_all_to_all=True), FP8)
    assert arch.moe is not None
    row = next(o for o in m.cost(BatchShape(decode_seqs=16, decode_context_tokens=16_000)).ops
               if o.op == "ep_alltoall")
    busiest = expected_max_binomial(16 * arch.moe.experts_per_token, 1 / 16, 16)
    assert 12 < busiest < 14
    sent = 16 / 16 * arch.moe.experts_per_token * arch.hidden_size * busiest / 8
    lat = hw.alltoall_latency_s + hw.scale_out_latency_s
    bw = hw.scale_out_bytes_per_s * hw.scale_out_fraction
    fp8_bytes = get_format("fp8").bytes_per_element  # 1 byte plus its block scales
    hand = arch.num_moe_layers * (2 * lat + 15 / 16 * sent * (fp8_bytes + 2) / bw)
    assert row.time_s == pytest.approx(hand, rel=1e-9)
