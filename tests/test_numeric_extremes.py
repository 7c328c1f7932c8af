"""Every numeric scenario key at the edges of a float (issue 34): 1e308, 1e-307, -1e308, an
integer past int64, zero and -1, one key at a time, in scenarios that between them hold every
kind of key (Poisson and gamma arrivals, MoE routing, speculative decoding, disaggregated
pools). Each run ends in one of two ways only: one line and exit status 2, or a completed run
that accounts for every request (completed or dropped) — never a traceback, never a run that
"completes" with requests missing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_fuzz import run_cli

import simulator
from simulator.inputs.scenario import scenario_to_dict

REPO = Path(__file__).resolve().parents[1]
REQUESTS = 20
BASES = {
    "poisson": ("chat-llama-3.1-8b-h100.yaml", []),
    "gamma": ("moe-gpt-oss-120b-b200.yaml", []),
    "moe-routing": ("moe-attention-dp-qwen3-235b-h200.yaml",
                    ["workload.arrival.concurrency=8"]),
    "speculative": ("speculative-chat-eagle3-h100.yaml", []),
    "disaggregated": ("disaggregated-long-input-h100.yaml", []),
}
EXTREMES = ("1e308", "1e-307", "-1e308", str(10**30), str(2**63), "0", "-1")


def _numeric_keys(scenario: str, sets: list[str]) -> list[str]:
    """Dotted paths of every number in the scenario with its defaults filled in."""
    loaded = simulator.load_scenario(REPO / "scenarios" / scenario, sets)
    found: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{path}.{k}" if path else k)
        elif isinstance(node, int | float) and not isinstance(node, bool):
            found.append(path)

    walk(scenario_to_dict(loaded.scenario), "")
    return found


def _cases() -> list[Any]:
    cases = []
    for name, (scenario, sets) in BASES.items():
        base = [*sets, f"workload.num_requests={REQUESTS}"]
        for key in _numeric_keys(scenario, base):
            cases.append(pytest.param(scenario, base, key, id=f"{name}:{key}"))
    return cases


@pytest.mark.parametrize(("scenario", "sets", "key"), _cases())
def test_a_numeric_key_at_any_extreme_is_one_line_or_a_full_run(
    scenario: str, sets: list[str], key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = REPO / "scenarios" / scenario
    for value in EXTREMES:
        argv = ["simulate", str(path), "--json"]
        for s in [*sets, f"{key}={value}"]:
            argv += ["--set", s]
        code, out, err = run_cli(argv, capsys)
        assert "Traceback" not in err, (key, value, err)
        if code == 2:
            assert out == "" and len(err.strip().splitlines()) == 1, (key, value, err)
            continue
        assert code == 0, (key, value, code, err)
        data = json.loads(out)
        expected = int(value) if key == "workload.num_requests" else REQUESTS
        accounted = data["requests_completed"] + data["requests_dropped"]
        assert accounted == expected, (key, value, data["requests_completed"],
                                       data["requests_dropped"])
