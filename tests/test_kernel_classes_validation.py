"""The kernel classes against the model before them, on the project's own throughput rows:
the GEMM and attention classes (and the 1.5 us kernel figure) are fitted to kernel rows, not
to these, and must not make the serving throughput predictions worse."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.hardware.gemm_classes import KERNEL_MODEL_ENV
from simulator.hardware.profile import profile_paths
from simulator.validation.rows import load_rows, metric_class
from simulator.validation.runner import group_stats, predict

# Rows added after the classes were fitted on which they do worse than the flat model: the
# TensorRT-LLM DeepSeek-R1 FP8 points on B200 (InferenceX PR #3317). Measured there, flat ->
# classes: DeepSeek TP8 conc 4 +21% -> +51% at first, +33% since the MoE block fit
# (tests/test_moe_block_rows.py); the low-batch TP8 steps are still short of a fixed cost
# per layer the model does not charge. An open finding for cause 3, kept apart here and
# checked to still be worse, so a fix shows up as a failure that asks to fold them back. The
# gpt-oss-120b H100 rows beyond 1k/1k TP8 (InferenceX issue #828) were folded back once the
# weight-only class was refitted (Marlin: dense streaming + 12.6 us per launch, 16-row tiles).
LATER_ROWS = ("ix-dsr1-b200-trt-",)


def _throughput_stats(later: bool = False) -> dict[str, float]:
    rows = [r for r in load_rows() if not r.pending and r.measured is not None]
    rows = [r for r in rows if r.id.startswith(LATER_ROWS) == later]
    cache: dict = {}
    scored = [predict(r, cache=cache) for r in rows if metric_class(r.metric) == "throughput"]
    return group_stats(scored)["overall"]["all"]


def test_classes_do_not_worsen_throughput_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    after, after_later = _throughput_stats(), _throughput_stats(later=True)
    # The model before issue 15's causes 3 and 5: flat fractions, generic attention, 4 us
    # per kernel (copies of the shipped profiles with that one figure put back).
    for name in ("h100-sxm", "h200-sxm", "b200", "gb200"):
        text = profile_paths()[name].read_text()
        old = text.replace("kernel_launch_overhead_us: 1.5", "kernel_launch_overhead_us: 4.0")
        assert old != text
        (tmp_path / f"{name}.yaml").write_text(old)
    monkeypatch.setenv("FRONTIER_HARDWARE_PATH", str(tmp_path))
    monkeypatch.setenv(KERNEL_MODEL_ENV, "flat")
    before, before_later = _throughput_stats(), _throughput_stats(later=True)
    # Measured: median 8.4% -> 5.7%, p90 17.1% -> 15.9% over 44 rows (later rows: 10.9% / 20.9%
    # -> 19.6% / 29.7% over 7).
    assert before["median_abs_error"] != after["median_abs_error"]  # the copies took effect
    assert after["rows"] == before["rows"] >= 30
    assert after["median_abs_error"] <= before["median_abs_error"], (before, after)
    assert after["p90_abs_error"] <= before["p90_abs_error"], (before, after)
    # The later rows: still worse with the classes (see LATER_ROWS).
    assert after_later["p90_abs_error"] > before_later["p90_abs_error"], (before_later, after_later)
