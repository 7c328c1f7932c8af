"""Speculative decoding in the decode pool of a disaggregated deployment, and the acceptance a
speculative block takes by default (the one published preset for its model, method, kind)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator.api import estimate, simulate
from simulator.errors import InputError
from simulator.inputs.scenario import Scenario
from simulator.inputs.spec_defaults import fitting_presets, with_default_acceptance
from simulator.inputs.speculative import SpeculativeConfig
from simulator.serving.engine_build import build_engine
from tests.cli_helpers import run_cli

EAGLE = {"method": "eagle3", "num_speculative_tokens": 3, "acceptance_length": 2.5}


def pd(decode_spec: dict[str, Any] | None, rate: float = 2.0, n: int = 40) -> dict[str, Any]:
    decode: dict[str, Any] = {"replicas": 1,
                              "scheduler": {"max_num_seqs": 64, "max_num_batched_tokens": 4096}}
    if decode_spec is not None:
        decode["speculative"] = decode_spec
    return {
        "schema_version": 1, "name": "pd spec", "model": "llama-3.1-8b",
        "hardware": {"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": 1},
        "deployment": {
            "kind": "disaggregated",
            "prefill": {"replicas": 1},
            "decode": decode,
            "kv_transfer": {"link": "nvlink"},
        },
        "workload": {
            "arrival": {"kind": "poisson", "rate_per_s": rate},
            "input_tokens": {"kind": "fixed", "value": 1024},
            "output_tokens": {"kind": "fixed", "value": 128},
            "num_requests": n, "seed": 5,
        },
    }


# ---- P/D with a speculating decode pool ----------------------------------------------------


def test_pd_with_speculative_decode_pool_runs_and_lowers_tpot_at_low_load() -> None:
    plain = simulate(pd(None), check=True)
    spec = simulate(pd(EAGLE), check=True)
    assert spec.summary["requests_completed"] == plain.summary["requests_completed"] == 40
    assert spec.summary["tpot_s"]["p50"] < plain.summary["tpot_s"]["p50"]
    s = spec.summary["speculative"]
    assert s["method"] == "eagle3"
    assert s["acceptance_length_mean"] == pytest.approx(2.5, abs=0.15)
    assert "disaggregation" in spec.summary


def test_the_decode_pool_holds_the_drafter_and_the_link_moves_its_prompt_kv() -> None:
    plain = build_engine(Scenario.model_validate(pd(None)))
    spec = build_engine(Scenario.model_validate(pd(EAGLE)))
    assert spec.speculative is not None and plain.speculative is None
    assert spec.prefill_pool is not None and spec.prefill_pool.speculative is None
    # Drafter weights and KV come out of the decode pool's cache...
    assert spec.speculative.kv_capacity_tokens < plain.memory.kv_capacity_tokens
    assert spec.scheduler.num_blocks < plain.scheduler.num_blocks
    # ...and the drafter's prompt KV travels with the target's: more bytes per token moved.
    assert spec.kv_link is not None and plain.kv_link is not None
    assert spec.kv_link.exposed_s(1024, 0.0) > plain.kv_link.exposed_s(1024, 0.0)
    est_plain, est_spec = estimate(pd(None)), estimate(pd(EAGLE))
    assert est_spec.tpot_p50_s < est_plain.tpot_p50_s
    assert any("mean acceptance length 2.50" in n for n in est_spec.notes)


def test_pd_decode_pool_of_r1_with_attention_dp_and_mtp_runs() -> None:
    """The practitioners' DeepSeek-R1 P/D: a TP-8 prefill pool, an ADP-8 + EP-8 decode pool
    with MTP."""
    fp8 = {"weights": "fp8", "activations": "fp8", "kv_cache": "fp8"}
    sc = {
        "schema_version": 1, "name": "r1 pd", "model": "deepseek-r1",
        "hardware": {"gpu": "h200-sxm", "gpus_per_node": 8, "nodes": 2},
        "deployment": {
            "kind": "disaggregated",
            "prefill": {"tensor_parallel": 8, "expert_parallel": 8, "precision": fp8,
                        "engine": "sglang"},
            "decode": {"attention_data_parallel": 8, "expert_parallel": 8, "precision": fp8,
                       "engine": "sglang",
                       "scheduler": {"max_num_seqs": 32, "max_num_batched_tokens": 4096},
                       "speculative": {"method": "mtp", "num_speculative_tokens": 2}},
        },
        "workload": {
            "kind": "math", "arrival": {"kind": "closed_loop", "concurrency": 16},
            "input_tokens": {"kind": "fixed", "value": 1000},
            "output_tokens": {"kind": "fixed", "value": 100},
            "num_requests": 32, "seed": 2,
        },
    }
    r = simulate(sc, check=True)
    assert r.summary["requests_completed"] == 32
    s = r.summary["speculative"]
    # mtp-deepseek-r1-trtllm at k = 2: tau 1 + a1 + a1 a2 = 2.536 (TensorRT-LLM PR #4762).
    assert s["acceptance_length_expected"] == pytest.approx(2.536, abs=1e-3)
    assert s["preset_source"] is not None
    assert any("mtp-deepseek-r1-trtllm" in w for w in r.warnings)


def _write(tmp_path: Path, sc: dict[str, Any]) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc))
    return str(path)


def test_prefill_pool_speculative_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = pd(None)
    sc["deployment"]["prefill"]["speculative"] = EAGLE
    code, out, err = run_cli(["simulate", _write(tmp_path, sc)], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "deployment.prefill.speculative" in err and "does not draft" in err
    assert "Traceback" not in err


# ---- acceptance by default -----------------------------------------------------------------


def test_the_one_published_preset_is_taken_and_said() -> None:
    cfg = SpeculativeConfig.model_validate({"method": "mtp", "num_speculative_tokens": 1})
    got, note = with_default_acceptance(cfg, "deepseek-r1", "math", "deployment.speculative")
    assert got.preset == "mtp-deepseek-r1-trtllm" and note is not None
    assert "mtp-deepseek-r1-trtllm" in note and "deepseek-r1" in note
    given = SpeculativeConfig.model_validate(
        {"method": "mtp", "num_speculative_tokens": 1, "acceptance_length": 1.7})
    assert with_default_acceptance(given, "deepseek-r1", "math", "k") == (given, None)
    # DeepSeek-V3's own figure is V3's; R1 is not credited with it, nor V3 with R1's.
    assert fitting_presets("deepseek-v3", "mtp", "chat") == ["mtp-deepseek-v3"]


def test_default_preset_reaches_the_result_and_the_estimate() -> None:
    base = yaml.safe_load(Path("scenarios/deepseek-r1-mtp-8xh200.yaml").read_text())
    sc = copy.deepcopy(base)
    sc["deployment"]["speculative"] = {"method": "mtp", "num_speculative_tokens": 1}
    sc["workload"]["num_requests"] = 16
    explicit = copy.deepcopy(sc)
    explicit["deployment"]["speculative"]["preset"] = "mtp-deepseek-r1-trtllm"
    r, e = simulate(sc), simulate(explicit)
    assert any("no acceptance given" in w and "mtp-deepseek-r1-trtllm" in w for w in r.warnings)
    assert not any("no acceptance given" in w for w in e.warnings)
    assert r.summary["speculative"]["preset_source"] == e.summary["speculative"]["preset_source"]
    assert r.summary["output_tokens_per_s"] == e.summary["output_tokens_per_s"]
    assert any("mtp-deepseek-r1-trtllm" in n for n in estimate(sc).notes)


@pytest.mark.parametrize(
    ("model", "spec", "needles"),
    [
        # Two published EAGLE-3 figures for Llama-3.1-8B: both are named, none is picked.
        ("llama-3.1-8b", {"method": "eagle3", "num_speculative_tokens": 3},
         ["eagle3-llama-3.1-8b-paper, eagle3-llama-3.1-8b-public", "acceptance_length"]),
        # None for this model: the method's presets are named with how to give a figure.
        ("qwen3-32b", {"method": "eagle3", "num_speculative_tokens": 3},
         ["no published figure for qwen3-32b", "eagle3-qwen3-8b", "acceptance_length"]),
    ],
)
def test_no_single_fitting_preset_is_one_line_naming_the_choices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], model: str, spec: dict[str, Any],
    needles: list[str],
) -> None:
    sc = pd(None)
    sc["model"] = model
    sc["deployment"] = {"tensor_parallel": 2, "speculative": spec,
                        "scheduler": {"max_num_seqs": 64, "max_num_batched_tokens": 4096}}
    code, out, err = run_cli(["simulate", _write(tmp_path, sc)], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "deployment.speculative" in err
    for needle in needles:
        assert needle in err
    with pytest.raises(InputError):
        build_engine(Scenario.model_validate(sc))


def test_every_preset_names_a_catalog_model_of_its_method() -> None:
    from simulator.inputs.speculative import load_presets
    from simulator.model.load import load_architecture

    for name, rows in load_presets().items():
        models = {r.model for r in rows.values()}
        assert len(models) == 1, name  # one target per preset, whatever the kind
        arch = load_architecture(models.pop())
        if next(iter(rows.values())).method == "mtp":
            assert arch.num_mtp_layers > 0, name
