"""`frontier bench-validate` prints its figures (a benchmark, never a timed test): one line of
setup, one per method with runs, wall and CPU seconds and the rate carried to the whole file,
and one per metric with the share of runs whose estimate is within 5 % of the simulation's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_helpers import run_cli
from tests.test_measured import DENSE, DISAGG, write_csv


def test_bench_validate_prints_a_line_per_method(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = write_csv(tmp_path / "r.csv", [DENSE, DISAGG, {**DENSE, "id": "d2",
                                                          "concurrency": "8"}])
    code, out, err = run_cli(["bench-validate", str(path), "--sample", "2", "--repeat", "1"],
                             capsys)
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0].startswith("bench-validate: 3 runs of ") and "simulate on 2 drawn" in lines[0]
    assert lines[1].startswith("estimate: 3 runs (3 scored) in ")
    assert lines[2].startswith("simulate: 2 runs (2 scored) in ")
    assert all("s CPU (medians of 1)" in ln and "all 3 runs at this rate" in ln
               for ln in lines[1:3])
    assert lines[3].startswith("estimate against simulation, ttft.mean: within 5% on ")
    assert lines[4].endswith("of 2 runs both scored (target >= 90%)")


def test_agreement_by_hand() -> None:
    """Two runs both scored: TPOT estimated 10.4 against 10.0 simulated (4 %, within 5 %) and
    12.0 against 10.0 (20 %): half agree; TTFT 100 against 100 and 95.1 against 100 (4.9 %):
    both agree. A run only one method scored does not count."""
    from simulator.bench.validate import agreement

    est = [{"id": "a", "status": "scored", "predicted": {"ttft.mean": 100.0, "tpot.mean": 10.4}},
           {"id": "b", "status": "scored", "predicted": {"ttft.mean": 95.1, "tpot.mean": 12.0}},
           {"id": "c", "status": "scored", "predicted": {"ttft.mean": 1.0, "tpot.mean": 1.0}}]
    sim = [{"id": "a", "status": "scored", "predicted": {"ttft.mean": 100.0, "tpot.mean": 10.0}},
           {"id": "b", "status": "scored", "predicted": {"ttft.mean": 100.0, "tpot.mean": 10.0}},
           {"id": "c", "status": "refused"}]
    assert agreement(est, sim) == {"ttft.mean": (2, 1.0), "tpot.mean": (2, 0.5)}


def test_bench_validate_refuses_a_missing_file(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["bench-validate", str(tmp_path / "none.csv")], capsys)
    assert code == 2 and err.strip().count("\n") == 0, err
