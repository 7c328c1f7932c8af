"""Validation explanations are short data held to the current prediction (issue 29, item 4).

A row's likely_cause (validation/sources/*.yaml) says which way its prediction misses (`sign`),
the prediction it was written against (`predicted`), a short text of its own and the name of
one of its file's `causes`, each written once. When the code moves a prediction across its
tolerance, or more than 5 % (or the tolerance) away from what the explanation was written
against, this test names the row, so the explanation is reread rather than left stale."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simulator.errors import InputError
from simulator.validation.catalog import (
    CAUSE_TEXT_MAX,
    ROW_TEXT_MAX,
    all_rows,
    likely_causes,
    load_source,
    shared_causes,
)
from simulator.validation.runner import run_validation

PREDICTED_SLACK = 0.05  # `predicted` holds while within max(5 %, the row's tolerance)


@pytest.fixture(scope="module")
def scored() -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in run_validation(band=False)["rows"]}


def sign_of(error: float, tolerance_pct: float) -> str:
    if error < -tolerance_pct / 100:
        return "under"
    if error > tolerance_pct / 100:
        return "over"
    return "within"


# A row within this many percentage points of its tolerance's edge may be explained either way
# (the edge is a regression guard, not a physical threshold; a sign must not flip on noise).
EDGE_PP = 1.0


def signs_near(error: float, tolerance_pct: float) -> set[str]:
    return {sign_of(error, t) for t in (tolerance_pct - EDGE_PP, tolerance_pct,
                                        tolerance_pct + EDGE_PP)}


def test_signs_near_the_edge_are_both_accepted() -> None:
    assert signs_near(0.0303, 3) == {"within", "over"}
    assert signs_near(-0.10, 3) == {"under"} and signs_near(0.0, 3) == {"within"}


def test_sign_of_reads_the_tolerance() -> None:
    assert [sign_of(e, 3) for e in (-0.031, -0.03, 0.0, 0.03, 0.031)] == [
        "under", "within", "within", "within", "over"]


def test_every_explanation_holds_for_the_current_prediction(
    scored: dict[str, dict[str, Any]],
) -> None:
    rows = {r.id: r for r in all_rows()}
    explained = likely_causes()
    assert explained, "no row carries a likely_cause"
    problems = []
    for rid, lc in explained.items():
        row = rows[rid]
        if rid not in scored:
            problems.append(f"{rid}: explained but not scored")
            continue
        r = scored[rid]
        now = sign_of(r["error"], row.tolerance_pct)
        if lc.sign not in signs_near(r["error"], row.tolerance_pct):
            problems.append(f"{rid}: sign {lc.sign} but the error is now {r['error']:+.1%} "
                            f"({now}, tolerance {row.tolerance_pct:g} %)")
        if lc.predicted is not None:
            slack = max(PREDICTED_SLACK, row.tolerance_pct / 100)
            if abs(r["predicted"] / lc.predicted - 1) > slack:
                problems.append(f"{rid}: written against {lc.predicted:g}, predicted now "
                                f"{r['predicted']:.4g}")
    assert problems == [], "\n".join(problems)


def test_explanations_are_short_and_written_once() -> None:
    explained = likely_causes()
    texts: dict[str, str] = {}
    for rid, lc in explained.items():
        assert len(lc.text) <= ROW_TEXT_MAX, rid
        if lc.text:
            assert lc.text not in texts, f"{rid} repeats the text of {texts.get(lc.text)}"
            texts[lc.text] = rid
    named = {lc.cause for lc in explained.values() if lc.cause}
    shared = shared_causes()
    assert set(shared) == named  # every shared cause is used, and only those
    assert all(len(t) <= CAUSE_TEXT_MAX for t in shared.values())
    assert len(set(shared.values())) == len(shared)


MINIMAL = "source: a paper\nsubset: s\nrows:\n  - id: r1\n    metric: result\n    measured: 1\n"


@pytest.mark.parametrize(("block", "wanted"), [
    ("    likely_cause: {sign: under, cause: nowhere}\n",
     "r1: likely_cause.cause: no cause 'nowhere' in the file's causes"),
    ("    likely_cause: {sign: under, text: slow, why: x}\n", "r1: likely_cause.why"),
    ("    likely_cause: {sign: low, text: slow}\n", "r1: likely_cause.sign"),
    ("    likely_cause: {sign: under}\n", "r1: likely_cause: "),
    (f"    likely_cause: {{sign: under, text: {'x' * (ROW_TEXT_MAX + 1)}}}\n",
     "r1: likely_cause.text"),
])
def test_a_bad_likely_cause_is_one_line_naming_file_row_and_key(
    tmp_path: Path, block: str, wanted: str,
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(MINIMAL + block)
    with pytest.raises(InputError) as exc:
        load_source(bad)
    msg = str(exc.value)
    assert "\n" not in msg and str(bad) in msg and wanted in msg, msg


def test_causes_are_used_and_pending_rows_explain_themselves(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    named = MINIMAL.replace("rows:\n", "causes:\n  slow: a reason\nrows:\n")
    bad.write_text(named + "    likely_cause: {sign: under, cause: slow}\n")
    assert load_source(bad).causes == {"slow": "a reason"}
    bad.write_text(named)
    with pytest.raises(InputError, match=r"causes\.slow: no row's likely_cause names it"):
        load_source(bad)
    bad.write_text(MINIMAL + "    pending: not simulated yet\n"
                   "    likely_cause: {sign: under, text: slow}\n")
    with pytest.raises(InputError, match="r1: likely_cause: a pending row is not scored"):
        load_source(bad)


def test_cause_names_are_unique_across_files(tmp_path: Path) -> None:
    from simulator.validation.catalog import sources

    named = MINIMAL.replace("rows:\n", "causes:\n  slow: a reason\nrows:\n")
    (tmp_path / "a.yaml").write_text(named + "    likely_cause: {sign: under, cause: slow}\n")
    (tmp_path / "b.yaml").write_text(named.replace("id: r1", "id: r2")
                                     + "    likely_cause: {sign: over, cause: slow}\n")
    with pytest.raises(InputError, match=r"causes\.slow: name also in"):
        sources.__wrapped__(tmp_path)
