"""`frontier simulate`: JSON and table output, the CSV exports, and one-line input errors."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

import simulator
from simulator.serving.records import RECORD_DTYPE
from simulator.serving.simulation import TIMESERIES_COLUMNS
from tests.cli_helpers import run_cli

ROOT = Path(__file__).resolve().parent.parent
CHAT = str(ROOT / "scenarios" / "chat-llama-3.1-8b-h100.yaml")
N = "workload.num_requests=50"

DESIGN_KEYS = (
    "requests_completed", "requests_dropped", "duration_s", "num_gpus",
    "output_tokens_per_s", "output_tokens_per_s_per_gpu", "input_tokens_per_s",
    "requests_per_s", "ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_s",
    "output_tokens_per_s_per_user", "goodput_requests_per_s", "slo_attainment",
)
BLOCKS = ("ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_s", "output_tokens_per_s_per_user")




def test_json_has_every_design_key(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["simulate", CHAT, "--set", N, "--json"], capsys)
    assert code == 0, err
    d = json.loads(out)
    for key in DESIGN_KEYS:
        assert key in d, key
    for key in BLOCKS:
        assert set(d[key]) == {"mean", "p50", "p90", "p99"}
        assert all(math.isfinite(v) for v in d[key].values())
    assert d["requests_completed"] == 50
    assert d["num_gpus"] == 1
    assert 0.0 <= d["slo_attainment"] <= 1.0  # the chat scenario names an SLO
    assert d["status"] == "completed"


def test_json_matches_the_python_api(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["simulate", CHAT, "--set", N, "--json"], capsys)
    assert code == 0
    api = simulator.simulate(simulator.load_scenario(CHAT, [N])).to_dict()
    assert json.loads(out) == json.loads(json.dumps(api))


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["simulate", CHAT, "--set", N], capsys)
    assert code == 0, err
    assert "50 completed" in out and "0 dropped" in out
    assert "output tok/s" in out
    for label in ("TTFT", "TPOT", "ITL", "E2E", "queue"):
        assert any(line.startswith(label) for line in out.splitlines()), label
    assert "SLO:" in out


def test_requests_csv_and_timeseries(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reqs, ts = tmp_path / "requests.csv", tmp_path / "steps.csv"
    code, _, err = run_cli(
        ["simulate", CHAT, "--set", N, "--requests-csv", str(reqs), "--timeseries", str(ts)],
        capsys,
    )
    assert code == 0, err
    with reqs.open() as f:
        rows = list(csv.reader(f))
    assert rows[0] == list(RECORD_DTYPE.names or ())
    assert len(rows) == 1 + 50
    with ts.open() as f:
        steps = list(csv.reader(f))
    assert steps[0] == list(TIMESERIES_COLUMNS)
    api = simulator.simulate(simulator.load_scenario(CHAT, [N]), timeseries=True)
    assert api.timeseries is not None
    assert len(steps) == 1 + len(api.timeseries)
    # times increase down the file and every request's finish lies on a step end
    times = [float(r[0]) for r in steps[1:]]
    assert times == sorted(times)
    finish = {float(r[3]) for r in rows[1:]}
    assert max(finish) == pytest.approx(times[-1], rel=1e-8)


def _one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_unknown_key_in_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "model: llama-3.1-8b\n"
        "hardware: {gpu: h100-sxm}\n"
        "deployment: {scheduler: {max_num_seqz: 8}}\n"
        "workload:\n"
        "  arrival: {kind: offline}\n"
        "  input_tokens: {kind: fixed, value: 10}\n"
        "  output_tokens: {kind: fixed, value: 10}\n"
    )
    code, out, err = run_cli(["simulate", str(bad), "--json"], capsys)
    assert code == 2 and out == ""
    line = _one_line_error(err)
    assert str(bad) in line
    assert "deployment.scheduler.max_num_seqz" in line


def test_bad_set_value(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        ["simulate", CHAT, "--set", "deployment.tensor_parallel=abc", "--json"], capsys
    )
    assert code == 2 and out == ""
    line = _one_line_error(err)
    assert CHAT in line and "deployment.tensor_parallel" in line and "abc" in line


def test_malformed_set(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["simulate", CHAT, "--set", "workload.num_requests"], capsys)
    assert code == 2
    assert "key.path=value" in _one_line_error(err)


def test_entry_point_subprocess(tmp_path: Path) -> None:
    """The real process: stdout is JSON only; a bad key exits 2 with one stderr line."""
    ok = subprocess.run(
        [sys.executable, "-m", "simulator", "simulate", CHAT, "--set", N, "--json"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["requests_completed"] == 50
    bad = subprocess.run(
        [sys.executable, "-m", "simulator", "simulate", CHAT, "--set", "workload.bogus=1"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert bad.returncode == 2 and bad.stdout == ""
    line = _one_line_error(bad.stderr)
    assert CHAT in line and "workload.bogus" in line


def test_shipped_scenario_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a plain pip install there is no scenarios/ folder in the working directory: a
    shipped scenario's name works in place of its path, and `scenarios list` shows them all."""
    from simulator.inputs.shipped import shipped_scenarios

    monkeypatch.chdir(tmp_path)
    loaded = simulator.load_scenario("chat-llama-3.1-8b-h100", ["workload.num_requests=5"])
    assert loaded.scenario.model == "llama-3.1-8b"
    names = set(shipped_scenarios())
    assert {"chat-llama-3.1-8b-h100", "sweeps/tp-vs-load-llama-70b-h100"} <= names
    out = subprocess.run(
        [sys.executable, "-m", "simulator", "scenarios", "list"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert all(n in out for n in names)
