"""An engine style's fp4_gemm_split_k: whether its dense block-scaled FP4 GEMMs split K when a
launch has fewer output tiles than SMs (TensorRT-LLM autotunes its NVFP4 tactic per shape),
replacing the GPU profile's gemm_classes.fp4_block_scaled.split_k (serving/engine_build.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import simulator
from simulator.cost.gemm import gemm_kernel_s, gemm_rates
from simulator.engines.style import engine_style
from simulator.hardware.profile import load_hardware
from simulator.serving.engine_hardware import with_engine_fp4_gemms


def test_styles_say_which_engines_split_fp4_k() -> None:
    assert engine_style("trtllm").fp4_gemm_split_k is True
    assert engine_style("vllm").fp4_gemm_split_k is None  # the profile's: fixed CUTLASS tiles
    assert engine_style("sglang").fp4_gemm_split_k is None


def test_a_decode_gemm_of_few_tiles_splits_its_k_loop() -> None:
    """Llama-3.1-70B's down projection at TP 1 on B200, 4 rows: M 4, N 8192, K 28672, NVFP4.
    The FP4 class pads M to 128 and tiles N by 128: 64 tiles for 148 SMs. Unsplit, each CTA
    runs its tile's whole K loop alone (compute + memory); split, K divides by
    min(148 // 64, 28672 // 256) = 2 and compute and streaming overlap (the larger).
    Main loop: 2 x 128 x 128 x 28672 = 939.5 MFLOP a tile at 0.56 x the FP4 peak / 148 SMs."""
    hw = load_hardware("b200")
    fp4 = hw.gemm_classes.fp4_block_scaled  # type: ignore[union-attr]
    assert fp4 is not None and fp4.split_k is False
    m, n, k = 4, 8192, 28672
    weight_bytes = 4.5 / 8  # NVFP4: 4 bits and an FP8 scale per 16 elements
    unsplit_rates = gemm_rates(hw, "fp4")
    per_sm = unsplit_rates.flops_per_s / hw.sm_count
    tile_s = 2 * 128 * 128 * k / per_sm + unsplit_rates.tile_fixed_s
    memory_s = (n * k * weight_bytes + m * k * weight_bytes + m * n * 2) / (
        unsplit_rates.hbm_bytes_per_s)
    unsplit = gemm_kernel_s(hw, unsplit_rates, m, n, k, 1, weight_bytes, weight_bytes)
    assert unsplit.serial and unsplit.time_s == pytest.approx(tile_s + memory_s, rel=1e-9)

    split_hw = with_engine_fp4_gemms(hw, True)
    split_rates = gemm_rates(split_hw, "fp4")
    split = gemm_kernel_s(split_hw, split_rates, m, n, k, 1, weight_bytes, weight_bytes)
    half_tile_s = 2 * 128 * 128 * (k // 2) / per_sm + split_rates.tile_fixed_s
    assert not split.serial
    assert split.time_s == pytest.approx(max(half_tile_s, memory_s), rel=1e-9)
    assert split.time_s < 0.6 * unsplit.time_s
    # MoE expert GEMMs keep the class's unsplit tiles (their grouped kernels are another path)
    assert gemm_rates(split_hw, "fp4", rows_per_group=1, grouped=True).split_k is False
    # the other classes and every other profile value are untouched
    assert dataclasses.replace(split_hw, gemm_classes=hw.gemm_classes) == hw
    assert with_engine_fp4_gemms(hw, None) is hw and with_engine_fp4_gemms(hw, False) is hw


def _llama70b_b200(engine: str, weights: str) -> dict[str, Any]:
    fmt = {"nvfp4": ("nvfp4", "nvfp4", "fp8"), "fp8": ("fp8", "fp8", "fp8")}[weights]
    return {
        "model": "llama-3.1-70b",
        "hardware": {"gpu": "b200", "gpus_per_node": 8, "nodes": 1},
        "deployment": {"kind": "aggregated", "tensor_parallel": 1, "engine": engine,
                       "precision": dict(zip(("weights", "activations", "kv_cache"), fmt,
                                             strict=True))},
        "workload": {"arrival": {"kind": "closed_loop", "concurrency": 4},
                     "input_tokens": {"kind": "fixed", "value": 1024},
                     "output_tokens": {"kind": "fixed", "value": 1024},
                     "num_requests": 40, "seed": 0},
    }


def test_trtllm_decodes_nvfp4_faster_than_fp8_as_its_runs_do() -> None:
    """The calibration file's Llama-3.1-70B TensorRT-LLM runs on one B200 at 4 clients: NVFP4's
    TPOT is 0.86 of FP8's (12 pairs of the same lengths and load). With split-K FP4 GEMMs the
    estimate's decode step orders them so; vLLM's (the profile's unsplit tiles) does not
    split, and its FP8 step is unchanged by the key."""
    step: dict[tuple[str, str], float] = {}
    for engine in ("trtllm", "vllm"):
        for weights in ("nvfp4", "fp8"):
            est = simulator.estimate(simulator.load_scenario(_llama70b_b200(engine, weights)))
            step[engine, weights] = est.tpot_p50_s
    assert step["trtllm", "nvfp4"] < 0.95 * step["trtllm", "fp8"]
    assert step["vllm", "nvfp4"] > step["trtllm", "nvfp4"]
