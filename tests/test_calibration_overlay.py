"""CALIBRATION.yaml: built from a fit, written atomically, read back unchanged, each bad input
refused in one line naming file and key, and applied to a nested style or profile mapping."""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from simulator.calibration.build import RowSource, build_overlay, make_header
from simulator.calibration.crossval import cross_validate
from simulator.calibration.fit import fit
from simulator.calibration.overlay import (
    CalibrationOverlay,
    Kind,
    apply_overlay,
    dump_overlay,
    read_overlay,
    write_overlay,
)
from simulator.calibration.params import (
    FloatArray,
    FreeParameter,
    IntArray,
    Observation,
    ObservationSet,
    Target,
)
from simulator.errors import InputError

KNOWN = {"engine_style": {"sglang", "vllm"}, "hardware": {"h100-sxm", "b200"}}


def _known(kind: Kind) -> set[str]:
    return KNOWN[kind]


def _overlay(tmp_path: Path) -> CalibrationOverlay:
    """A fit of sglang's per-sequence cost and H100's GEMM efficiency on synthetic rows from
    two files; an unused vLLM key stays at its prior."""
    rng = np.random.default_rng(0)
    n = 300
    batch = rng.integers(1, 200, n).astype(np.float64)
    flops = rng.uniform(1, 10, n)

    def predict(v: Mapping[str, float], idx: IntArray) -> FloatArray:
        return 1.0 + v["per_seq"] * batch[idx] * 1e-3 + flops[idx] / v["gemm"]

    truth = {"per_seq": 12.0, "gemm": 0.6, "vllm_step": 1000.0}
    measured = predict(truth, np.arange(n)) * np.exp(0.03 * rng.standard_normal(n))
    files = [tmp_path / "runs-a.csv", tmp_path / "runs-b.csv"]
    for f in files:
        f.write_text("measured rows\n")
    obs = ObservationSet.of([Observation(float(m), "tpot" if i % 2 else "ttft", f"c{i // 20}",
                                         ("h100-sxm", "sglang")) for i, m in enumerate(measured)])
    sources = [RowSource(files[i % 2].name, "sglang", "0.5.2") for i in range(n)]
    params = [
        FreeParameter("per_seq", Target("engine_style", "sglang", "cpu_per_seq_us"), 8.0, 0.8,
                      80.0),
        FreeParameter("gemm", Target("hardware", "h100-sxm", "efficiency.gemm_compute_fraction"),
                      0.7, 0.1, 1.0),
        FreeParameter("vllm_step", Target("engine_style", "vllm", "cpu_step_us"), 1000.0, 100.0,
                      1e4),
    ]
    result = fit(params, obs, predict)
    cv = cross_validate(params, obs, predict, k=3)
    header = make_header([(str(f), n // 2) for f in files], sources,
                         created=datetime(2026, 5, 1, 12, 0, tzinfo=UTC))
    return build_overlay(result, header, sources, cv)


def test_overlay_built_from_a_fit_round_trips(tmp_path: Path) -> None:
    built = _overlay(tmp_path)
    assert [v.target.key for v in built.values] == ["cpu_per_seq_us",
                                                   "efficiency.gemm_compute_fraction"]
    per_seq = built.values[0]
    assert abs(per_seq.value / 12.0 - 1) < 0.1 and per_seq.prior == 8.0
    assert per_seq.fitted_to.rows == 300 and per_seq.fitted_to.files == ("runs-a.csv",
                                                                          "runs-b.csv")
    assert per_seq.fitted_to.engine_versions == {"sglang": "0.5.2"}
    assert per_seq.cross_validated is not None and per_seq.cross_validated.folds == 3
    after, before = per_seq.cross_validated.after, per_seq.cross_validated.before
    assert after.median_abs is not None and before.median_abs is not None
    assert after.median_abs < before.median_abs
    assert [m.target.name for m in built.not_identified] == ["vllm"]
    assert {g.group for g in built.cross_validation} == {("h100-sxm", "sglang"), None}
    path = tmp_path / "CALIBRATION.yaml"
    write_overlay(path, built)
    assert read_overlay(path, _known) == built
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CALIBRATION.yaml", "runs-a.csv",
                                                          "runs-b.csv"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built = _overlay(tmp_path)
    path = tmp_path / "CALIBRATION.yaml"
    path.write_text("old\n")

    def broken(src: str, dst: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        write_overlay(path, built)
    assert path.read_text() == "old\n"
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def _mutate(data: dict[str, Any], where: str, value: Any) -> None:
    *parents, last = where.split("/")
    node: Any = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


BAD = [
    ("surprise", 1, "surprise: Extra inputs are not permitted"),
    ("values/0/confidence", 0.9, "values[0].confidence: Extra inputs are not permitted"),
    ("values/0/value", -3.0, "values[0].value: Input should be greater than or equal to 0"),
    ("values/0/value", float("nan"), "values[0].value: Input should be a finite number"),
    ("values/0/target/kind", "kernel", "values[0].target.kind: Input should be 'engine_style'"),
    ("values/0/target/key", "a..b", "values[0].target.key: String should match pattern"),
    ("header/files/0/sha256", "abc", "header.files[0].sha256: String should match pattern"),
    ("header/created", "2026-05-01T12:00:00", "header.created: Input should have timezone"),
    ("values/0/target/name", "sglng",
     "values[0].target.name: unknown engine_style 'sglng' (valid: sglang, vllm)"),
    ("not_identified/0/target/name", "a100",
     "not_identified[0].target.name: unknown hardware 'a100' (valid: b200, h100-sxm)"),
    ("values/1/target", {"kind": "engine_style", "name": "sglang", "key": "cpu_per_seq_us"},
     "appears twice"),
]


@pytest.mark.parametrize(("where", "value", "expected"), BAD, ids=[b[0] for b in BAD])
def test_each_bad_input_is_refused_in_one_line(tmp_path: Path, where: str, value: Any,
                                               expected: str) -> None:
    built = _overlay(tmp_path)
    data = yaml.safe_load(dump_overlay(built))
    if where.startswith("not_identified"):
        data["not_identified"][0]["target"]["kind"] = "hardware"
    _mutate(data, where, value)
    path = tmp_path / "CALIBRATION.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as info:
        read_overlay(path, _known)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    assert expected in message


@pytest.mark.parametrize(("text", "expected"), [
    ("header: [unclosed\n", "malformed YAML: "),
    ("- just\n- a list\n", "top level must be a mapping with header and values (got list)"),
    ("values: []\n", "header: Field required"),
])
def test_malformed_files_are_refused_in_one_line(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "CALIBRATION.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match="^" + str(path).replace("\\", "\\\\")) as info:
        read_overlay(path)
    assert "\n" not in str(info.value) and expected in str(info.value)
    with pytest.raises(InputError, match="cannot read"):
        read_overlay(tmp_path / "missing.yaml")


PROFILE: dict[str, Any] = {
    "name": "h100-sxm",
    "efficiency": {"gemm_compute_fraction": 0.7, "hbm_bandwidth_fraction": 0.8,
                   "source": "fitted"},
    "memory": {"hbm_gb": 80},
}


def test_apply_overlay_sets_nested_keys_of_its_target_only(tmp_path: Path) -> None:
    built = _overlay(tmp_path)
    applied = apply_overlay(PROFILE, built, "hardware", "h100-sxm")
    gemm = built.values[1].value
    assert applied["efficiency"]["gemm_compute_fraction"] == gemm != 0.7
    assert applied["efficiency"]["hbm_bandwidth_fraction"] == 0.8
    assert PROFILE["efficiency"]["gemm_compute_fraction"] == 0.7  # the input is not changed
    assert apply_overlay(PROFILE, built, "hardware", "b200") == PROFILE
    style = apply_overlay({"cpu_per_seq_us": 8, "cpu_step_us": 1000}, built, "engine_style",
                          "sglang")
    assert style == {"cpu_per_seq_us": built.values[0].value, "cpu_step_us": 1000}


def test_apply_overlay_refuses_a_missing_or_non_numeric_key(tmp_path: Path) -> None:
    built = _overlay(tmp_path)
    with pytest.raises(InputError) as info:
        apply_overlay({"efficiency": {"attention_compute_fraction": 0.6}}, built, "hardware",
                      "h100-sxm")
    assert str(info.value) == (
        "calibration overlay: hardware h100-sxm: key 'efficiency.gemm_compute_fraction' does "
        "not exist: no 'gemm_compute_fraction' under efficiency (valid: "
        "attention_compute_fraction)")
    with pytest.raises(InputError, match="no 'efficiency' under"):
        apply_overlay({"memory": {}}, built, "hardware", "h100-sxm")
    data = built.model_dump()
    data["values"][1]["target"]["key"] = "efficiency.source"
    renamed = CalibrationOverlay.model_validate(data)
    with pytest.raises(InputError, match="holds str 'fitted', not a number"):
        apply_overlay(PROFILE, renamed, "hardware", "h100-sxm")
