"""REPORT.md's measured-runs section (measured/causes.py): each cause's switch undoes exactly
its change through the model's own path, and the section reports every cause on and off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simulator.cost import BatchShape
from simulator.hardware.profile import load_hardware
from simulator.measured.causes import CAUSES, measured_ablation, measured_markdown
from simulator.measured.detect import read_measurements
from simulator.measured.scenario import map_run
from tests.test_measured import AGG_DP8, DENSE, DISAGG, write_csv

SWITCH = {c.key: c for c in CAUSES}


def _scenarios(tmp_path: Path, rows: list[dict[str, str]]) -> list[dict]:
    runs = read_measurements([write_csv(tmp_path / "r.csv", rows)])
    return [map_run(r, None).scenario for r in runs]  # type: ignore[misc]


def test_budget_switch_restores_the_old_mapping(tmp_path: Path) -> None:
    vllm = {**DENSE, "concurrency": "32", "batch_size": "32"}
    agg, sgl, pd = _scenarios(tmp_path, [vllm, AGG_DP8, DISAGG])
    # On: 32 + 1024 + 1500 = 2556 (test_measured.py); off: max(8192, 32) = 8192.
    off = SWITCH["b1"].scenario(agg)["deployment"]["scheduler"]
    assert off == {"max_num_seqs": 32, "max_num_batched_tokens": 8192}
    assert agg["deployment"]["scheduler"]["max_num_batched_tokens"] == 2556  # not mutated
    # SGLang loses its ISL + 1500 prefill cap; both P/D pools go back to 8192.
    assert "max_prefill_tokens" not in SWITCH["b1"].scenario(sgl)["deployment"]["scheduler"]
    pd_off = SWITCH["b1"].scenario(pd)["deployment"]
    assert [pd_off[p]["scheduler"]["max_num_batched_tokens"] for p in ("prefill", "decode")] == [
        8192, 8192]


def test_trtllm_switch_restores_the_schema_defaults(tmp_path: Path) -> None:
    trt = {**DENSE, "id": "trt", "backend": "trtllm", "backend_version": "1.2.0",
           "ttft_ms": "41"}
    vllm, trt_s = _scenarios(tmp_path, [DENSE, trt])
    off = SWITCH["b5"].scenario(trt_s)["deployment"]
    assert "gpu_memory_utilization" not in off
    assert {"chunked_prefill", "block_size"}.isdisjoint(off["scheduler"])
    assert SWITCH["b5"].scenario(vllm) == vllm  # other engines untouched


def test_sglang_aggregated_workers_mix_prefill_as_generated(tmp_path: Path) -> None:
    """The generator writes --enable-mixed-chunk for aggregated SGLang workers only: the mapped
    aggregated pool mixes, P/D pools keep the engine's default, and b6 takes the key away."""
    sgl_pd = {**DISAGG, "id": "sgl-pd", "backend": "sglang", "backend_version": "0.5.9"}
    vllm, sgl, pd = _scenarios(tmp_path, [DENSE, AGG_DP8, sgl_pd])
    assert sgl["deployment"]["engine"] == pd["deployment"]["prefill"]["engine"] == "sglang"
    assert sgl["deployment"]["scheduler"]["mix_prefill_decode"] is True
    for side in ("prefill", "decode"):
        assert "mix_prefill_decode" not in pd["deployment"][side]["scheduler"]
    assert "mix_prefill_decode" not in vllm["deployment"]["scheduler"]
    assert "mix_prefill_decode" not in SWITCH["b6"].scenario(sgl)["deployment"]["scheduler"]
    assert SWITCH["b6"].scenario(vllm) == vllm


def test_kv_switch_and_token_tile_switch(tmp_path: Path) -> None:
    [nvfp4] = _scenarios(tmp_path, [AGG_DP8])
    assert nvfp4["deployment"]["precision"]["kv_cache"] == "fp8"
    assert SWITCH["b2"].scenario(nvfp4)["deployment"]["precision"]["kv_cache"] == "bf16"
    b200 = load_hardware("b200")
    assert b200.gemm_classes is not None
    assert b200.gemm_classes.grouped_token_tile_weights == frozenset({"mxfp4"})
    off = SWITCH["b3"].hardware(b200).gemm_classes
    assert off is not None and off.grouped_token_tile_weights == frozenset()
    assert off.grouped_hbm_fraction == b200.gemm_classes.grouped_hbm_fraction


def _b200_fp8_engine(model: str, layout: dict[str, int], clients: int) -> Any:
    """The engine of `model` on B200s with FP8 weights under `layout`, a short closed loop."""
    import simulator

    scenario = {"schema_version": 1, "name": model, "model": model,
                "hardware": {"gpu": "b200", "gpus_per_node": 8},
                "deployment": {**layout, "precision": {"weights": "fp8"}},
                "workload": {"arrival": {"kind": "closed_loop", "concurrency": clients},
                             "input_tokens": {"kind": "fixed", "value": 1024},
                             "output_tokens": {"kind": "fixed", "value": 64},
                             "num_requests": clients}}
    engine = simulator.load_scenario(scenario).engine
    assert engine is not None
    return engine


def test_qk_norm_switch_drops_the_allreduce_row() -> None:
    engine = _b200_fp8_engine("minimax-m2.5", {"tensor_parallel": 4}, 4)
    batch = BatchShape(decode_seqs=4, decode_context_tokens=4096)
    on = {o.op for o in engine.step_model.cost(batch).ops}
    off_engine = SWITCH["b4"].engine(engine)
    off = {o.op for o in off_engine.step_model.cost(batch).ops}
    assert "qk_norm_allreduce" in on and on - off == {"qk_norm_allreduce"}
    assert engine.arch.qk_norm_across_heads  # the switch copies, never mutates


def test_routing_scatter_switch_costs_the_mean_rank() -> None:
    engine = _b200_fp8_engine("deepseek-r1", {"tensor_parallel": 8, "expert_parallel": 8}, 16)
    batch = BatchShape(decode_seqs=16, decode_context_tokens=16 * 1024)

    def experts_bytes(e: object) -> float:
        ops = e.step_model.cost(batch).ops  # type: ignore[attr-defined]
        return next(o.bytes for o in ops if o.op == "moe_experts_up_gate")

    # 16 tokens over EP 8: the busiest GPU hits 17 experts (tests/test_moe_scatter.py), the
    # mean GPU 32 x (1 - (1 - 8/256)^16) = 12.7 -> 13, so the switch reads 13/17 the weights.
    off = SWITCH["b8"].engine(engine)
    assert experts_bytes(off) / experts_bytes(engine) == pytest.approx(13 / 17, rel=0.02)
    assert engine.step_model.routing_scatter  # the switch copies, never mutates


def test_section_scores_every_cause(tmp_path: Path) -> None:
    gpt = {**DENSE, "id": "gpt", "model": "gpt-oss-120b", "gpu": "b200", "precision": "fp4",
           "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4", "concurrency": "64",
           "batch_size": "64", "tpot_ms": "8"}
    path = write_csv(tmp_path / "r.csv", [AGG_DP8, DENSE, gpt])
    result = measured_ablation(path)
    assert (result["runs"], result["usable"], result["overall"]["runs"]) == (3, 3, 3)
    assert set(result["groups"]) == {"b200 sglang aggregated", "h100-sxm vllm aggregated",
                                     "b200 vllm aggregated"}
    assert [c["key"] for c in result["causes"]] == ["b1", "b2", "b3", "b4", "b5", "b6", "b7",
                                                     "b8", "b9", "b10"]
    # The token tile moves the gpt-oss run's TPOT (2 rows per expert at 64 sequences).
    on, tile_off = result["overall"]["tpot.mean"], result["causes"][2]["tpot.mean"]
    assert on != tile_off
    lines = measured_markdown(result, "r.csv")
    assert lines[0] == "## Measured runs of real engines, cause by cause"
    assert sum(ln.startswith("| b") for ln in lines) == 10 + 2  # 10 causes, 2 b200 groups
    # The request latency moves TTFT most: it holds no engine step, so TPOT moves only as the
    # closed loop's clients, waiting out the latency, keep fewer requests in the engine.
    on_all, latency_off = result["overall"], result["causes"][6]
    ttft_moved = abs(latency_off["ttft.mean"]["median_signed_error"]
                     - on_all["ttft.mean"]["median_signed_error"])
    tpot_moved = abs(latency_off["tpot.mean"]["median_signed_error"]
                     - on_all["tpot.mean"]["median_signed_error"])
    assert ttft_moved > 10 * tpot_moved
    missing = measured_markdown(None, "nowhere.csv")
    assert any("`nowhere.csv` was not found" in ln for ln in missing)


def test_the_layout_a_run_id_names_is_a_cause_of_its_own(tmp_path: Path) -> None:
    # Row 833's setup: SGLang DeepSeek-R1 FP4 on B200 recorded tp 16, moe 4 x 4, named
    # tp4_ep4 (measured/id_layout.py). Mapped as named it runs on 4 GPUs of one node; with
    # b9 off, on 16 over two, whose step the inter-node all-reduce slows: TPOT moves.
    row = {**AGG_DP8, "id": "2026_04_06_deepseek_r1_b200_sxm_sglang_fp4_agg_8192x1024_c128_tp4_"
           "ep4_1042", "isl": "8192", "concurrency": "128", "batch_size": "128",
           "tp_size": "16", "attention_dp_size": "1", "moe_tp_size": "4", "moe_ep_size": "4",
           "ttft_ms": "2629", "tpot_ms": "50"}
    result = measured_ablation(write_csv(tmp_path / "r.csv", [row]))
    b9 = next(c for c in result["causes"] if c["key"] == "b9")
    on = result["overall"]["tpot.mean"]["median_signed_error"]
    off = b9["tpot.mean"]["median_signed_error"]
    assert b9["runs"] == 1 and off > on + 0.5, (on, off)


def test_the_fp8_moe_path_switch_moves_only_fp8_moe_runs(tmp_path: Path) -> None:
    """b10 sets every pool's overhead.moe_fp8_block_fixed_s to 0: an SGLang DeepSeek-R1 FP8
    run (61 layers, 58 of them MoE) decodes faster without its engine's FP8 path, by 58 x
    SGLang's fitted value a step; the NVFP4 run and the dense run do not move."""
    from simulator.engines.style import engine_style

    fp8 = {**AGG_DP8, "id": "fp8", "precision": "fp8", "gemm_quant_mode": "fp8",
           "moe_quant_mode": "fp8_block"}
    result = measured_ablation(write_csv(tmp_path / "one.csv", [fp8]))
    b10 = next(c for c in result["causes"] if c["key"] == "b10")
    on, off = result["overall"]["tpot.mean"], b10["tpot.mean"]
    assert off["median_signed_error"] < on["median_signed_error"] - 0.05  # faster: lower
    s_fp8, s_fp4, s_dense = _scenarios(tmp_path, [fp8, AGG_DP8, DENSE])
    switched = SWITCH["b10"].scenario(s_fp8)
    assert switched["deployment"]["overhead"] == {"moe_fp8_block_fixed_s": 0.0}
    assert "overhead" not in s_fp8["deployment"]  # the switch copies, never mutates

    import simulator

    def tpot(s: dict) -> float:
        return simulator.estimate(simulator.load_scenario(s)).tpot_p50_s

    per_step = 58 * engine_style("sglang").moe_fp8_block_fixed_s
    assert tpot(s_fp8) - tpot(switched) == pytest.approx(per_step, rel=0.05)
    for s in (s_fp4, s_dense):
        assert tpot(SWITCH["b10"].scenario(s)) == tpot(s)
