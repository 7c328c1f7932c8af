"""Bounds on the size of an input: YAML alias bombs ("billion laughs") in every YAML surface, a
sweep grid past MAX_GRID_POINTS, and --skip-bad-rows wherever a trace is read (simulate,
sweep, report)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from sweep_helpers import small_sweep, write_sweep
from test_fuzz import run_cli

from simulator.errors import InputError
from simulator.sweep import load_sweep, run_sweep
from simulator.sweep.grid import MAX_GRID_POINTS
from simulator.yamlsafe import MAX_EXPANDED_NODES, YAMLBombError, safe_load_bounded
from tests.cli_helpers import TINY_SCENARIO

SCENARIO = TINY_SCENARIO


def laughs(levels: int = 9, key: str = "lol") -> str:
    """The classic bomb: each anchor lists the previous one ten times, 10^levels leaves."""
    lines = [f'{key}0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"{key}{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]"
              for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code, out, err = run_cli(argv, capsys)
    assert "Traceback" not in err, err
    return code, out, err


# ------------------------------------------------------------------------- billion laughs


def test_alias_bomb_is_refused_by_its_expanded_size() -> None:
    with pytest.raises(YAMLBombError, match=f"more than {MAX_EXPANDED_NODES:,} nodes"):
        safe_load_bounded(laughs())
    with pytest.raises(YAMLBombError, match="recursive"):
        safe_load_bounded("a: &x [1, *x]\n")
    # aliases that stay small are ordinary YAML: 1 + 2 keys + the shared mapping twice
    assert safe_load_bounded("a: &x {b: 1}\nc: *x\n") == {"a": {"b": 1}, "c": {"b": 1}}


@pytest.mark.parametrize("surface", ["scenario", "sweep", "set", "hardware", "report"])
def test_alias_bomb_in_every_yaml_surface_is_one_line(
    surface: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bomb = tmp_path / "bomb.yaml"
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(SCENARIO))
    if surface == "scenario":
        bomb.write_text(yaml.safe_dump(SCENARIO) + laughs(key="x_"))
        argv = ["simulate", str(bomb)]
    elif surface == "sweep":
        bomb.write_text(yaml.safe_dump(SCENARIO) + laughs(key="x_"))
        argv = ["sweep", str(bomb), "--out", str(tmp_path / "out")]
    elif surface == "set":
        flow = laughs().replace("\n", ", ").rstrip(", ")
        argv = ["simulate", str(base), "--set", f"workload.seed={{{flow}}}"]
    elif surface == "hardware":
        folder = tmp_path / "profiles"
        folder.mkdir()
        (folder / "bomb-gpu.yaml").write_text(laughs())
        monkeypatch.setenv("FRONTIER_HARDWARE_PATH", str(folder))
        argv = ["simulate", str(base), "--set", "hardware.gpu=bomb-gpu"]
    else:
        bomb.write_text(yaml.safe_dump(SCENARIO) + laughs(key="x_"))
        argv = ["report", str(bomb), "--out", str(tmp_path / "r.html")]
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    assert "billion laughs" in line, line


# ------------------------------------------------------------------------------ grid limit


def test_grid_past_the_limit_is_refused_before_any_point_exists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = small_sweep()
    # 1000 × 1000 seeds = 1,000,000 points, times the file's other axes (2 × 2 × 2)
    data["sweep"]["workload.seed"] = list(range(1000))
    data["sweep"]["workload.num_requests"] = list(range(1, 1001))
    path = write_sweep(tmp_path / "big.yaml", data)
    with pytest.raises(InputError) as info:
        load_sweep(path)
    msg = str(info.value)
    assert "8,000,000 points" in msg and f"limit of {MAX_GRID_POINTS:,}" in msg
    assert "1000 (workload.seed)" in msg and "2 (deployment.precision.weights+" in msg
    out = tmp_path / "out"
    code, _, err = run(["sweep", str(path), "--out", str(out)], capsys)
    assert code == 2 and "8,000,000 points" in err and not out.exists()


def test_grid_at_the_limit_is_not_refused_by_size() -> None:
    data = small_sweep()
    del data["sweep"]["zip"], data["sweep"]["workload.arrival.concurrency"]
    data["sweep"]["deployment.tensor_parallel"] = [1]
    data["sweep"]["workload.seed"] = list(range(MAX_GRID_POINTS))
    assert load_sweep(data).grid_size == MAX_GRID_POINTS


# ----------------------------------------------------------- --skip-bad-rows everywhere


def _trace_sweep(tmp_path: Path) -> Path:
    # line 3 passes llama-3.1-8b's 131072-token window; line 4 is not a number
    (tmp_path / "trace.csv").write_text(
        "arrival_s,input_tokens,output_tokens\n0.0,100,10\n0.1,131000,100\n0.2,x,3\n0.3,50,5\n")
    data = copy.deepcopy(small_sweep())
    w = data["workload"]
    del w["input_tokens"], w["output_tokens"]
    w["arrival"] = {"kind": "trace", "path": "trace.csv"}
    data["sweep"] = {"deployment.tensor_parallel": [1, 2]}
    return write_sweep(tmp_path / "trace-sweep.yaml", data)


def test_sweep_refuses_bad_trace_rows_unless_skipped(tmp_path: Path) -> None:
    path = _trace_sweep(tmp_path)
    refused = run_sweep(path, tmp_path / "a", workers=1)
    assert refused.ok == 0 and sum(refused.dropped.values()) == 2
    (example,) = set(refused.examples.values())
    assert "2 bad rows at lines 3, 4" in example and "--skip-bad-rows" in example
    skipped = run_sweep(path, tmp_path / "b", workers=1, skip_bad_rows=True)
    assert skipped.ok == 2
    stored = [json.loads(line) for line in (tmp_path / "b" / "store.jsonl").read_text()
              .splitlines()]
    for rec in stored:
        assert rec["result"]["requests_completed"] == 2
        assert any("skipped 2 bad rows (lines 3, 4)" in w for w in rec["result"]["warnings"])


def test_sweep_and_report_cli_take_skip_bad_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _trace_sweep(tmp_path)
    code, out, err = run(["sweep", str(path), "--out", str(tmp_path / "o"), "--workers", "1",
                          "--no-report", "--skip-bad-rows"], capsys)
    assert code == 0 and "2 simulated, 0 crashed" in out, (out, err)
    point = sorted((tmp_path / "o" / "points").glob("*.yaml"))[0]
    code, _, err = run(["report", str(point), "--out", str(tmp_path / "p.html")], capsys)
    assert code == 2 and "--skip-bad-rows" in err
    code, _, err = run(["report", str(point), "--out", str(tmp_path / "p.html"),
                        "--skip-bad-rows"], capsys)
    assert code == 0, err
