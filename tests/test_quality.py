"""Quality lookup: the published figure with its source, family fallbacks said to be
fallbacks, `unknown` where nothing is published, and the block every result carries."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.quality import lookup_quality
from simulator.quality.table import parse_deltas


def test_published_figure_with_its_source() -> None:
    # nvidia/DeepSeek-R1-FP4 card, FP8 -> NVFP4: MMLU 90.8->90.7, GSM8K 96.3->96.1,
    # AIME2024 80.0->80.0, GPQA-Diamond 69.7->69.2, MATH-500 95.4->94.2. Relative changes
    # -0.110, -0.208, 0, -0.717, -1.258 %; mean -2.293/5 = -0.459 %.
    q = lookup_quality("deepseek-r1", "nvfp4", "nvfp4", "fp8")
    assert q.basis == "measured"
    assert q.delta_pct == pytest.approx(-0.459, abs=1e-3)
    assert "nvidia/DeepSeek-R1-FP4" in q.source
    assert q.benchmark.split(", ") == ["MMLU", "GSM8K", "AIME2024", "GPQA-Diamond", "MATH-500"]
    assert "KV cache" in q.note  # the card does not say which KV format it ran


def test_measured_fp8_row() -> None:
    # RedHatAI Llama-3.1-70B-Instruct FP8 cards, OpenLLM v1 from 84.40: static 84.29
    # (-0.11/84.40 = -0.130 %), dynamic 84.16 (-0.24/84.40 = -0.284 %); mean -0.207 %.
    q = lookup_quality("llama-3.1-70b", "fp8", "fp8", "bf16")
    assert (q.basis, q.delta_pct) == ("measured", pytest.approx(-0.207, abs=1e-3))
    assert "FP8-dynamic" in q.source and q.benchmark.count("OpenLLM") == 2


def test_family_fallback_says_so() -> None:
    q = lookup_quality("llama-3.3-70b", "fp8", "fp8", "bf16")
    assert q.basis == "family"
    assert "fallback" in q.note and "llama-3.1-70b" in q.note
    assert q.delta_pct == pytest.approx(-0.207, abs=1e-3)
    # llama-3.1-8b borrows the Llama-3-8B-Instruct FP8 card: 68.71 -> 68.22 = -0.713 %
    q = lookup_quality("llama-3.1-8b", "fp8", "fp8", "bf16")
    assert (q.basis, q.delta_pct) == ("family", pytest.approx(-0.713, abs=1e-3))


@pytest.mark.parametrize("formats", [
    ("llama-3.3-70b", "nvfp4", "nvfp4", "bf16"),  # nothing published for Llama 70B NVFP4
    ("llama-3.3-70b", "mxfp4", "fp8", "fp8"),
    ("llama-3.1-70b", "fp8", "fp8", "fp8"),  # the FP8 card evaluated a BF16 KV cache only
    ("qwen3-8b", "fp8", "fp8", "bf16"),  # no row, no family
])
def test_unknown_where_nothing_is_published(formats: tuple[str, str, str, str]) -> None:
    q = lookup_quality(*formats)
    assert (q.basis, q.delta_pct, q.source) == ("unknown", None, "unknown")


def test_reference_and_lossless_widening_lose_nothing() -> None:
    assert lookup_quality("llama-3.3-70b", "bf16", "bf16", "bf16").delta_pct == 0.0
    # DeepSeek-R1 is published in FP8: serving it in FP8 is the checkpoint itself.
    assert lookup_quality("deepseek-r1", "fp8", "fp8", "bf16").delta_pct == 0.0
    assert lookup_quality("catalog/llama-3.3-70b.json", "bf16", "bf16", "bf16").basis == "measured"


def test_every_shipped_row_has_a_source() -> None:
    from simulator.quality.table import quality_rows

    rows = quality_rows()
    assert rows and all(r.source for r in rows)


def test_bad_data_row_is_one_clear_line(tmp_path: Path) -> None:
    bad = tmp_path / "q.csv"
    bad.write_text("model,family,benchmark,baseline_format,baseline_score,weights,activations,"
                   "kv_cache,score,source\nm,f,MMLU,bf16,80,fp5,fp8,bf16,79,card\n")
    with pytest.raises(ValueError, match=r"q.csv row 1: weights='fp5'"):
        parse_deltas(bad)
