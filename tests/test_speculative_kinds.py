"""Speculative acceptance by request kind: a mixed trace or `workload.kind_mix` gives each
request the preset row of its own traffic kind, and the result breaks acceptance down by kind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from simulator.api import simulate
from simulator.inputs.scenario import load_scenario_file
from simulator.workload.stream import build_stream

# Public EAGLE-3 checkpoint for Llama-3.1-8B, K = 7 chain (speculative_presets.csv):
# τ = 2.77 on MT-bench (chat), 3.49 on HumanEval (code); it has no math or summarization row.
PRESET = {"method": "eagle3", "num_speculative_tokens": 7,
          "preset": "eagle3-llama-3.1-8b-public"}
TAU = {"chat": 2.77, "code": 3.49}


def _scenario(workload: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "name": "mixed kinds",
        "model": "llama-3.1-8b",
        "hardware": {"gpu": "h100-sxm"},
        "deployment": {
            "tensor_parallel": 1,
            "scheduler": {"max_num_seqs": 64, "max_num_batched_tokens": 8192},
            "speculative": PRESET,
        },
        "workload": {"seed": 7, **workload},
    }


def _trace(path: Path, kinds: list[str], output_tokens: int = 1024) -> Path:
    rows = [f"{i * 0.05:.2f},256,{output_tokens},{k}" for i, k in enumerate(kinds)]
    path.write_text("arrival_s,input_tokens,output_tokens,kind\n" + "\n".join(rows) + "\n")
    return path


def _write(scn: dict[str, Any], tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scn))
    return path


def _run(scn: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    summary: dict[str, Any] = simulate(_write(scn, tmp_path), check=True).summary
    return summary["speculative"]


def test_mixed_trace_draws_each_requests_acceptance_from_its_own_kind(tmp_path: Path) -> None:
    kinds = ["code", "chat"] * 20
    _trace(tmp_path / "mixed.csv", kinds)
    s = _run(_scenario({"arrival": {"kind": "trace", "path": "mixed.csv"},
                        "num_requests": 40}), tmp_path)
    assert s["workload_kind"] == "mixed"
    by = s["acceptance_by_kind"]
    assert set(by) == {"chat", "code"}
    for name, tau in TAU.items():
        k = by[name]
        assert k["requests"] == 20
        assert k["acceptance_length_expected"] == pytest.approx(tau, abs=1e-6)
        # 20 requests × 1024 tokens / τ ≈ 5.9k (code) to 7.4k (chat) verify steps; the
        # per-step spread is ≈ 1.5 tokens, so one standard error is ≈ 0.02 (< 1 %): 3 % is
        # several of them, and far below the 26 % gap between the two presets.
        assert k["acceptance_length_mean"] == pytest.approx(tau, rel=0.03)
        assert {"chat": "MT-bench", "code": "HumanEval"}[name] in k["preset_source"]
    assert by["code"]["acceptance_length_mean"] > 1.15 * by["chat"]["acceptance_length_mean"]
    # Equal outputs, half of each kind: tokens over steps = 2 / (1/2.77 + 1/3.49) = 3.0887
    assert s["acceptance_length_expected"] == pytest.approx(2 / (1 / 2.77 + 1 / 3.49), abs=1e-3)
    assert s["acceptance_length_mean"] == pytest.approx(3.0887, rel=0.03)


def test_blank_trace_kind_takes_the_workloads_kind(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens,kind\n0,64,64,\n0.1,64,64,chat\n")
    s = _run(_scenario({"arrival": {"kind": "trace", "path": "t.csv"}, "kind": "code"}),
             tmp_path)
    assert {n: k["requests"] for n, k in s["acceptance_by_kind"].items()} == {
        "chat": 1, "code": 1}


def test_kind_mix_draws_kinds_with_the_given_weights(tmp_path: Path) -> None:
    w = {"arrival": {"kind": "closed_loop", "concurrency": 16}, "num_requests": 400,
         "input_tokens": {"kind": "fixed", "value": 128},
         "output_tokens": {"kind": "fixed", "value": 128},
         "kind_mix": {"code": 3, "chat": 1}}
    sc, base = load_scenario_file(_write(_scenario(w), tmp_path))
    a, _ = build_stream(sc, base)
    b, _ = build_stream(sc, base)
    assert a.kind is not None and b.kind is not None and np.array_equal(a.kind, b.kind)
    # 400 draws at p = 3/4: standard deviation √(400·0.75·0.25) ≈ 8.7; ±40 is over 4 of them
    assert abs(int(np.count_nonzero(a.kind == 1)) - 300) < 40  # code is WORKLOAD_KINDS[1]
    # Without kind_mix the stream is the one drawn before kinds existed: no kind array and
    # the same lengths and priorities (kinds are drawn last).
    del w["kind_mix"]
    plain, _ = build_stream(load_scenario_file(_scenario(w))[0], None)
    assert plain.kind is None and np.array_equal(plain.output_tokens, a.output_tokens)
    s = _run(_scenario({**w, "kind_mix": {"code": 3, "chat": 1}}), tmp_path)
    by = s["acceptance_by_kind"]
    assert by["code"]["requests"] + by["chat"]["requests"] == 400
    assert by["code"]["acceptance_length_mean"] > by["chat"]["acceptance_length_mean"]


def _exit_2(tmp_path: Path, scn: dict[str, Any], needle: str) -> None:
    path = _write(scn, tmp_path)
    p = subprocess.run([sys.executable, "-m", "simulator", "simulate", str(path)],
                       capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_unknown_trace_kind_is_a_bad_row(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens,kind\n0,64,64,poetry\n")
    _exit_2(tmp_path, _scenario({"arrival": {"kind": "trace", "path": str(path)}}),
            "line 2: kind 'poetry' is not one of chat, code, math, summarization")


def test_a_kind_the_preset_lacks_is_one_line(tmp_path: Path) -> None:
    path = _trace(tmp_path / "t.csv", ["chat", "math", "math"], output_tokens=64)
    _exit_2(tmp_path, _scenario({"arrival": {"kind": "trace", "path": str(path)}}),
            "no published figure for workload kind 'math'")


@pytest.mark.parametrize(
    ("extra", "needle"),
    [({"kind": "code", "kind_mix": {"code": 1}}, "not both"),
     ({"kind_mix": {"poetry": 1}}, "kind_mix"),
     ({"kind_mix": {"code": 0}}, "kind_mix"),
     ({"kind_mix": {}}, "at least one kind")],
)
def test_bad_kind_mix_is_one_line(tmp_path: Path, extra: dict[str, Any], needle: str) -> None:
    w = {"arrival": {"kind": "offline"}, "num_requests": 4,
         "input_tokens": {"kind": "fixed", "value": 64},
         "output_tokens": {"kind": "fixed", "value": 64}, **extra}
    _exit_2(tmp_path, _scenario(w), needle)
