"""Fidelity guard: predictions against published measurements (simulator/validation/).

Targets from the first fidelity issue: median absolute error <= 15% and p90 <= 30% over the
throughput and ratio rows; from issue 15, per metric (TTFT, TPOT, throughput): median <= 10%
and p90 <= 25%. No row may drift from its recorded prediction by more than its tolerance unless
the baseline is updated deliberately (`frontier validate --update-baseline`).
"""

from __future__ import annotations

import itertools

import pytest

from simulator.validation.rows import load_rows, metric_class
from simulator.validation.runner import (
    TARGET_MEDIAN,
    TARGET_P90,
    group_stats,
    load_baseline,
    predict,
    run_validation,
)


@pytest.fixture(scope="module")
def result() -> dict:
    return run_validation(band=False)


def _overall_but_ttft() -> dict[str, float]:
    rows = [r for r in load_rows() if not r.pending and r.measured is not None]
    cache: dict = {}
    scored = [predict(r, cache=cache) for r in rows if metric_class(r.metric) != "TTFT"]
    return group_stats(scored)["overall"]["all"]


def test_overall_error_within_targets() -> None:
    """The first fidelity targets, over every row but TTFT (TTFT has its own target below)."""
    overall = _overall_but_ttft()
    assert overall["rows"] >= 20
    assert overall["median_abs_error"] <= 0.15, overall
    assert overall["p90_abs_error"] <= 0.30, overall


def test_errors_are_reported_per_metric(result: dict) -> None:
    """TTFT, TPOT and throughput are scored apart, each on rows of its own (issue 15)."""
    measures = result["groups"]["measures"]
    assert {"TTFT", "TPOT", "throughput"} <= measures.keys()
    assert all(measures[m]["rows"] >= 5 for m in ("TTFT", "TPOT", "throughput")), measures
    rows = {r["id"]: r for r in result["rows"]}
    assert rows["ix-dsr1-h200-sglang-fp8-tp8-c8-ttft"]["measures"] == "TTFT"
    assert rows["ix-dsr1-h200-sglang-fp8-tp8-c8-tpot"]["measures"] == "TPOT"


# TPOT and throughput meet the issue's targets since the MoE block (B200) and weight-only
# (Marlin, H100) refits: measured 5.2% / 21.2% and 6.3% / 19.6% (REPORT.md). The TRT-LLM
# DeepSeek-R1 B200 TP8 low-concurrency rows (-22% TPOT, +29..+33% out/GPU) are what is left.
@pytest.mark.parametrize("measures", ["TPOT", "throughput"])
def test_metric_within_issue_targets(result: dict, measures: str) -> None:
    st = result["groups"]["measures"][measures]
    assert st["median_abs_error"] <= TARGET_MEDIAN, st


@pytest.mark.parametrize("measures", ["TPOT", "throughput"])
def test_metric_p90_within_issue_targets(result: dict, measures: str) -> None:
    st = result["groups"]["measures"][measures]
    assert st["p90_abs_error"] <= TARGET_P90, st


@pytest.mark.xfail(
    strict=True,
    reason="TTFT is predicted 17-70% too low on the InferenceX DeepSeek-R1 SGLang and TensorRT-LLM "
    "rows (median 55.5%, REPORT.md 'Errors per metric'); strict, so this fails loudly once the "
    "target is met",
)
def test_ttft_within_issue_targets(result: dict) -> None:
    st = result["groups"]["measures"]["TTFT"]
    assert st["median_abs_error"] <= TARGET_MEDIAN, st
    assert st["p90_abs_error"] <= TARGET_P90, st


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


# Two setups measured closer than this are not ordered: each source gives one run per point,
# so an order that close is not established by the measurement.
RANK_TIE = 0.05

# Known misorderings, each a measured pair the simulator orders the other way; kept out of the
# ranking check and asserted to be still misordered, so a fix fails the test and asks for its
# removal. The two gpt-oss-120b H100 TP8 8k/1k vs 1k/1k pairs are ordered right since the
# weight-only (Marlin) refit. Llama-3.1-8B FP8 on one H200 under TensorRT-LLM: 128/2048
# measured 26,221 tok/s against 27,911 at 128/128 (6 % apart), predicted 24,493 against
# 24,440, a tie in the model (0.2 %) since memory is what CUDA reports (140.4 GiB): the larger
# KV pool lifts the long-output run's batch, while 128/128 is held by its step budget.
MISRANKED: set[tuple[str, str]] = {
    ("trtllm-llama-3.1-8b-h200-sxm-tp1-fp8-128-2048",
     "trtllm-llama-3.1-8b-h200-sxm-tp1-fp8-128-128"),
}


def test_ranking_within_model_and_gpu_matches_measurements(result: dict) -> None:
    """Within one model on one GPU and engine the simulator must order the measured setups as
    the measurements do (TRT-LLM input/output shapes, InferenceX concurrencies), for every
    metric, whatever its absolute error."""
    rows = {r.id: r for r in load_rows()}
    groups: dict[tuple[str, ...], list[tuple[float, float]]] = {}
    for r in result["rows"]:
        row = rows[r["id"]]
        key = (row.model, row.gpu, row.fields["engine"], row.weights, row.metric)
        groups.setdefault(key, []).append((r["measured"], r["predicted"], r["id"]))
    checked, misranked = 0, set()
    for key, pairs in groups.items():
        for (m1, p1, a), (m2, p2, b) in itertools.combinations(sorted(pairs), 2):
            if m2 <= m1 * (1 + RANK_TIE):
                continue
            if (a, b) in MISRANKED:
                if p2 <= p1:
                    misranked.add((a, b))
                continue
            assert p2 > p1, f"{key}: measured {m1:.4g} < {m2:.4g}, predicted {p1:.4g} >= {p2:.4g}"
            checked += 1
    assert checked >= 20
    assert misranked == MISRANKED, (
        f"now ordered right, drop from MISRANKED: {MISRANKED - misranked}"
    )


def test_uncertainty_band_covers_most_rows() -> None:
    """The low/high efficiency profiles (each GPU's stated spread of its measured factors)
    should bracket the measurement on most calibration rows; the report states the figure."""
    coverage = run_validation(subset="trtllm-perf-overview", band=True)["band_coverage"]
    assert coverage is not None and coverage > 0.5, coverage


def test_config_ranking_matches_where_the_target_can_resolve_it(result: dict) -> None:
    """Issue 15: the config ranking within a model and GPU still matches the measurements.
    Predictions within the 10% target can only be relied on to order configs measured more
    than 22.2% apart (ranking.resolvable_gap); every such pair must come out in order."""
    from simulator.validation.ranking import RankedPair, resolvable_gap

    pairs = [RankedPair(**p) for p in result["ranking"]]
    assert len(pairs) >= 100  # gpt-oss H100 and DeepSeek-R1 B200/H200 groups (REPORT.md)
    gap = resolvable_gap(TARGET_MEDIAN)
    wrong = [p for p in pairs if not p.concordant and p.measured_gap > gap]
    assert wrong == []


def test_source_files_are_strict_with_one_line_errors(tmp_path) -> None:
    """A source file (validation/sources/) rejects unknown keys, naming the file, row and key."""
    from simulator.errors import InputError
    from simulator.validation.catalog import SOURCES, load_source, sources

    good = (SOURCES / "09-splitwise.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(good.replace("  - id: disagg-04\n", "  - id: disagg-04\n    mesured: 1\n"))
    with pytest.raises(InputError) as exc:
        load_source(bad)
    msg = str(exc.value)
    assert "\n" not in msg and str(bad) in msg and "disagg-04" in msg and "mesured" in msg
    bad.write_text(good + "extra: 1\n")
    with pytest.raises(InputError, match="extra"):
        load_source(bad)
    twice = tmp_path / "twice"
    twice.mkdir()
    (twice / "a.yaml").write_text(good)
    (twice / "b.yaml").write_text(good)
    with pytest.raises(InputError, match="disagg-04: id also in"):
        sources.__wrapped__(twice)


def test_ratio_rows_name_setups_of_their_file(tmp_path) -> None:
    from simulator.errors import InputError
    from simulator.validation.catalog import SOURCES, load_source

    bad = tmp_path / "bad.yaml"
    text = (SOURCES / "08-distserve.yaml").read_text()
    bad.write_text(text.replace("goodput_ratio: [colocated, decode_only]",
                                "goodput_ratio: [colocated, nowhere]"))
    with pytest.raises(InputError, match="disagg-00: goodput_ratio: no goodput 'nowhere'"):
        load_source(bad)
