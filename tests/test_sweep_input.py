"""Sweep input refused before it runs (issue 31, item 6): a swept value whose every point is
bad input (a misspelt GPU or model), one line and exit 2, nothing written; a sweep in which
no point simulates exits 1 after writing what it has."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simulator.sweep.grid import expand, load_sweep
from simulator.sweep.precheck import refused_value
from tests.cli_helpers import run_cli
from tests.sweep_helpers import small_sweep, write_sweep


def _sweep(tmp_path: Path, **changes: Any) -> Path:
    data = small_sweep()
    data["sweep"] = {"hardware.gpu": ["h100-sxm", "h100"], "deployment.tensor_parallel": [1, 2]}
    data.update(changes)
    return write_sweep(tmp_path / "s.yaml", data)


def test_a_misspelt_gpu_on_an_axis_is_refused_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code, stdout, err = run_cli(["sweep", str(_sweep(tmp_path)), "--out", str(out)], capsys)
    lines = [ln for ln in (stdout + err).splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1, stdout + err
    assert "hardware.gpu=h100 is refused at every point" in lines[0]
    assert "did you mean 'h100-sxm'" in lines[0]
    assert not out.exists()


def test_a_bad_base_model_is_named_as_such_not_blamed_on_an_axis(tmp_path: Path) -> None:
    spec = load_sweep(_sweep(tmp_path, model="llama-3.1-8bb"))
    why = refused_value(spec, expand(spec).points)
    assert why is not None and "every point is refused: unknown model 'llama-3.1-8bb'" in why


def test_a_value_that_only_fails_at_some_points_runs(tmp_path: Path) -> None:
    """A stand-in check that refuses tensor_parallel 2 only on h100: that value still has a
    good point (h100-sxm), so nothing is refused before running; every check of a point runs
    once, and a value stops at its first good point."""
    data = small_sweep()
    data["sweep"] = {"hardware.gpu": ["h100-sxm", "h200-sxm"],
                     "deployment.tensor_parallel": [1, 2]}
    spec = load_sweep(write_sweep(tmp_path / "s.yaml", data))
    points = expand(spec).points
    calls: list[str] = []

    def check(p: Any) -> str | None:
        calls.append(p.key)
        bad = p.values["hardware.gpu"] == "h200-sxm" and p.values[
            "deployment.tensor_parallel"] == 2
        return "refused" if bad else None

    assert refused_value(spec, points, check) is None
    assert len(calls) == len(set(calls))


def test_a_sweep_where_no_point_simulates_exits_1_and_keeps_its_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every point asks for 4 GPUs of 80 GB for a 405B model in BF16: each point is refused
    as not fitting (a finding, so it runs), none simulates: exit 1, results.csv written."""
    data = small_sweep()
    data["model"] = "llama-3.1-405b"
    data["sweep"] = {"deployment.tensor_parallel": [1, 2, 4]}
    out = tmp_path / "out"
    code, stdout, err = run_cli(["sweep", str(write_sweep(tmp_path / "s.yaml", data)),
                                 "--out", str(out), "--no-report"], capsys)
    assert code == 1, stdout + err
    assert "no point of the sweep simulated (3 refused by the engine" in err
    assert (out / "results.csv").is_file()
