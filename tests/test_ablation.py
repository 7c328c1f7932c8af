"""The cause-by-cause ablation: every switch reaches the code path it names (no switch is a
no-op), and the report section is built from the runs."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.validation.ablation import CAUSES, ablation_markdown, simulate_variant


def _scenario(model: str, gpu: str, engine: str, w: str, a: str, tp: int) -> dict[str, Any]:
    return {
        "model": model,
        "hardware": {"gpu": gpu, "gpus_per_node": tp},
        "deployment": {"tensor_parallel": tp, "engine": engine,
                       "precision": {"weights": w, "activations": a, "kv_cache": "bf16"},
                       "scheduler": {"max_num_seqs": 16, "max_num_batched_tokens": 512}},
        "workload": {"arrival": {"kind": "closed_loop", "concurrency": 8},
                     "input_tokens": {"kind": "fixed", "value": 1024},
                     "output_tokens": {"kind": "uniform", "min": 16, "max": 48},
                     "num_requests": 24, "seed": 0},
    }


SGLANG_DSR1 = _scenario("deepseek-r1", "h200-sxm", "sglang", "fp8", "fp8", 8)
VLLM_GPTOSS = _scenario("gpt-oss-120b", "h100-sxm", "vllm", "mxfp4", "bf16", 1)
# A token budget that takes the whole burst in one prefill, so its arrival order shows.
SGLANG_BURST = {**SGLANG_DSR1, "deployment": {
    **SGLANG_DSR1["deployment"],
    "scheduler": {"max_num_seqs": 16, "max_num_batched_tokens": 16384}}}
# A chunk size above SGLang's 16384-token prefill cap, as the H200 InferenceX rows run it.
# Sixteen 4096-token prompts: while one prefill runs, more than 16384 tokens queue up.
SGLANG_CAPPED = {
    **SGLANG_DSR1,
    "deployment": {**SGLANG_DSR1["deployment"],
                   "scheduler": {"max_num_seqs": 16, "max_num_batched_tokens": 32768}},
    "workload": {**SGLANG_DSR1["workload"], "input_tokens": {"kind": "fixed", "value": 4096},
                 "arrival": {"kind": "closed_loop", "concurrency": 16}},
}
# The scenario each switch must move, and the result key it moves.
WHERE = {"1": (VLLM_GPTOSS, "ttft_s"), "1a": (SGLANG_DSR1, "ttft_s"),
         "1b": (SGLANG_BURST, "ttft_s"),
         "2a": (SGLANG_DSR1, "tpot_s"), "2b": (SGLANG_DSR1, "ttft_s"),
         "2c": (SGLANG_CAPPED, "ttft_s"), "3": (VLLM_GPTOSS, "tpot_s"),
         "4": (VLLM_GPTOSS, "tpot_s"), "5": (SGLANG_DSR1, "tpot_s")}


@pytest.mark.parametrize("cause", CAUSES, ids=[c.key for c in CAUSES])
def test_each_switch_changes_its_code_path(cause: Any) -> None:
    scenario, key = WHERE[cause.key]
    on = simulate_variant(scenario, None)[key]["mean"]
    off = simulate_variant(scenario, cause)[key]["mean"]
    assert off != pytest.approx(on, rel=1e-6), (cause.key, on, off)


def test_markdown_compares_each_cause_with_the_full_model() -> None:
    groups = {"TTFT": {"rows": 2, "median_abs_error": 0.5, "p90_abs_error": 0.6}}
    off = {"TTFT": {"rows": 2, "median_abs_error": 0.7, "p90_abs_error": 0.8}}
    ablation = {"rows": 2, "variants": [
        {"cause": None, "title": "all", "switch": "", "groups": groups,
         "errors": {"a": -0.5, "b": -0.6}},
        {"cause": "1", "title": "front end", "switch": "charged 0", "groups": off,
         "errors": {"a": -0.7, "b": -0.6}},
    ]}
    text = "\n".join(ablation_markdown(ablation))
    # Row a moves from 0.5 to 0.3 of the measurement (-40%), b not at all: 1 row moved.
    row = "| 1 front end | charged 0 | 50.0% / 60.0% -> 70.0% / 80.0% | - -> - | - -> - | 1 |"
    assert row in text
