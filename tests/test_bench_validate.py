"""`frontier bench-validate` prints its figures (a benchmark, never a timed test): one line of
setup, one per method with runs, wall and CPU seconds and the rate carried to the whole file."""

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
               for ln in lines[1:])


def test_bench_validate_refuses_a_missing_file(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["bench-validate", str(tmp_path / "none.csv")], capsys)
    assert code == 2 and err.strip().count("\n") == 0, err
