"""Fuzz targets for the input surfaces test_fuzz.py does not cover: sweep YAML (axes, zip
groups, constraints), HF config.json and hardware profile YAML. Each mutates a real file (the
small sweep, the catalog's Llama-3.1-8B config, the shipped H100 profile) and requires either a
normal result or exit status 2 with one line naming the file: never a traceback. Every input
that breaks a target is saved under tests/fuzz_corpus/<surface>/ (fuzz_stats.kept_if_broken)
and replayed by test_corpus_replays.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from fuzz_stats import CORPUS, digest, kept_if_broken, note_refused
from hypothesis import given, settings
from hypothesis import strategies as st
from sweep_helpers import SMALL_SWEEP
from test_fuzz import EXAMPLES, FUZZ, WEIRD, key_paths, run_cli, single_line

from simulator.cli.app import USER_ERRORS
from simulator.sweep import expand, load_sweep

REPO = Path(__file__).resolve().parents[1]
LLAMA = json.loads((REPO / "simulator/model/catalog/llama-3.1-8b.json").read_text())
H100 = yaml.safe_load((REPO / "hardware_profiles/h100-sxm.yaml").read_text())
# Fewer examples than test_fuzz (each explain or expansion costs tens of milliseconds);
# FRONTIER_HYPOTHESIS_EXAMPLES raises all of them.
FUZZ = settings(FUZZ, max_examples=EXAMPLES or 40)
SWEEP = {**copy.deepcopy(SMALL_SWEEP), "constraints": [
    "deployment.tensor_parallel * 4 <= 8", "workload.arrival.concurrency > 0"]}


@st.composite
def mutated_doc(draw: st.DrawFn, base: dict[str, Any]) -> Any:
    """`base` with 1-3 keys deleted, replaced by odd values, or added; sometimes not a mapping."""
    if draw(st.integers(0, 15)) == 0:
        return draw(st.one_of(st.none(), st.integers(), st.text(max_size=8), st.lists(
            st.integers(), max_size=3)))
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = key_paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent: Any = doc
        for k in path[:-1]:
            parent = parent[k]
        op = draw(st.sampled_from(["delete", "replace", "replace", "add"]))
        if op == "delete":
            parent.pop(path[-1])
        elif op == "replace":
            parent[path[-1]] = draw(WEIRD)
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=8)) + "\u0394"] = draw(WEIRD)
    return doc


def check_cli(surface: str, argv: list[str], text: str, path: Path,
              capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 0, or exit 2 with one line naming the file; noted when refused."""
    code, _, err = run_cli(argv, capsys)
    if code == 0:
        return
    assert code == 2, (code, err)
    line = single_line(err)
    assert str(path) in line or path.stem in line, line
    note_refused(surface, text)


# ------------------------------------------------------------------------------ sweep YAML

SWEEP_EXTRA = st.one_of(
    st.just({}),
    st.fixed_dictionaries({"sweep": st.dictionaries(
        st.sampled_from(["deployment.tensor_parallel", "workload.seed", "zip", "no.such.key",
                         "deployment..x", "workload.arrival.concurrency"]),
        st.one_of(WEIRD, st.lists(WEIRD, max_size=3)), max_size=3)}),
    st.fixed_dictionaries({"constraints": st.one_of(WEIRD, st.lists(st.one_of(
        st.text(max_size=20), st.sampled_from([
            "deployment.tensor_parallel ** 99 ** 99 > 1", "__import__('os')", "1 / 0 > 0",
            "workload.seed in [1, 2]", "not deployment.replicas", "(" * 50 + "1" + ")" * 50,
            "deployment.tensor_parallel.real > 0", "lambda: 1"])), max_size=3))}),
)


@FUZZ
@given(doc=mutated_doc(SWEEP), extra=SWEEP_EXTRA)
def test_mutated_sweeps_expand_or_end_in_one_line(
    doc: Any, extra: dict[str, Any], tmp_path: Path
) -> None:
    if isinstance(doc, dict):
        doc.update(extra)
    text = yaml.safe_dump(doc, allow_unicode=True)
    path = tmp_path / "sweep.yaml"
    path.write_text(text, encoding="utf-8")
    with kept_if_broken("sweeps", text, ".yaml"):
        try:
            spec = load_sweep(path)
            if spec.grid_size <= 8:
                expand(spec)  # every point through constraints and the schema
        except USER_ERRORS as exc:
            message = str(exc)
            assert "\n" not in message.strip() and message.startswith(str(path)), message
            note_refused("sweep", text)


# ------------------------------------------------------------------------- HF config.json


@FUZZ
@given(doc=mutated_doc(LLAMA))
def test_mutated_model_configs_explain_or_end_in_one_line(
    doc: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = json.dumps(doc)
    path = tmp_path / digest(text) / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    with kept_if_broken("configs", text, ".json"):
        check_cli("config.json", ["explain", str(path), "--gpu", "h100-sxm"], text, path,
                  capsys)


# ---------------------------------------------------------------------- hardware profiles


@FUZZ
@given(doc=mutated_doc({**H100, "name": "fuzz-gpu"}))
def test_mutated_hardware_profiles_explain_or_end_in_one_line(
    doc: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = yaml.safe_dump(doc, allow_unicode=True)
    folder = tmp_path / digest(text)  # a fresh folder: profiles are cached by path
    folder.mkdir(exist_ok=True)
    path = folder / "fuzz-gpu.yaml"
    path.write_text(text, encoding="utf-8")
    with kept_if_broken("profiles", text, ".yaml"):
        check_cli("hardware", ["--hardware-path", str(folder), "explain", "llama-3.1-8b",
                               "--gpu", "fuzz-gpu"], text, path, capsys)


# -------------------------------------------------------------------- corpus of past breaks


def _corpus(surface: str, suffix: str) -> list[Path]:
    return sorted((CORPUS / surface).glob(f"*{suffix}"))


@pytest.mark.parametrize("path", _corpus("sweeps", ".yaml"), ids=lambda p: p.stem)
def test_corpus_sweeps(path: Path) -> None:
    try:
        spec = load_sweep(path)
        if spec.grid_size <= 8:
            expand(spec)
    except USER_ERRORS as exc:
        assert "\n" not in str(exc).strip() and str(exc).startswith(str(path)), exc


@pytest.mark.parametrize("path", _corpus("configs", ".json"), ids=lambda p: p.stem)
def test_corpus_configs(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["explain", str(path), "--gpu", "h100-sxm"], capsys)
    assert code in (0, 2)
    if code:
        single_line(err)


@pytest.mark.parametrize("path", _corpus("profiles", ".yaml"), ids=lambda p: p.stem)
def test_corpus_profiles(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "fuzz-gpu.yaml").write_bytes(path.read_bytes())
    code, _, err = run_cli(["--hardware-path", str(tmp_path), "explain", "llama-3.1-8b",
                            "--gpu", "fuzz-gpu"], capsys)
    assert code in (0, 2)
    if code:
        single_line(err)
