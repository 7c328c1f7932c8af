"""Validation rows that cannot test fidelity are kept out of the headline errors (issue 29,
item 4): in-sample rows (a shipped value was fitted to what they score), insensitive rows (their
prediction does not move with the GPU profile they name) and sampler checks (acceptance-only
rows). Each tag is data in the row's source file, and these tests hold it to the truth."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.errors import InputError
from simulator.hardware.profile import load_hardware
from simulator.validation.catalog import load_source
from simulator.validation.rows import Row, load_rows
from simulator.validation.runner import Scored, group_stats
from simulator.validation.speculative_rows import predict_speculative
from simulator.validation.uncertainty import perturbed
from tests.test_provenance import IN_SAMPLE_OF


def test_in_sample_rows_are_those_a_fitted_value_scores() -> None:
    """The rows tagged in-sample are exactly the ones the provenance test finds circular."""
    circular = set().union(*(rows for rows, _ in IN_SAMPLE_OF.values()))
    tagged = {r.id for r in load_rows() if r.check == "in-sample"}
    assert tagged == circular


def test_acceptance_rows_are_sampler_checks() -> None:
    rows = load_rows()
    assert all((r.check == "sampler") == (r.metric == "acceptance_length") for r in rows)
    assert any(r.check == "sampler" for r in rows)


@pytest.mark.parametrize("row", [r for r in load_rows() if r.check == "insensitive"],
                         ids=lambda r: r.id)
def test_insensitive_rows_do_not_move_with_their_gpu(row: Row) -> None:
    """Across the GPU profile's uncertainty band (every fraction x (1 -/+ spread), every fixed
    cost the reverse) the prediction moves less than 1%: the row cannot test the GPU."""
    hw = load_hardware(row.gpu)
    values = [predict_speculative(row.id, row.metric, row.scenario(), perturbed(hw, d))
              for d in (0, -1, 1)]
    assert (max(values) - min(values)) / values[0] < 0.01, values


def _scored(rid: str, error: float, check: str | None) -> Scored:
    row = Row(rid, "s", "src", "m-1", "h100-sxm", "tpot_s.mean", 1.0, "s", 3, "", "",
              {"weights": "bf16"}, check, "why" if check else "")
    return Scored(row, 1.0 + error, None, None)


def test_checked_rows_leave_the_headline_and_are_reported_apart() -> None:
    """Errors 10 % and 30 % on two TPOT rows, 1 % on an in-sample one and 0 % on a sampler
    check: the headline's median is (10 + 30) / 2 = 20 %, the checks have their own lines."""
    stats = group_stats([_scored("a", 0.10, None), _scored("b", -0.30, None),
                         _scored("c", 0.01, "in-sample"), _scored("d", 0.0, "sampler")])
    assert stats["measures"]["TPOT"]["rows"] == 2
    assert stats["measures"]["TPOT"]["median_abs_error"] == pytest.approx(0.20)
    assert stats["overall"]["all"]["rows"] == 2
    assert stats["checks"]["in-sample"]["median_abs_error"] == pytest.approx(0.01)
    assert stats["checks"]["sampler"]["rows"] == 1
    assert stats["gpu"]["h100-sxm"]["rows"] == 2


@pytest.mark.parametrize("extra", ["    check: in-sample\n", "    check_reason: because\n",
                                   "    check: guessed\n    check_reason: x\n"])
def test_a_check_needs_its_reason_and_a_known_kind(extra: str, tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("source: s\nsubset: t\nrows:\n  - id: r1\n    metric: tpot_s.mean\n"
                    "    measured: 1.0\n" + extra)
    with pytest.raises(InputError, match="r1") as err:
        load_source(path)
    assert "\n" not in str(err.value)


def test_part_errors_are_each_parts_own() -> None:
    """A ratio measured 1.6 / 10 = 0.16 and predicted 4.8 / 30 = 0.16 is exact as a ratio but
    each part is +200 %: the parts carry their own errors."""
    row = Row("r", "s", "src", "m-1", "a100-sxm", "slo_rate_ratio", 0.16, "x", 3, "", "",
              {"weights": "fp16"}, measured_parts=(1.6, 10.0), parts_unit="req/s")
    s = Scored(row, 0.16, None, None, (4.8, 30.0))
    assert s.error == pytest.approx(0.0)
    assert s.part_errors == pytest.approx((2.0, 2.0))
    assert Scored(row, 0.16, None, None).part_errors is None


def test_ratio_parts_are_scored_in_the_headline() -> None:
    """Every row that publishes its parts is scored on them (two errors a row in `ratio
    parts`), each part against its own published figure: DistServe's Figure 1 colocated over
    decode-only goodput (1.6 / 10 req/s, disagg-00) lands within 25 % as a ratio while each
    goodput is more than twice the paper's, which the ratio alone hid."""
    from simulator.validation.runner import run_validation

    rows = [r for r in load_rows() if r.measured_parts is not None]
    assert {r.id for r in rows} >= {"disagg-00", "disagg-01", "disagg-02"}
    result = run_validation(subset=None)
    scored = {r["id"]: r for r in result["rows"]}
    for row in rows:
        parts = scored[row.id]["parts"]
        assert parts is not None and parts["measured"] == list(row.measured_parts or ())
    d0 = scored["disagg-00"]
    assert abs(d0["error"]) < 0.25 and min(d0["parts"]["errors"]) > 1.0
    headline = [r for r in rows if r.check is None]
    assert result["groups"]["measures"]["ratio parts"]["rows"] == 2 * len(headline)


@pytest.mark.parametrize(("extra", "needle"), [
    ("    metric: speedup\n    measured: 2.0\n    measured_parts: [3.0, 1.0]\n", "is not"),
    ("    metric: speedup\n    measured: 2.0\n    measured_parts: [0, 1.0]\n", "positive"),
    ("    metric: tpot_s.mean\n    measured: 2.0\n    measured_parts: [4.0, 2.0]\n",
     "applies to"),
])
def test_measured_parts_are_checked(extra: str, needle: str, tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("source: s\nsubset: t\nrows:\n  - id: r1\n" + extra)
    with pytest.raises(InputError, match=needle):
        load_source(path)
