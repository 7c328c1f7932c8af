"""Inputs an outside audit found silently accepted or ending in a traceback (issue 34, classes 7
and 8), each now one line and exit status 2 (or, for a store line, skipped and counted)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from sweep_helpers import small_sweep, write_sweep
from test_fuzz import run_cli

from simulator.model.load import CATALOG_DIR
from simulator.sweep import run_sweep
from tests.cli_helpers import TINY_SCENARIO

SCENARIO = TINY_SCENARIO


def _one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and out == "" and "Traceback" not in err, (argv, code, err)
    (line,) = err.strip().splitlines()
    return line


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    return path


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("sweep")
    run_sweep(write_sweep(tmp / "s.yaml", small_sweep()), tmp / "out", workers=1)
    return tmp / "out"


@pytest.mark.parametrize("value", ["true", "false", "'2'", "2.0"])
def test_booleans_strings_and_floats_are_no_integers(
    value: str, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _one_line(["simulate", str(scenario), "--set",
                      f"deployment.tensor_parallel={value}"], capsys)
    assert "deployment.tensor_parallel" in line and "integer" in line, line


def test_exponent_without_a_dot_is_a_number(scenario: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """YAML 1.1 reads 1e3 as a string; the schemas take no strings for numbers, so it reads as
    the float it means."""
    code, _, err = run_cli(["simulate", str(scenario), "--set",
                            "workload.arrival.rate_per_s=1e1"], capsys)
    assert code == 0, err


@pytest.mark.parametrize("flags", [["--rate", "inf"], ["--rate", "nan"],
                                   ["--max-quality-drop-pct", "nan"],
                                   ["--max-quality-drop-pct", "inf"]])
def test_recommend_refuses_non_finite_numbers(flags: list[str], sweep_dir: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    line = _one_line(["recommend", str(sweep_dir), *flags], capsys)
    assert flags[0] in line and "finite" in line, line


def test_empty_output_names_are_refused(scenario: Path, sweep_dir: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # an empty --out would otherwise write here
    before = sorted(os.listdir(tmp_path))
    for argv in (["sweep", str(scenario.parent / "none.yaml"), "--out", ""],
                 ["simulate", str(scenario), "--requests-csv", ""],
                 ["simulate", str(scenario), "--timeseries", ""],
                 ["report", str(scenario), "--out", ""],
                 ["export", str(sweep_dir), "--out", ""]):
        assert "''" in _one_line(argv, capsys), argv
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.parametrize("flag", ["--requests-csv", "--timeseries"])
def test_an_output_that_is_the_scenario_is_refused(
    flag: str, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = scenario.read_text()
    line = _one_line(["simulate", str(scenario), flag, str(scenario)], capsys)
    assert "would be overwritten" in line, line
    line = _one_line(["report", str(scenario), "--out", str(scenario)], capsys)
    assert scenario.read_text() == text


def test_a_missing_hardware_path_folder_is_named(
    scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("FRONTIER_HARDWARE_PATH", str(tmp_path / "no-such-folder"))
    line = _one_line(["simulate", str(scenario)], capsys)
    assert "FRONTIER_HARDWARE_PATH" in line and "no-such-folder" in line, line


@pytest.mark.parametrize("edit", ["deep", "huge-int", "infinite", "nan"])
def test_model_configs_past_any_real_model_are_one_line(
    edit: str, scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (CATALOG_DIR / "llama-3.1-8b.json").read_text()
    if edit == "deep":
        text = text.replace('"num_hidden_layers": 32', '"x": ' + "[" * 100_000 + "]" * 100_000
                            + ', "num_hidden_layers": 32')
    else:
        big = {"huge-int": str(10**400), "infinite": "1e400", "nan": "NaN"}[edit]
        text = text.replace('"hidden_size": 4096', f'"hidden_size": {big}')
    config = tmp_path / "config.json"
    config.write_text(text)
    line = _one_line(["simulate", str(scenario), "--set", f"model={config}"], capsys)
    assert str(config) in line, line


def test_a_store_line_missing_a_field_is_skipped_and_rerun(tmp_path: Path) -> None:
    sweep_file = write_sweep(tmp_path / "s.yaml", small_sweep())
    out = tmp_path / "out"
    run_sweep(sweep_file, out, workers=1)
    store = out / "store.jsonl"
    lines = store.read_text().splitlines()
    broken = json.loads(lines[0])
    del broken["point_status"]
    store.write_text("\n".join([json.dumps(broken), *lines[1:]]) + "\n")
    outcome = run_sweep(sweep_file, out, workers=1, resume=True)
    assert outcome.ran == 1 and outcome.resumed == len(lines) - 1
    assert any("unreadable" in note for note in outcome.store_notes)


def test_a_failed_report_write_leaves_no_temporary_file(
    sweep_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(sweep_dir, copy)
    before = sorted(os.listdir(copy))
    (copy / "report.html").mkdir()  # a folder in the report's place: the final rename fails
    line = _one_line(["report", str(copy)], capsys)
    assert str(copy / "report.html") in line and "cannot write" in line, line
    assert sorted(os.listdir(copy)) == sorted({*before, "report.html"})  # no temporary file
    line = _one_line(["report", str(sweep_dir), "--out", str(tmp_path / "no" / "r.html")],
                     capsys)
    assert str(tmp_path / "no" / "r.html") in line, line
