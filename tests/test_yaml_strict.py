"""YAML that loads to something other than what it says is refused (issue 34): a key written
twice in one mapping (the last silently won), and aliases that expand a long string to
gigabytes in a few hundred nodes; neither may reach a message in full. Both loader paths
(libyaml's and the pure-Python one) are held to it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fuzz import run_cli

from simulator.calibration.overlay import read_overlay
from simulator.errors import InputError
from simulator.yamlsafe import (
    MAX_EXPANDED_CHARS,
    DuplicateKeyError,
    YAMLBombError,
    _load,
    safe_load_bounded,
)

LOADERS = [yaml.SafeLoader] + ([yaml.CSafeLoader] if hasattr(yaml, "CSafeLoader") else [])
REPO = Path(__file__).resolve().parents[1]
SCENARIO = """\
model: llama-3.1-8b
hardware: {gpu: h100-sxm}
deployment:
  tensor_parallel: 1
workload:
  arrival: {kind: poisson, rate_per_s: 4.0}
  input_tokens: {kind: fixed, value: 100}
  output_tokens: {kind: fixed, value: 10}
  num_requests: 5
"""
DUPLICATE = "deployment:\n  tensor_parallel: 2\n"  # a second deployment: at line 10


def _string_bomb(copies: int = 200, size: int = 1_000_000) -> str:
    """A ~1 MB string repeated through aliases: few nodes, copies × size characters."""
    return f'big: &s "{"x" * size}"\nmore: [{", ".join(["*s"] * copies)}]\n'


@pytest.mark.parametrize("loader", LOADERS, ids=lambda c: c.__name__)
def test_duplicate_keys_are_refused_by_both_loaders(loader: Any) -> None:
    with pytest.raises(DuplicateKeyError, match=r"key 'deployment' appears twice .*line 3 and "
                                                r"line 10"):
        _load(loader, SCENARIO + DUPLICATE)
    with pytest.raises(DuplicateKeyError, match="'value'"):  # nested, in flow style
        _load(loader, "a: {value: 1, value: 2}\n")
    # merge keys may be overridden: that is what they are for
    assert _load(loader, "a: &a {x: 1}\nb: {<<: *a, x: 2}\n") == {"a": {"x": 1}, "b": {"x": 2}}


@pytest.mark.parametrize("loader", LOADERS, ids=lambda c: c.__name__)
def test_string_alias_bomb_is_refused_by_its_characters(loader: Any) -> None:
    with pytest.raises(YAMLBombError, match=f"more than {MAX_EXPANDED_CHARS:,} characters") as e:
        _load(loader, _string_bomb())
    assert len(str(e.value)) < 300
    assert _load(loader, _string_bomb(copies=3, size=1000))["more"] == ["x" * 1000] * 3


keys = st.text(alphabet="abcdefgh_", min_size=1, max_size=6)
values = st.one_of(st.integers(-5, 5), st.text(alphabet="xyz ", max_size=4), st.booleans())


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(keys, values, min_size=1, max_size=8), st.data())
def test_any_mapping_with_a_repeated_key_is_refused(mapping: dict[str, Any],
                                                    data: st.DataObject) -> None:
    text = yaml.safe_dump(mapping, sort_keys=False)
    assert safe_load_bounded(text) == mapping  # written once: loads as written
    lines = text.splitlines(keepends=True)
    dup = data.draw(st.sampled_from(lines))
    at = data.draw(st.integers(0, len(lines)))
    with pytest.raises(DuplicateKeyError, match="appears twice"):
        safe_load_bounded("".join([*lines[:at], dup, *lines[at:]]))


@pytest.mark.parametrize("surface", ["scenario", "sweep", "hardware", "overlay", "set"])
def test_duplicate_key_in_every_yaml_surface_is_one_line(
    surface: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "doubled.yaml"
    base = tmp_path / "base.yaml"
    base.write_text(SCENARIO)
    path.write_text(SCENARIO + DUPLICATE)
    if surface == "overlay":
        path.write_text("header: {}\nheader: {}\n")
        with pytest.raises(InputError, match=rf"{path}: .*'header' appears twice"):
            read_overlay(path)
        return
    if surface == "scenario":
        argv = ["simulate", str(path)]
    elif surface == "sweep":
        path.write_text(SCENARIO + "sweep: {deployment.tensor_parallel: [1, 2]}\n" + DUPLICATE)
        argv = ["sweep", str(path), "--out", str(tmp_path / "out")]
    elif surface == "hardware":
        folder = tmp_path / "profiles"
        folder.mkdir()
        profile = (REPO / "hardware_profiles" / "h100-sxm.yaml").read_text()
        path = folder / "twice-gpu.yaml"
        path.write_text(profile.replace("name: h100-sxm", "name: twice-gpu") + "\nname: x\n")
        monkeypatch.setenv("FRONTIER_HARDWARE_PATH", str(folder))
        argv = ["simulate", str(base), "--set", "hardware.gpu=twice-gpu"]
    else:
        argv = ["simulate", str(base), "--set", "deployment={tensor_parallel: 1, "
                                                "tensor_parallel: 2}"]
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and out == "" and "Traceback" not in err, err
    (line,) = err.splitlines()
    assert "appears twice" in line and "line " in line, line
    if surface != "set":
        assert str(path) in line, line
