"""The Ray backend on a local Ray instance gives the same rows as the local backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from sweep_helpers import small_sweep

from simulator.sweep import run_sweep
from simulator.sweep.table import read_csv

ray = pytest.importorskip("ray", reason="ray is not installed (pip install '.[ray]')")


def test_ray_backend_matches_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a local instance, never a real cluster
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    data = small_sweep()
    local = run_sweep(data, tmp_path / "local", backend="local", workers=2)
    remote = run_sweep(data, tmp_path / "ray", backend="ray", workers=2)
    assert remote.ok == local.ok == 8
    cols_l, rows_l = read_csv(tmp_path / "local" / "results.csv")
    cols_r, rows_r = read_csv(tmp_path / "ray" / "results.csv")
    assert cols_l == cols_r
    assert rows_l == rows_r  # same points, same order, bit-identical results
    assert (tmp_path / "local" / "frontier.csv").read_text() == (
        tmp_path / "ray" / "frontier.csv").read_text()
    assert not ray.is_initialized()  # the instance the sweep started is shut down
