"""The MoE expert block on Blackwell against whole-block kernel rows (tests/data/
moe_block_rows.csv: flashinfer PR #5301's TRTLLM DeepSeek-V3 MoE on a B300, 8 TB/s as B200),
and hand-derived cases of the grouped streaming rate and the block's fixed latency."""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path

import pytest

from simulator.cost import StepModel
from simulator.cost.gemm import gemm_rates
from simulator.cost.kernels import Kernels
from simulator.cost.layout import Formats, ParallelLayout
from simulator.cost.shape import BatchShape
from simulator.hardware.profile import load_hardware
from simulator.model.load import load_architecture
from simulator.model.precision import BF16_BYTES

ROWS = Path(__file__).parent / "data" / "moe_block_rows.csv"
B200 = load_hardware("b200")
H100 = load_hardware("h100-sxm")
R1 = load_architecture("deepseek-r1")
# The benchmark's DeepSeek-V3 MoE: hidden 7168, expert intermediate 2048, 32 local experts
# (EP8 of 256), top-8: on average one routed pair per token lands on this GPU's experts.
HIDDEN, INTER = 7168, 2048


def _block_s(weights: str, tokens: int, active: int) -> float:
    """One layer's expert path as ffn_ops costs it, at the row's measured active experts:
    both grouped GEMMs, the permute/activation passes and the block's fixed latency."""
    fmt = Formats(weights, "bf16" if weights == "bf16" else weights, "fp8")
    k = Kernels(R1, B200, ParallelLayout(), fmt)
    m = math.ceil(tokens / active)
    t = k.gemm("up_gate", m, 2 * INTER, HIDDEN, 1, groups=active).time_s
    t += k.gemm("down", m, HIDDEN, INTER, 1, groups=active).time_s
    t += k.elementwise("permute", tokens * (2 * HIDDEN + 3 * INTER) * BF16_BYTES, 3).time_s
    fixed = k.moe_block_fixed(1)
    assert fixed is not None
    return t + fixed.time_s


def _errors() -> list[tuple[str, float]]:
    out = []
    with ROWS.open() as f:
        for row in csv.DictReader(f):
            tokens, active = int(row["tokens"]), int(row["active_experts"])
            t = _block_s(row["weights"], tokens, active)
            out.append((f"{row['kernel']} T={tokens}", t / (float(row["measured_us"]) * 1e-6) - 1))
    return out


def test_block_fits_the_moe_rows() -> None:
    errors = _errors()
    assert len(errors) == 30
    absolute = sorted(abs(e) for _, e in errors)
    # Measured here: median 6.9%, p90 13.0%, worst +33% (NVFP4 at one token, where the
    # block's fixed part is smaller than at 4-512 tokens). Without the fixed 20 us and at the
    # former 0.60 (0.55 for FP4) streaming the same rows sat at -50%..+45%.
    assert statistics.median(absolute) <= 0.08
    assert absolute[int(0.9 * len(absolute))] <= 0.15
    at_four_or_more = [abs(e) for label, e in errors if int(label.split("T=")[1]) >= 4]
    assert max(at_four_or_more) <= 0.16


def test_grouped_streaming_and_block_fixed_hand_derived() -> None:
    # B200 grouped kernels stream at 0.80 x 8 TB/s = 6.4 TB/s whatever their format class
    # (FP8 and FP4 alike); a weight-only grouped kernel on H100 keeps its own class's rate
    # (min of the weight-only and grouped fractions: 0.80 x 3.35 TB/s).
    for fmt in ("fp8", "fp4", "bf16"):
        rates = gemm_rates(B200, fmt, True, 2, grouped=True)
        assert rates.hbm_bytes_per_s == pytest.approx(6.4e12)
    dense_fp4 = gemm_rates(B200, "fp4", True, 2, grouped=False)
    assert dense_fp4.hbm_bytes_per_s == pytest.approx(0.55 * 8e12)
    weight_only = gemm_rates(H100, "bf16", False, 2, grouped=True)
    assert weight_only.hbm_bytes_per_s == pytest.approx(0.80 * 3.35e12)
    assert weight_only.launch_fixed_s == pytest.approx(12.6e-6)
    # The block's fixed latency: DeepSeek-R1 has 58 MoE layers -> 58 x 20 us = 1.16 ms per
    # step on B200, one row of the step; none on H100 (its rows need none).
    lay, fmt = ParallelLayout(tensor_parallel=8), Formats("fp8", "fp8", "fp8")
    ops = {o.op: o for o in StepModel(R1, B200, lay, fmt).token_ops(4)}
    assert ops["moe_block_fixed"].time_s == pytest.approx(58 * 20e-6)
    assert ops["moe_block_fixed"].launch_s == ops["moe_block_fixed"].time_s  # overhead
    assert "moe_block_fixed" not in {o.op for o in StepModel(R1, H100, lay, fmt).token_ops(4)}


def test_block_fixed_counts_as_overhead_in_the_step() -> None:
    step = StepModel(R1, B200, ParallelLayout(tensor_parallel=8), Formats("fp8", "fp8", "fp8"))
    b = BatchShape(decode_seqs=4, decode_context_tokens=6000)
    cost = step.cost(b)
    fixed = next(o for o in cost.ops if o.op == "moe_block_fixed")
    assert cost.overhead_s >= fixed.time_s
    assert cost.step_time_s == pytest.approx(step.time_s(b))
