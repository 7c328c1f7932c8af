"""Fidelity guard: predictions against published measurements (simulator/validation/).

Targets from the fidelity issue: median absolute error <= 15% and p90 <= 30% on the
calibration set, and no row drifting from its recorded prediction by more than its tolerance
unless the baseline is updated deliberately (`frontier validate --update-baseline`).
"""

from __future__ import annotations

import pytest

from simulator.validation.rows import load_rows
from simulator.validation.runner import load_baseline, run_validation


@pytest.fixture(scope="module")
def result() -> dict:
    return run_validation(band=False)


def test_overall_error_within_targets(result: dict) -> None:
    overall = result["groups"]["overall"]["all"]
    assert overall["rows"] >= 20
    assert overall["median_abs_error"] <= 0.15, overall
    assert overall["p90_abs_error"] <= 0.30, overall


def test_rows_match_their_recorded_predictions(result: dict) -> None:
    baseline = load_baseline()
    tolerance = {r.id: r.tolerance_pct / 100 for r in load_rows()}
    moved = []
    for row in result["rows"]:
        before = baseline.get(row["id"])
        assert before is not None, f"{row['id']} has no recorded prediction; update the baseline"
        if abs(row["predicted"] / before - 1) > tolerance[row["id"]]:
            moved.append(f"{row['id']}: {before:.4g} -> {row['predicted']:.4g}")
    assert not moved, "predictions moved beyond tolerance: " + "; ".join(moved)


def test_pending_rows_say_what_is_missing() -> None:
    rows = load_rows()
    pending = [r for r in rows if r.pending]
    assert pending, "speculative and disaggregation rows are expected to be pending"
    assert all(len(r.pending) > 20 for r in pending)
    assert {r.subset for r in pending} >= {"speculative", "disaggregation", "mlperf-v4.1"}


def test_every_row_cites_a_source() -> None:
    assert all(r.source for r in load_rows())


def test_ranking_within_model_and_gpu_matches_measurements(result: dict) -> None:
    """Within one model on one GPU the simulator must order the measured setups as the
    measurements do (here: the TRT-LLM input/output shapes), whatever its absolute error."""
    rows = {r.id: r for r in load_rows()}
    groups: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for r in result["rows"]:
        row = rows[r["id"]]
        key = (row.model, row.gpu, row.metric)
        groups.setdefault(key, []).append((r["measured"], r["predicted"]))
    checked = 0
    for key, pairs in groups.items():
        if len(pairs) < 2:
            continue
        by_measured = [p for _, p in sorted(pairs)]
        assert by_measured == sorted(by_measured), f"{key}: predicted order differs: {pairs}"
        checked += 1
    assert checked >= 4


def test_uncertainty_band_covers_most_rows() -> None:
    """The low/high efficiency profiles (each GPU's stated spread of its measured factors)
    should bracket the measurement on most calibration rows; the report states the figure."""
    coverage = run_validation(subset="trtllm-perf-overview", band=True)["band_coverage"]
    assert coverage is not None and coverage > 0.5, coverage
