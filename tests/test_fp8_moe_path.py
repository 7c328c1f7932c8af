"""An engine's FP8 MoE expert path: a fixed time per MoE layer that an engine style's
moe_fp8_block_fixed_us (or a deployment overhead's moe_fp8_block_fixed_s) adds to the GPU
profile's grouped block for FP8 expert weights (serving/engine_hardware.py), and
`frontier calibrate --fit moe`, which fits it per engine style to measured runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator.cost.shape import BatchShape
from simulator.engines.style import engine_style
from simulator.hardware.profile import load_hardware
from simulator.inputs.deployment import Overhead
from simulator.model.load import load_architecture
from tests.test_calibrate import _row, fit_one_kind

STYLE_KEY = "moe_fp8_block_fixed_us"


def _scenario(model: str, weights: str, overhead: dict[str, float] | None = None,
              engine: str = "vllm") -> dict[str, Any]:
    fmt = {"fp8": ("fp8", "fp8", "fp8"), "nvfp4": ("nvfp4", "nvfp4", "fp8"),
           "bf16": ("bf16", "bf16", "bf16")}[weights]
    dep: dict[str, Any] = {"kind": "aggregated", "tensor_parallel": 4, "engine": engine,
                           "precision": dict(zip(("weights", "activations", "kv_cache"), fmt,
                                                 strict=True))}
    if overhead is not None:
        dep["overhead"] = overhead
    return {"model": model, "hardware": {"gpu": "b200", "gpus_per_node": 8, "nodes": 1},
            "deployment": dep,
            "workload": {"arrival": {"kind": "closed_loop", "concurrency": 4},
                         "input_tokens": {"kind": "fixed", "value": 1024},
                         "output_tokens": {"kind": "fixed", "value": 256},
                         "num_requests": 8, "seed": 0}}


def _decode_step_s(data: dict[str, Any]) -> float:
    from simulator.inputs.scenario import load_scenario_file
    from simulator.serving.engine_build import build_engine

    scenario, _ = load_scenario_file(data)
    engine = build_engine(scenario)
    return engine.step_model.time_s(BatchShape(decode_seqs=4, decode_context_tokens=4 * 1500))


def test_a_decode_step_pays_the_fixed_time_once_per_moe_layer() -> None:
    """MiniMax-M2.5 (62 layers, every one MoE) in FP8 on four B200 under vLLM: with the
    overhead at 30 us a layer against 0, a decode step of 4 sequences takes 62 x 30 us =
    1.86 ms more, whatever else the step costs (the time is overhead, outside the roofline)."""
    assert load_architecture("minimax-m2.5").num_moe_layers == 62
    off = _decode_step_s(_scenario("minimax-m2.5", "fp8", {"moe_fp8_block_fixed_s": 0.0}))
    on = _decode_step_s(_scenario("minimax-m2.5", "fp8", {"moe_fp8_block_fixed_s": 30e-6}))
    assert on - off == pytest.approx(62 * 30e-6, rel=1e-9)


def test_only_fp8_experts_pay_it() -> None:
    """NVFP4 and BF16 experts run other kernels (the profile's grouped block alone), and a
    dense model has no MoE layer: the overhead changes none of their steps."""
    for model, weights in (("minimax-m2.5", "nvfp4"), ("minimax-m2.5", "bf16"),
                           ("llama-3.1-70b", "fp8")):
        off = _decode_step_s(_scenario(model, weights, {"moe_fp8_block_fixed_s": 0.0}))
        on = _decode_step_s(_scenario(model, weights, {"moe_fp8_block_fixed_s": 30e-6}))
        assert on == off, (model, weights)


def test_the_style_sets_it_and_the_deployment_overrides_it() -> None:
    """The shipped styles carry the fitted values (engine_styles.yaml); a deployment's
    overhead replaces its style's, and an overhead of other keys keeps the style's."""
    from simulator.serving.engine_hardware import with_engine_fp8_moe

    shipped = {name: engine_style(name).moe_fp8_block_fixed_s for name in
               ("vllm", "sglang", "trtllm")}
    assert all(0 < s < 200e-6 for s in shipped.values()), shipped
    hw = load_hardware("b200")
    arch = load_architecture("minimax-m2.5")
    base = hw.gemm_classes.moe_block_fixed_s  # type: ignore[union-attr]
    got = with_engine_fp8_moe(hw, arch, "fp8", 30e-6, None)
    assert got.gemm_classes.moe_block_fixed_s == pytest.approx(base + 30e-6)  # type: ignore[union-attr]
    over = with_engine_fp8_moe(hw, arch, "fp8", 30e-6, Overhead(moe_fp8_block_fixed_s=5e-6))
    assert over.gemm_classes.moe_block_fixed_s == pytest.approx(base + 5e-6)  # type: ignore[union-attr]
    other = with_engine_fp8_moe(hw, arch, "fp8", 30e-6, Overhead(step_s=1e-3))
    assert other == got
    # every other profile value is untouched; no change for other formats or dense models
    assert dataclasses.replace(got, gemm_classes=hw.gemm_classes) == hw
    assert with_engine_fp8_moe(hw, arch, "nvfp4", 30e-6, None) is hw
    assert with_engine_fp8_moe(hw, load_architecture("llama-3.1-70b"), "fp8", 30e-6, None) is hw


def test_the_shipped_value_moves_the_estimate_as_the_measured_gap_says() -> None:
    """The calibration file's MiniMax-M2.5 vLLM 0.19.0 runs on four B200, 1024 in and out, 4
    clients: FP8 TPOT 8.0-8.4 ms, NVFP4 5.9 ms. With vLLM's fitted FP8 path the estimate
    orders them so (before it, FP8 came out faster than NVFP4: 6.2 against 6.4 ms)."""
    import simulator

    tpot = {w: simulator.estimate(simulator.load_scenario(_scenario("minimax-m2.5", w)))
            .tpot_p50_s for w in ("fp8", "nvfp4")}
    assert tpot["fp8"] > 1.15 * tpot["nvfp4"]


def _moe_row(i: int, tp: int, conc: int, isl: int) -> dict[str, str]:
    row = _row(i, "qwen3-235b-a22b", tp, conc, isl, 128)
    row.update(precision="fp8", gemm_quant_mode="fp8", moe_quant_mode="fp8_block")
    return row


def _shipped_us() -> float:
    return engine_style("vllm").moe_fp8_block_fixed_s * 1e6


TRUE_US = round(_shipped_us(), 9) + 25.0


@pytest.fixture(scope="module")
def overlay(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3-235B-A22B FP8 at TP 4 and 8 on H100 under vLLM, two prompt lengths, five
    concurrencies (20 runs of 4 configurations), figures from the estimate at 25 us a layer
    above vLLM's shipped value."""
    folder = tmp_path_factory.mktemp("calmoe")
    rows = [_moe_row(i, tp, conc, isl) for i, (tp, isl, conc) in enumerate(
        (tp, isl, conc) for tp in (4, 8) for isl in (512, 2048) for conc in (1, 4, 16, 32, 64))]
    return fit_one_kind(folder, rows, f"vllm.{STYLE_KEY}", TRUE_US, "moe",
                        round(_shipped_us(), 9))


def test_calibrate_fit_moe_recovers_the_engines_value(overlay: Path) -> None:
    data = yaml.safe_load(overlay.read_text())
    (value,) = data["values"]
    assert value["target"] == {"kind": "engine_style", "name": "vllm", "key": STYLE_KEY}
    assert value["value"] == pytest.approx(TRUE_US, rel=0.05)
    assert value["prior"] == pytest.approx(_shipped_us())


def test_the_overlay_applies_it_as_the_deployments_overhead(overlay: Path) -> None:
    from simulator.calibration.host_costs import calibrated, host_costs
    from simulator.calibration.overlay import read_overlay

    with_fit = calibrated(_scenario("minimax-m2.5", "fp8"), host_costs(read_overlay(overlay)))
    seconds = with_fit["deployment"]["overhead"]["moe_fp8_block_fixed_s"]
    assert seconds == pytest.approx(TRUE_US * 1e-6, rel=0.05)
