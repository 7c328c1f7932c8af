"""Measured runs in: each file format read into MeasuredRuns, the mapping of silicon rows to
the exact deployment they become, refusals listed by reason, every bad input one line and
exit status 2, and a small end-to-end scoring with the closed-form estimate."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import simulator
from simulator.cli.app import main
from simulator.measured.detect import detect_format, read_measurements
from simulator.measured.run import LAYOUT_CONTRADICTED
from simulator.measured.scenario import WORKERS_GUESSED, map_run

SILICON = Path(__file__).resolve().parents[2] / "shared" / "reference" / "silicon_calibration.csv"
COLUMNS = [
    "id", "backend", "backend_version", "model", "gpu", "precision", "gemm_quant_mode",
    "moe_quant_mode", "mode", "isl", "osl", "concurrency", "batch_size", "tp_size", "pp_size",
    "attention_dp_size", "moe_tp_size", "moe_ep_size", "prefill_batch_size",
    "decode_batch_size", *(f"{side}_{f}" for side in ("prefill", "decode") for f in (
        "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size",
        "num_workers")), "ttft_ms", "tpot_ms",
]
AGG_DP8 = {  # DeepSeek-R1 FP4 on B200: attention DP 8, experts EP 8
    "id": "dp8", "backend": "sglang", "backend_version": "0.5.9", "model": "deepseek-r1",
    "gpu": "b200", "precision": "fp4", "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4",
    "mode": "agg", "isl": "1024", "osl": "1024", "concurrency": "64", "batch_size": "8",
    "tp_size": "1", "pp_size": "1", "attention_dp_size": "8", "moe_tp_size": "1",
    "moe_ep_size": "8", "ttft_ms": "300", "tpot_ms": "12",
}
DISAGG = {  # 2 prefill workers of TP4, 1 decode worker of TP8, Llama-3.1-70B FP8 on H200
    "id": "pd", "backend": "trtllm", "backend_version": "1.2.0", "model": "llama-3.1-70b",
    "gpu": "h200-sxm", "precision": "fp8", "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8",
    "mode": "disagg", "isl": "8192", "osl": "1024", "concurrency": "16",
    "prefill_tp_size": "4", "prefill_pp_size": "1", "prefill_attention_dp_size": "1",
    "prefill_moe_tp_size": "1", "prefill_moe_ep_size": "1", "prefill_num_workers": "2",
    "decode_tp_size": "8", "decode_pp_size": "1", "decode_attention_dp_size": "1",
    "decode_moe_tp_size": "1", "decode_moe_ep_size": "1", "decode_num_workers": "1",
    "ttft_ms": "900", "tpot_ms": "20",
}
DENSE = {**AGG_DP8, "id": "dense", "model": "llama-3.1-8b", "gpu": "h100-sxm",
         "backend": "vllm", "precision": "", "gemm_quant_mode": "", "moe_quant_mode": "",
         "concurrency": "4", "batch_size": "4", "tp_size": "1", "attention_dp_size": "",
         "moe_tp_size": "1", "moe_ep_size": "1", "ttft_ms": "40", "tpot_ms": "8"}


def write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, COLUMNS, restval="")
        w.writeheader()
        w.writerows(rows)
    return path


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def frontier(argv: tuple[str, ...]) -> None:
    """`frontier validate ARGV` through the entry point that turns user errors into one
    line and exit status 2, for click's CliRunner."""
    main(["validate", *argv])


def invoke(*args: str) -> Any:
    return CliRunner().invoke(frontier, list(args))


def one_line_exit_2(result: Any, *needles: str) -> None:
    """Exit status 2 and exactly one line of output, naming each needle."""
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    progress = [ln for ln in lines if ln.startswith("scored ")]
    assert len(lines) - len(progress) == 1, result.output
    for needle in needles:
        assert needle in result.output, result.output


# ------------------------------------------------------------------------------ mapping


def test_attention_dp8_ep8_row_becomes_that_deployment(tmp_path: Path) -> None:
    [run] = read_measurements([write_csv(tmp_path / "r.csv", [AGG_DP8])])
    m = map_run(run, None)
    assert m.refused is None and m.scenario is not None
    dep = m.scenario["deployment"]
    assert dep == {
        "kind": "aggregated", "replicas": 1, "tensor_parallel": 1, "pipeline_parallel": 1,
        "attention_data_parallel": 8, "expert_parallel": 8,
        # NVFP4 rows: NVIDIA's ModelOpt checkpoint declares an FP8 KV cache (scenario.py)
        "precision": {"weights": "nvfp4", "activations": "nvfp4", "kv_cache": "fp8"},
        "engine": "sglang", "engine_version": "0.5.9",
        # SGLang as the benchmark generator launches it: --max-prefill-tokens ISL + 1500 and,
        # aggregated, --enable-mixed-chunk
        "scheduler": {"max_num_seqs": 8, "max_num_batched_tokens": 8192,
                      "max_prefill_tokens": 1024 + 1500, "mix_prefill_decode": True},
    }
    assert m.scenario["hardware"] == {"gpu": "b200", "gpus_per_node": 8, "nodes": 1}
    assert m.scenario["workload"] == {
        # the clients start at random phases of their cycle (measured/workload_map.py CLIENT_START)
        "arrival": {"kind": "closed_loop", "concurrency": 64, "start": "random_phase"},
        "input_tokens": {"kind": "fixed", "value": 1024},
        "output_tokens": {"kind": "fixed", "value": 1024},
        "num_requests": 21 * 64, "seed": 0,
    }
    assert run.load.warmup_requests == 64
    assert any("kv_cache fp8 on NVFP4 rows" in d for d in m.defaults)
    assert any("random phases of their request cycle" in d for d in m.defaults)
    assert m.group == ("b200", "sglang", "aggregated")


def test_disagg_row_two_prefill_tp4_one_decode_tp8(tmp_path: Path) -> None:
    [run] = read_measurements([write_csv(tmp_path / "r.csv", [DISAGG])])
    m = map_run(run, None)
    assert m.scenario is not None
    dep = m.scenario["deployment"]
    assert dep["kind"] == "disaggregated"
    assert (dep["prefill"]["replicas"], dep["prefill"]["tensor_parallel"]) == (2, 4)
    assert (dep["decode"]["replicas"], dep["decode"]["tensor_parallel"]) == (1, 8)
    assert dep["decode"]["precision"]["weights"] == "fp8"
    # 2 x 4 + 8 = 16 GPUs on 8-GPU HGX nodes
    assert m.scenario["hardware"] == {"gpu": "h200-sxm", "gpus_per_node": 8, "nodes": 2}
    # batch size not recorded: every in-flight request may run
    assert dep["decode"]["scheduler"]["max_num_seqs"] == 16
    assert any("batch size not recorded" in d for d in m.defaults)


def test_token_budgets_are_the_benchmark_generators(tmp_path: Path) -> None:
    """Hand cases of the generator's budgets (scenario.py BENCH_BUDGET_MARGIN): vLLM
    aggregated batch + ISL + 1500; TensorRT-LLM the same rounded up to 32-token blocks;
    prefill workers ISL + 1500; decode workers the batch."""
    vllm = {**DENSE, "concurrency": "32", "batch_size": "32"}
    trt = {**vllm, "backend": "trtllm", "backend_version": "1.2.0"}
    runs = read_measurements([write_csv(tmp_path / "r.csv", [vllm, trt, DISAGG])])
    budgets = [map_run(r, None).scenario["deployment"] for r in runs]  # type: ignore[index]
    assert budgets[0]["scheduler"]["max_num_batched_tokens"] == 32 + 1024 + 1500  # 2556
    assert budgets[1]["scheduler"]["max_num_batched_tokens"] == 2560  # 2556 -> 80 x 32
    # DISAGG: ISL 8192 -> prefill 8192 + 1500 = 9692 -> 303 x 32 = 9696; decode batch 16 -> 32
    assert budgets[2]["prefill"]["scheduler"]["max_num_batched_tokens"] == 9696
    assert budgets[2]["decode"]["scheduler"]["max_num_batched_tokens"] == 32
    assert any("benchmark generator's trtllm budget" in d
               for d in map_run(runs[1], None).defaults)
    # TensorRT-LLM as the generator writes it: whole contexts, 32-token blocks, 0.8 of free
    # memory for the KV cache; vLLM keeps the schema's defaults.
    assert (budgets[1]["scheduler"]["chunked_prefill"], budgets[1]["scheduler"]["block_size"],
            budgets[1]["gpu_memory_utilization"]) == (False, 32, 0.8)
    assert "chunked_prefill" not in budgets[0]["scheduler"]
    assert "gpu_memory_utilization" not in budgets[0]


def test_gpt_oss_nvfp4_is_mxfp4_and_empty_precision_is_bf16(tmp_path: Path) -> None:
    gpt = {**DENSE, "model": "gpt-oss-120b", "precision": "fp4", "gemm_quant_mode": "nvfp4",
           "moe_quant_mode": "nvfp4"}
    runs = read_measurements([write_csv(tmp_path / "r.csv", [gpt, DENSE])])
    p_gpt = map_run(runs[0], None).scenario["deployment"]["precision"]  # type: ignore[index]
    p_bf16 = map_run(runs[1], None).scenario["deployment"]["precision"]  # type: ignore[index]
    assert (p_gpt["weights"], p_gpt["activations"]) == ("mxfp4", "bf16")
    assert (p_bf16["weights"], p_bf16["activations"]) == ("bf16", "bf16")
    # Only NVIDIA's NVFP4 checkpoints declare an FP8 KV cache; gpt-oss's MXFP4 one does not
    assert p_gpt["kv_cache"] == p_bf16["kv_cache"] == "bf16"


def test_unshipped_model_and_gpu_are_refused_with_reasons(tmp_path: Path) -> None:
    rows = [{**AGG_DP8, "model": "glm-5"}, {**AGG_DP8, "model": "qwen3.5-397b-a17b"},
            {**DENSE, "tp_size": "3"}]
    result = invoke("--measurements", str(write_csv(tmp_path / "r.csv", rows)),
                    "--method", "estimate", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{"):])
    # GLM-5 ships since its sparse attention is costed, Qwen3.5 since its Gated DeltaNet
    # layers are (issue 36).
    assert data["refused"] == {"layout refused": 1}
    assert [r["status"] for r in data["runs"]] == ["scored", "scored", "refused"]
    assert "tensor_parallel 3" in data["runs"][2]["detail"]


# ------------------------------------------------------------------------------ formats


def test_vllm_json_with_scenario(tmp_path: Path) -> None:
    data = {
        "date": "20250101-000000", "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B",
        "num_prompts": 40, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 4,
        "duration": 10.0, "completed": 40, "total_input_tokens": 40 * 512,
        "total_output_tokens": 40 * 64, "request_throughput": 4.0, "output_throughput": 256.0,
        "mean_ttft_ms": 30.0, "median_ttft_ms": 29.0, "p99_ttft_ms": 50.0,
        "mean_tpot_ms": 8.0, "median_tpot_ms": 8.0, "p99_tpot_ms": 9.0,
        "mean_itl_ms": 8.0, "mean_e2el_ms": 540.0,
    }
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(data))
    assert detect_format(path) == "vllm"
    [run] = read_measurements([path])
    assert run.load.concurrency == 4 and run.load.input_tokens == 512
    assert run.measured["ttft.p50"] == 29.0 and run.measured["e2e.mean"] == 540.0
    scen = tmp_path / "s.yaml"
    scen.write_text("model: llama-3.1-8b\nhardware: {gpu: h100-sxm}\n"
                    "deployment: {tensor_parallel: 1}\n"
                    "workload: {arrival: {kind: offline}, input_tokens: {kind: fixed, value: 1},"
                    " output_tokens: {kind: fixed, value: 1}}\n")
    result = invoke("--measurements", str(path), "--scenario", str(scen), "--method",
                    "estimate", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output[result.output.index("{"):])
    [rec] = out["runs"]
    assert rec["status"] == "scored" and rec["gpu"] == "h100-sxm"
    assert {"ttft.mean", "tpot.mean", "ttft.p99"} <= set(rec["errors"])


def test_vllm_json_without_scenario_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps({"num_prompts": 1, "completed": 1, "total_input_tokens": 5,
                                "total_output_tokens": 5, "request_rate": 1.0,
                                "max_concurrency": None, "mean_ttft_ms": 1.0,
                                "mean_tpot_ms": 1.0, "mean_e2el_ms": 2.0}))
    one_line_exit_2(invoke("--measurements", str(path)), "--scenario")


def test_sglang_jsonl_and_aiperf(tmp_path: Path) -> None:
    line = {"backend": "sglang", "request_rate": 2.0, "max_concurrency": None,
            "completed": 100, "total_input_tokens": 100_000, "total_output_tokens": 20_000,
            "mean_ttft_ms": 50.0, "mean_tpot_ms": 9.0, "mean_e2e_latency_ms": 1900.0,
            "mean_itl_ms": 0.0}
    sg = tmp_path / "sg.jsonl"
    sg.write_text(json.dumps(line) + "\n" + json.dumps({**line, "request_rate": 4.0}) + "\n")
    runs = read_measurements([sg])
    assert [r.load.rate_per_s for r in runs] == [2.0, 4.0] and runs[1].row == 2
    assert "itl.mean" not in runs[0].measured  # a 0 measured nothing
    ai = tmp_path / "profile_export_aiperf.json"
    ai.write_text(json.dumps({
        "records": {
            "time_to_first_token": {"unit": "ms", "avg": 120.0, "p99": 300.0},
            "inter_token_latency": {"unit": "ms", "avg": 10.0, "p50": 9.5},
            "input_sequence_length": {"unit": "tokens", "avg": 1024},
            "output_sequence_length": {"unit": "tokens", "avg": 128},
            "request_count": {"unit": "requests", "avg": 80},
            "request_latency": {"unit": "s", "avg": 1.4},
        },
        "input_config": {"loadgen": {"concurrency": 4, "warmup_request_count": 4}},
    }))
    assert detect_format(ai) == "aiperf"
    [run] = read_measurements([ai])
    assert run.measured == {"ttft.mean": 120.0, "ttft.p99": 300.0, "tpot.mean": 10.0,
                            "tpot.p50": 9.5, "e2e.mean": 1400.0}
    assert (run.load.concurrency, run.load.warmup_requests, run.load.num_requests) == (4, 4, 80)


def test_aiperf_missing_key_is_one_line(tmp_path: Path) -> None:
    ai = tmp_path / "profile_export_aiperf.json"
    ai.write_text(json.dumps({"records": {"time_to_first_token": {"avg": 1.0}}}))
    one_line_exit_2(invoke("--measurements", str(ai)), "inter_token_latency")


# --------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ({**DENSE, "gpu": "h100"}, "h100"),
        ({**DENSE, "backend": "vlm"}, "backend"),
        ({**DENSE, "ttft_ms": "nan"}, "ttft_ms"),
        ({**DENSE, "tpot_ms": "-3"}, "tpot_ms"),
        ({**AGG_DP8, "moe_ep_size": "4"}, "contradicts"),
        ({**DENSE, "gemm_quant_mode": "fp8"}, "contradicts"),
    ],
)
def test_bad_silicon_row_exits_2_with_one_line(
    tmp_path: Path, row: dict[str, str], needle: str
) -> None:
    path = write_csv(tmp_path / "bad.csv", [DENSE, row])
    result = invoke("--measurements", str(path), "--method", "estimate")
    one_line_exit_2(result, needle, "row 2")
    assert "group" not in result.output  # nothing half-written


def test_truncated_and_malformed_files_exit_2(tmp_path: Path) -> None:
    good = write_csv(tmp_path / "good.csv", [DENSE, DENSE]).read_text()
    cut = tmp_path / "cut.csv"
    cut.write_text(good[: good.rindex(",") - 3])
    one_line_exit_2(invoke("--measurements", str(cut)), "row 2")
    broken = tmp_path / "broken.json"
    broken.write_text('{"completed": 3, "mean_ttft_ms": ')
    one_line_exit_2(invoke("--measurements", str(broken)), "not valid JSON")
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    one_line_exit_2(invoke("--measurements", str(other)), "silicon")


def test_entry_point_prints_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_csv(tmp_path / "bad.csv", [{**DENSE, "ttft_ms": "NaN"}])
    with pytest.raises(SystemExit) as exc:
        main(["validate", "--measurements", str(path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "row 1: ttft_ms" in err


# ---------------------------------------------------------------------------- scoring


def test_end_to_end_estimate_scores_a_few_rows(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "r.csv", [DENSE, AGG_DP8, DISAGG, {**DENSE, "model": "glm-5"}])
    result = invoke("--measurements", str(path), "--method", "estimate", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output[result.output.index("{"):])
    assert out["overall"]["runs"] == 4 and out["overall"]["refused"] == 1
    assert out["overall"]["simulated"] == 3
    st = out["overall"]["metrics"]["ttft.mean"]
    assert st["n"] == 3 and st["median_abs_error"] >= 0
    assert set(out["groups"]) == {"h100-sxm vllm aggregated", "b200 sglang aggregated",
                                  "h200-sxm trtllm disaggregated"}
    for rec in out["runs"][:3]:
        for k, e in rec["errors"].items():
            assert e == pytest.approx(rec["predicted"][k] / rec["measured"][k] - 1)
    text = invoke("--measurements", str(path), "--method", "estimate")
    assert text.exit_code == 0 and "h200-sxm trtllm disaggregated" in text.output


def test_simulate_scores_the_window_after_warmup(tmp_path: Path) -> None:
    row = {**DENSE, "concurrency": "2", "batch_size": "2", "isl": "128", "osl": "16"}
    path = write_csv(tmp_path / "r.csv", [row])
    result = invoke("--measurements", str(path), "--json")
    assert result.exit_code == 0, result.output
    [rec] = json.loads(result.output[result.output.index("{"):])["runs"]
    assert rec["status"] == "scored" and rec["predicted"]["tpot.mean"] > 0


@pytest.mark.skipif(not SILICON.is_file(), reason="shared reference file not present")
def test_shipped_silicon_file_reads_every_row() -> None:
    runs = read_measurements([SILICON])
    assert len(runs) == 3028
    sample = [map_run(r, None) for r in runs[:200]]
    assert all(m.scenario is not None or m.refused is not None for m in sample)


def test_pd_rows_without_worker_counts_are_scored_apart_from_the_headline(
        tmp_path: Path) -> None:
    """A P/D row that records no worker counts runs on one worker per pool (declared), but its
    per-worker load is a guess: `overall` counts it, `overall_layout_recorded` does not."""
    unrecorded = {**DISAGG, "id": "pd-x", "prefill_num_workers": "", "decode_num_workers": "",
                  "ttft_ms": "950"}  # its own measurement (the same one would contradict DISAGG)
    path = write_csv(tmp_path / "r.csv", [DENSE, DISAGG, unrecorded])
    result = invoke("--measurements", str(path), "--method", "estimate", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output[result.output.index("{"):])
    assert out["overall"]["simulated"] == 3
    assert out["overall_layout_recorded"]["simulated"] == 2
    guessed = [r["id"] for r in out["runs"] if WORKERS_GUESSED in r["defaults"]]
    assert guessed == ["pd-x"]
    text = invoke("--measurements", str(path), "--method", "estimate")
    assert "overall, layout recorded and not contradicted" in text.output


def test_a_measurement_listed_under_two_layouts_is_in_doubt(tmp_path: Path) -> None:
    """The same measured TTFT and TPOT (every digit) of the same engine, GPU, lengths and load
    listed twice with different layouts (TP 1 and TP 2) is one run rendered two ways: both
    rows say so and leave the headline; a plain repeat with the same layout stays in it."""
    tp2 = {**DENSE, "id": "dense-tp2", "tp_size": "2"}
    again = {**DENSE, "id": "dense-again"}
    other = {**AGG_DP8}
    path = write_csv(tmp_path / "r.csv", [DENSE, tp2, other])
    res = invoke("--measurements", str(path), "--method", "estimate", "--json")
    out = json.loads(res.output[res.output.index("{"):])
    doubt = sorted(r["id"] for r in out["runs"] if LAYOUT_CONTRADICTED in r["defaults"])
    assert doubt == ["dense", "dense-tp2"]
    assert (out["overall"]["simulated"], out["overall_layout_recorded"]["simulated"]) == (3, 1)
    res = invoke("--measurements", str(write_csv(tmp_path / "s.csv", [DENSE, again])),
                 "--method", "estimate", "--json")
    same = json.loads(res.output[res.output.index("{"):])
    assert same["overall_layout_recorded"]["simulated"] == 2


def test_calibration_leaves_out_pd_rows_without_worker_counts(tmp_path: Path) -> None:
    """A P/D row without worker counts cannot inform a fit (its per-worker load is a guess):
    the calibration problem counts it under its reason and uses the others."""
    from simulator.measured.calibrate_runs import GUESSED, build_problem

    unrecorded = {**DISAGG, "id": "pd-x", "prefill_num_workers": "", "decode_num_workers": "",
                  "ttft_ms": "950"}
    runs = read_measurements([write_csv(tmp_path / "r.csv", [DENSE, DISAGG, unrecorded])])
    problem = build_problem([map_run(r, None) for r in runs])
    assert problem.refused[GUESSED] == 1
    assert [m.run.run_id for m in problem.used] == ["dense", "pd"]


def test_trtllm_fp8_rows_run_an_fp8_kv_cache(tmp_path: Path) -> None:
    """TensorRT-LLM serves FP8 from pre-quantized checkpoints, written with an FP8 KV cache
    (scenario.py TRTLLM_FP8_KV); vLLM may quantize a BF16 checkpoint at load, so its stays
    BF16. The measured row behind it: Llama-3.1-70B FP8, TP 2 on B200, 128 x (1024 + 8192)
    tokens, TTFT 367 ms (calibration file, 2025-10-29), no admission queue. TensorRT-LLM
    reserves whole sequences: 128 x 9216 = 1,179,648 tokens x 163,840 B a token a GPU in BF16
    (80 layers x 8 KV heads x 128 x K and V x 2 B / 2 GPUs) = 193 GB > the device's 192 GB,
    so only the FP8 cache (97 GB) holds every client at once."""
    trt = {**DENSE, "backend": "trtllm", "backend_version": "1.2.0rc2", "model": "llama-3.1-70b",
           "gpu": "b200", "precision": "fp8", "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8",
           "isl": "1024", "osl": "8192", "concurrency": "128", "batch_size": "128",
           "tp_size": "2", "moe_tp_size": "2"}
    vllm = {**trt, "backend": "vllm", "backend_version": "0.12.0"}
    runs = read_measurements([write_csv(tmp_path / "r.csv", [trt, vllm])])
    m_trt, m_vllm = (map_run(r, None) for r in runs)
    assert m_trt.scenario is not None and m_vllm.scenario is not None
    assert m_trt.scenario["deployment"]["precision"]["kv_cache"] == "fp8"
    assert m_vllm.scenario["deployment"]["precision"]["kv_cache"] == "bf16"
    assert any("TensorRT-LLM FP8 rows" in d for d in m_trt.defaults)
    est = simulator.estimate(simulator.load_scenario(m_trt.scenario))
    assert est.limit == "max_num_seqs" and est.batch == pytest.approx(128, abs=0.5)
    bf16 = copy.deepcopy(m_trt.scenario)
    bf16["deployment"]["precision"]["kv_cache"] = "bf16"
    held = simulator.estimate(simulator.load_scenario(bf16))
    assert held.limit == "kv_cache" and held.batch < 100


def test_batch_times_tp_equal_to_concurrency_is_attention_dp_over_the_tp_ranks(
        tmp_path: Path) -> None:
    """attention_dp_size blank, batch_size (per attention-DP rank) 5 x tp_size 8 = 40 clients:
    the layout the file writes as tp 1, adp 8 where it records it (scenario.py
    ATTENTION_DP_INFERRED). Measured (TensorRT-LLM 1.3.0rc1, DeepSeek-R1 NVFP4 on 8 B200,
    4000/1000 tokens): TTFT 0.86 s, so the 40 clients ran at once, not 5 at a time. A row whose
    batch holds every client, or whose product is not the concurrency, keeps adp 1."""
    base = {**AGG_DP8, "backend": "trtllm", "backend_version": "1.3.0rc1", "model": "deepseek-r1",
            "isl": "4000", "osl": "1000", "concurrency": "40", "batch_size": "5", "tp_size": "8",
            "attention_dp_size": "", "moe_tp_size": "1", "moe_ep_size": "8"}
    whole = {**base, "batch_size": "40"}
    other = {**base, "batch_size": "4"}  # 4 x 8 = 32 != 40
    runs = read_measurements([write_csv(tmp_path / "r.csv", [base, whole, other])])
    deps = [map_run(r, None).scenario["deployment"] for r in runs]  # type: ignore[index]
    layout = [(d["tensor_parallel"], d["attention_data_parallel"], d["expert_parallel"],
               d["scheduler"]["max_num_seqs"]) for d in deps]
    assert layout == [(1, 8, 8, 5), (8, 1, 8, 40), (8, 1, 8, 4)]
    assert any("attention DP over the TP ranks" in d for d in map_run(runs[0], None).defaults)
    est = simulator.estimate(simulator.load_scenario(
        map_run(runs[0], None).scenario))  # type: ignore[arg-type]
    # 5 a rank on 8 ranks: every client runs, none waits a whole request for a slot (a TP 8
    # rank of 5 would hold 35 clients back for 1000 decode steps)
    assert est.batch == pytest.approx(5, rel=0.02) and est.ttft_mean_s < 2.0
    tp8 = simulator.estimate(simulator.load_scenario(
        map_run(runs[2], None).scenario))  # type: ignore[arg-type]
    assert tp8.ttft_mean_s > 10.0


def test_sglang_sparse_attention_models_take_fp8_kv_on_blackwell_only(tmp_path: Path) -> None:
    """SGLang's auto KV dtype for DSA models (GLM-5 since PR #18521) is fp8_e4m3 at compute
    capability 10 and above, bfloat16 below (server_args.py _set_default_nsa_kv_cache_dtype):
    the same GLM-5 FP8 row maps to an FP8 cache on B200 and a BF16 one on H200; a dense model's
    SGLang row on B200 keeps BF16."""
    glm = {**AGG_DP8, "model": "glm-5", "precision": "fp8", "gemm_quant_mode": "fp8",
           "moe_quant_mode": "fp8", "tp_size": "8", "attention_dp_size": "1",
           "moe_ep_size": "1"}
    rows = [glm, {**glm, "gpu": "h200-sxm"},
            {**DENSE, "backend": "sglang", "backend_version": "0.5.9", "gpu": "b200"}]
    runs = read_measurements([write_csv(tmp_path / "r.csv", rows)])
    kv = [map_run(r, None).scenario["deployment"]["precision"]["kv_cache"]  # type: ignore[index]
          for r in runs]
    assert kv == ["fp8", "bf16", "bf16"]
    assert any("sparse-attention (DSA) models on Blackwell" in d
               for d in map_run(runs[0], None).defaults)
