"""The KV-format chain and FP4 on Hopper: a smaller KV format raises capacity by the byte
ratio (scale bits included) and so cuts preemptions and queueing at high load; FP4 weights on
a chip without FP4 tensor cores save memory and weight streaming but compute at FP8."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

import simulator
from simulator.cost import BatchShape, Formats, ParallelLayout, StepModel, memory_budget
from simulator.cost.explain import explain
from simulator.cost.format_chain import format_notes
from simulator.hardware.profile import load_hardware
from simulator.model.load import load_architecture

# One H100 at 28 % memory: a small cache, so 64 users of 2,000-token sequences overflow it.
PRESSURE: dict[str, Any] = {
    "model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
    "deployment": {"tensor_parallel": 1, "gpu_memory_utilization": 0.28},
    "workload": {"arrival": {"kind": "closed_loop", "concurrency": 64},
                 "input_tokens": {"kind": "fixed", "value": 1000},
                 "output_tokens": {"kind": "fixed", "value": 1000},
                 "num_requests": 128, "seed": 0},
}


def _run(kv: str) -> dict[str, Any]:
    data = copy.deepcopy(PRESSURE)
    data["deployment"]["precision"] = {"kv_cache": kv}
    return simulator.simulate(data).to_dict()


def test_kv_format_scales_capacity_by_the_byte_ratio() -> None:
    arch, hw = load_architecture("llama-3.1-8b"), load_hardware("h100-sxm")
    lay = ParallelLayout(1, 1, 1, 1)
    bf16 = memory_budget(arch, hw, lay, Formats("bf16", "bf16", "bf16"), 0.9)
    fp8 = memory_budget(arch, hw, lay, Formats("bf16", "bf16", "fp8"), 0.9)
    nvfp4 = memory_budget(arch, hw, lay, Formats("bf16", "bf16", "nvfp4"), 0.9)
    # Llama-3.1-8B: 32 layers x 2 (K,V) x 8 heads x 128 dims = 65,536 elements per token.
    # BF16 16 bits -> 131,072 B; FP8 8 + 32/16384 bits -> 65,552 B (block-scale overhead);
    # NVFP4 4 + 8/16 bits -> 36,864 B.
    assert bf16.kv_bytes_per_token_per_gpu == 131072
    assert fp8.kv_bytes_per_token_per_gpu == pytest.approx(65552)
    assert nvfp4.kv_bytes_per_token_per_gpu == pytest.approx(36864)
    # Same bytes left for the cache, so tokens scale by 16/8.00195 = 1.99951 and 16/4.5 = 3.556
    for fmt, bits in ((fp8, 8 + 32 / 16384), (nvfp4, 4.5)):
        assert fmt.kv_capacity_tokens == pytest.approx(bf16.kv_capacity_tokens * 16 / bits,
                                                       abs=1)


def test_fp8_kv_cuts_preemptions_and_queueing_under_load() -> None:
    wide, narrow = _run("bf16"), _run("fp8")
    cw, cn = wide["kv_chain"], narrow["kv_chain"]
    assert cn["kv_capacity_tokens"] == pytest.approx(cw["kv_capacity_tokens"] * 1.9995, rel=1e-4)
    # 2,000-token sequences in 16-token blocks: 125 blocks each. BF16: 50,971 tokens = 3,185
    # blocks -> 25 sequences; FP8: 101,918 tokens = 6,369 blocks -> 50 sequences.
    assert cw["kv_capacity_tokens"] == 50_971 and cn["kv_capacity_tokens"] == 101_918
    assert (cw["max_batch_that_fits"], cn["max_batch_that_fits"]) == (25, 50)
    assert cw["batch_limited_by"] == cn["batch_limited_by"] == "kv_cache"
    assert narrow["preemptions"] < wide["preemptions"]
    assert cn["queue_s_p99"] < cw["queue_s_p99"]
    assert narrow["output_tokens_per_s"] > wide["output_tokens_per_s"]


def test_fp4_on_hopper_saves_memory_but_computes_at_fp8() -> None:
    arch, hw = load_architecture("llama-3.3-70b"), load_hardware("h100-sxm")
    lay = ParallelLayout(4, 1, 1, 1)
    fp8 = Formats("fp8", "fp8", "bf16")
    fp4 = replace(fp8, weights="nvfp4")
    m8, m4 = StepModel(arch, hw, lay, fp8), StepModel(arch, hw, lay, fp4)
    assert "fp4" not in hw.dense_flops_per_s
    assert m4.gemm_format == "fp8" and m4.gemm_flops_per_s == m8.gemm_flops_per_s
    w8 = memory_budget(arch, hw, lay, fp8, 0.9).weights_bytes_per_gpu
    w4 = memory_budget(arch, hw, lay, fp4, 0.9).weights_bytes_per_gpu
    assert w4 < 0.6 * w8  # 4.5 / 8.002 bits on the quantized linears
    # Big prefill: compute-bound GEMMs take the same time; decode: streaming fewer bytes wins.
    prefill = BatchShape.one_chunk(8192)
    assert m4.cost(prefill).compute_s == pytest.approx(m8.cost(prefill).compute_s, rel=1e-9)
    decode = BatchShape.one_chunk(0, decode_seqs=8, decode_context_tokens=8 * 1024)
    assert m4.cost(decode).memory_s < m8.cost(decode).memory_s
    notes = format_notes(m4)
    assert notes and "no FP4 tensor cores" in notes[0] and "dequantized" in notes[0]
    # B200 has FP4 tensor cores: no such note, and GEMMs run at FP4 when activations are FP4.
    b200 = StepModel(arch, load_hardware("b200"), lay, Formats("nvfp4", "nvfp4", "bf16"))
    assert b200.gemm_format == "fp4" and format_notes(b200) == []


def test_explain_shows_the_chain_and_the_hopper_note() -> None:
    e = explain("llama-3.3-70b", "h100-sxm", ParallelLayout(4, 1, 1, 1),
                Formats("nvfp4", "fp8", "fp8"), decode_batch=8, context=4096)
    text, data = e.to_text(), e.to_dict()
    assert "h100-sxm has no FP4 tensor cores" in text
    assert "KV-format chain" in text
    fp8_chain, bf16_chain = data["kv_chain"]
    assert (fp8_chain["kv_format"], bf16_chain["kv_format"]) == ("fp8", "bf16")
    # twice the tokens (up to block-scale bits), so about twice the sequences fit
    assert fp8_chain["max_batch_that_fits"] == pytest.approx(
        2 * bf16_chain["max_batch_that_fits"], abs=1)
    assert fp8_chain["output_tokens_per_s"] > bf16_chain["output_tokens_per_s"]
