"""Closed loops whose clients start at random phases of their request cycle
(workload.arrival.start: random_phase, closed_form/client_phases.py, docs/closed-loops.md)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulator
from simulator.closed_form.client_phases import phases_s, with_client_phases
from simulator.inputs.scenario import Scenario
from simulator.serving.engine_build import build_engine
from simulator.workload.stream import build_stream

C = 8
SCENARIO: dict[str, Any] = {
    "name": "lockstep", "model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
    "deployment": {
        "kind": "aggregated", "engine": "vllm",
        # two 1024-token prompts fit one step: eight that arrive together take four steps
        "scheduler": {"max_num_seqs": C, "max_num_batched_tokens": 2100},
        # no host cost and no request latency: the timeline is the GPU's and the tokenizer's
        "overhead": {"step_s": 0.0, "per_seq_s": 0.0, "request_latency_s": 0.0},
    },
    "workload": {
        "arrival": {"kind": "closed_loop", "concurrency": C},
        "input_tokens": {"kind": "fixed", "value": 1024},
        "output_tokens": {"kind": "fixed", "value": 256},
        "num_requests": 20 * C, "seed": 0,
    },
}


def _run(start: str) -> simulator.Result:
    s = copy.deepcopy(SCENARIO)
    s["workload"]["arrival"]["start"] = start
    return simulator.simulate(s)


@settings(max_examples=50, deadline=None)
@given(clients=st.integers(1, 300), cycle_s=st.floats(1e-3, 1e3), seed=st.integers(0, 2**32))
def test_phases_are_sorted_within_one_cycle_and_the_first_client_starts_at_zero(
        clients: int, cycle_s: float, seed: int) -> None:
    at = phases_s(clients, cycle_s, seed)
    assert len(at) == clients and at[0] == 0.0
    assert np.all(np.diff(at) >= 0) and np.all(at < cycle_s)
    assert np.array_equal(at, phases_s(clients, cycle_s, seed))  # seeded: the same run


def test_the_cycle_is_the_clients_over_the_estimated_throughput() -> None:
    """Little's law: C clients that each keep one request in flight send C / X requests a
    second in all at throughput X, so each client's cycle is C / X; the phases spread over it
    (the largest of 8 uniform draws is above 0.5 of the cycle but for 0.5^8 of the seeds)."""
    s = copy.deepcopy(SCENARIO)
    s["workload"]["arrival"]["start"] = "random_phase"
    scenario = Scenario.model_validate(s)
    engine = build_engine(scenario, None)
    stream, _ = build_stream(scenario, None)
    phased, notes = with_client_phases(scenario, engine, stream)
    cycle_s = C / simulator.estimate(s).rate_per_s
    assert notes == [] and phased.start_s is not None
    assert np.array_equal(phased.start_s, phases_s(C, cycle_s, 0))
    assert 0.5 * cycle_s < phased.start_s[-1] < cycle_s
    # the stream's own draws are untouched
    assert np.array_equal(phased.input_tokens, stream.input_tokens)


def test_together_leaves_the_stream_as_it_was() -> None:
    scenario = Scenario.model_validate(SCENARIO)
    stream, _ = build_stream(scenario, None)
    phased, notes = with_client_phases(scenario, build_engine(scenario, None), stream)
    assert phased is stream and notes == []


def test_each_client_sends_its_first_request_at_its_phase() -> None:
    """The engine has request i at send + front end (tokenization), so send = arrival_s -
    front_end_s; the first C sends are the phases, in order."""
    r = _run("random_phase")
    s = Scenario.model_validate({**SCENARIO, "workload": {
        **SCENARIO["workload"], "arrival": {"kind": "closed_loop", "concurrency": C,
                                            "start": "random_phase"}}})
    engine = build_engine(s, None)
    stream, _ = build_stream(s, None)
    phased, _ = with_client_phases(s, engine, stream)
    sent = r.requests["arrival_s"][:C] - r.requests["front_end_s"][:C]
    assert sent == pytest.approx(phased.start_s, abs=1e-9)


def test_identical_requests_started_together_stay_in_lockstep() -> None:
    """Started together, the eight identical requests prefill two a step over four steps, so
    their first tokens span the three steps after the first pair's; identical outputs finish
    them the same span apart, and the next round's sends keep that shape: every later round
    spans the same interval, no wider than the first round's first tokens, and queues behind
    the same prefill steps (its mean TTFT stays at the first round's). At random phases the
    rounds spread over much of the cycle and the mean TTFT drops to a little above one
    prefill step."""
    together, phased = _run("together"), _run("random_phase")

    def rounds(r: simulator.Result) -> tuple[list[float], list[float]]:
        sent = r.requests["arrival_s"] - r.requests["front_end_s"]
        ttft = r.requests["first_token_s"] - r.requests["arrival_s"]
        spread = [float(np.ptp(sent[i * C:(i + 1) * C])) for i in range(20)]
        return spread, [float(ttft[i * C:(i + 1) * C].mean()) for i in range(20)]

    spread_t, ttft_t = rounds(together)
    spread_p, ttft_p = rounds(phased)
    first_tokens = together.requests["first_token_s"][:C]
    assert max(spread_t[1:]) - min(spread_t[1:]) < 1e-6  # the train keeps its shape
    assert max(spread_t[1:]) <= float(np.ptp(first_tokens)) + 1e-9
    assert min(ttft_t[1:]) > 0.9 * ttft_t[0]
    # A client's cycle is its request's end-to-end time: the phased rounds span half of it.
    cycle_s = float(np.mean(phased.requests["finish_s"] - phased.requests["arrival_s"]))
    assert min(spread_p[1:]) > 0.5 * cycle_s > 10 * max(spread_t[1:])
    assert np.mean(ttft_p[1:]) < 0.5 * np.mean(ttft_t[1:])


def test_an_unknown_start_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from cli_helpers import run_cli

    code, _, err = run_cli(["simulate", "scenarios/chat-llama-3.1-8b-h100.yaml",
                            "--set", "workload.arrival.kind=closed_loop",
                            "--set", "workload.arrival.concurrency=4",
                            "--set", "workload.arrival.start=sometimes"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "workload.arrival.start" in err and "'together' or 'random_phase'" in err


def test_without_an_estimate_the_clients_start_together_and_the_run_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A scenario the closed form cannot estimate still simulates: its clients start
    together, and a warning says why."""
    import simulator.closed_form.scenario as closed

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("no steady state for this layout")

    monkeypatch.setattr(closed, "estimate", refuse)
    s = copy.deepcopy(SCENARIO)
    s["workload"]["arrival"]["start"] = "random_phase"
    r = simulator.simulate(s)
    assert any("no closed-form estimate of the request cycle (no steady state for this layout)"
               in w for w in r.warnings)
    sent = r.requests["arrival_s"][:C] - r.requests["front_end_s"][:C]
    assert np.all(sent == 0.0)
