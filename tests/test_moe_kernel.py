"""deployment.moe_kernel: a fused MoE (one grouped GEMM over the tokens routed to each expert)
against unfused experts (each expert its own MLP over every token of the step, masked by its
routing weight: vLLM's Mixtral before the fused kernel of PR #2542)."""

from __future__ import annotations

from typing import Any

import pytest

import simulator
from simulator.cost import BatchShape, Formats, ParallelLayout, StepModel
from simulator.errors import InputError
from simulator.hardware.profile import load_hardware
from simulator.model.load import load_architecture

ONE_REQUEST = {"arrival": {"kind": "offline"}, "num_requests": 1,
               "input_tokens": {"kind": "fixed", "value": 100},
               "output_tokens": {"kind": "fixed", "value": 10}}
EXPERT_ROWS = ("moe_experts_up_gate", "moe_experts_down")


def _rows(unfused: bool, batch: BatchShape) -> tuple[float, float]:
    """(HBM bytes, FLOPs) of the routed-expert GEMM rows, Mixtral-8x7B on 2 x H100, BF16."""
    model = StepModel(load_architecture("mixtral-8x7b"), load_hardware("h100-sxm"),
                      ParallelLayout(2), Formats(), moe_unfused=unfused)
    ops = [o for o in model.cost(batch).ops if o.op in EXPERT_ROWS]
    return sum(o.bytes for o in ops), sum(o.flops for o in ops)


def test_unfused_decode_reads_every_expert() -> None:
    """One decode token picks 2 of Mixtral's 8 experts. An expert's weights are 3 x 4096 x
    14336 = 176.2 M parameters, split over TP 2, 2 bytes each, 32 layers:
    fused reads the 2 touched experts, 2 x 176.2e6 / 2 x 2 x 32 = 11.27 GB a step per GPU;
    unfused reads all 8, 45.1 GB: 4x (activations add a few kB)."""
    fused_b, _ = _rows(False, BatchShape(decode_seqs=1, decode_context_tokens=1000))
    unfused_b, _ = _rows(True, BatchShape(decode_seqs=1, decode_context_tokens=1000))
    expert = 3 * 4096 * 14336
    assert fused_b == pytest.approx(2 * expert / 2 * 2 * 32, rel=1e-3)
    assert unfused_b == pytest.approx(8 * expert / 2 * 2 * 32, rel=1e-3)


def test_unfused_prefill_computes_every_expert_on_every_token() -> None:
    """A 4,096-token chunk touches every expert either way (same weight bytes), but each token
    is computed by 8 experts instead of its 2: 8 / 2 = 4x the FLOPs, 2 x 176.2 M x 4,096 x 8
    / 2 per layer per GPU."""
    fused_b, fused_f = _rows(False, BatchShape.one_chunk(4096))
    unfused_b, unfused_f = _rows(True, BatchShape.one_chunk(4096))
    assert unfused_f / fused_f == pytest.approx(4.0, rel=1e-3)
    assert unfused_f == pytest.approx(2 * 3 * 4096 * 14336 * 4096 * 8 / 2 * 32, rel=1e-3)
    weights = 8 * 3 * 4096 * 14336 / 2 * 2 * 32
    assert fused_b > weights and unfused_b > weights  # weights plus the tokens' activations


def _latency_s(batch: int, kernel: str) -> float:
    """vLLM's benchmark_latency of PR #2542: `batch` prompts of 1,000 tokens, 50 outputs each,
    all at once, Mixtral-8x7B, BF16, TP 8 on H100."""
    s: dict[str, Any] = {
        "schema_version": 1, "name": "pr-2542", "model": "mixtral-8x7b",
        "hardware": {"gpu": "h100-sxm", "gpus_per_node": 8},
        "deployment": {"tensor_parallel": 8, "moe_kernel": kernel,
                       "scheduler": {"max_num_batched_tokens": 32768}},
        "workload": {"arrival": {"kind": "offline"},
                     "input_tokens": {"kind": "fixed", "value": 1000},
                     "output_tokens": {"kind": "fixed", "value": 50}, "num_requests": batch},
    }
    return float(simulator.simulate(simulator.load_scenario(s)).to_dict()["duration_s"])


# vLLM PR #2542 (github.com/vllm-project/vllm/pull/2542, Jan 2024), benchmark_latency on H100:
# master (unfused experts) against the PR (fused MoE), seconds. Its absolute times carry 2024's
# host overhead (0.46 s for 50 steps at batch 1), so the test compares what the fused kernel
# removes, the difference, which is the experts' own work.
PR_2542_S = {1: (0.590, 0.459), 2: (0.631, 0.515), 4: (0.709, 0.610)}


@pytest.mark.parametrize("batch", sorted(PR_2542_S))
def test_the_gap_matches_vllm_pr_2542_at_small_batch(batch: int) -> None:
    """At batch 1-4 decode reads 8 experts against the 2-4 touched, and the measured gap is
    0.131, 0.116, 0.099 s; the model's is 0.168, 0.132, 0.134 s with no fitted figure, so the
    tolerance is 40 %. From batch 8 the measured gap shrinks to 0.025 s while the model keeps
    the 4x FLOPs of the dense prefill (0.14 s): not asserted, said in docs/scenarios.md."""
    unfused_s, fused_s = PR_2542_S[batch]
    gap = _latency_s(batch, "unfused") - _latency_s(batch, "fused")
    assert gap == pytest.approx(unfused_s - fused_s, rel=0.40)


def test_a_dense_model_is_refused() -> None:
    s: dict[str, Any] = {
        "schema_version": 1, "name": "x", "model": "llama-3.1-8b",
        "hardware": {"gpu": "h100-sxm"}, "deployment": {"moe_kernel": "unfused"},
        "workload": ONE_REQUEST,
    }
    with pytest.raises(InputError, match=r"llama-3\.1-8b has none"):
        simulator.load_scenario(s)


def test_unfused_with_all_to_all_dispatch_is_refused() -> None:
    s: dict[str, Any] = {
        "schema_version": 1, "name": "x", "model": "qwen3-235b-a22b",
        "hardware": {"gpu": "h200-sxm", "gpus_per_node": 8},
        "deployment": {"tensor_parallel": 1, "attention_data_parallel": 8, "expert_parallel": 8,
                       "moe_dispatch": "all_to_all", "moe_kernel": "unfused"},
        "workload": ONE_REQUEST,
    }
    with pytest.raises(InputError, match="moe_kernel unfused runs every expert"):
        simulator.load_scenario(s)
