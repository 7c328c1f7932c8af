"""The scheduling wait: a request that reaches a busy engine waits for the step boundary that
can schedule it, and its TTFT (engine-side and as the client sees it) includes that wait.

Every shipped style overlaps scheduling with the GPU (a one-step lookahead), so a request that
arrives during step j first runs in step j + 2; SGLang's --scheduler-recv-interval n also
polls only at steps whose index is a multiple of n (simulator/serving/intake.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import simulator
from simulator.engines.style import load_engine_styles
from simulator.inputs.scenario import load_scenario_file
from simulator.serving.engine_build import build_engine
from simulator.serving.intake import Intake
from simulator.serving.request import Request
from tests.test_serving import approx, decode, make, mixed, prefill, trace_workload

ARRIVAL_S = 2.0


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("interval", [1, 3])
def test_request_arriving_mid_step_waits_for_the_boundary(
    tmp_path: Path, engine: str, interval: int
) -> None:
    """a (100 in, 1000 out) decodes alone; b (200 in, 3 out) arrives at t = 2 s mid-step.

    Step j starts at s_j with s_0 = 0 (a's prefill), each a step of the style's wall time
    (max(GPU, host) with the shipped host costs). b is polled at the first s_k >= 2 with
    k % interval == 0 and runs in step k + 1 (the lookahead): steps 1..k are a's decodes.
    vLLM and TRT-LLM put b's prompt beside a's decode in step k + 1; SGLang runs it alone.
    Each reaches the engine after its tokenization (3 us/token) and the style's request
    latency L: a at 100 x 3 us + L = 0.3 ms + L, b at 2 s + 200 x 3 us + L = 2.0006 s + L
    (alone in the front end, so no queue).
    """
    sc = make(
        deployment={"engine": engine, "overhead": None,
                    "scheduler": {"recv_interval_steps": interval}},
        **trace_workload(tmp_path, [(0.0, 100, 1000), (ARRIVAL_S, 200, 3)]),
    )
    eng = build_engine(load_scenario_file(sc)[0])
    style = load_engine_styles()[engine]
    assert style.schedules_ahead and eng.scheduler.recv_interval_steps == interval
    T = eng.step_model.time_s
    tokenize, lat = style.front_end.per_input_token_s, style.front_end.latency_s
    a_in, b_in = 100 * tokenize + lat, ARRIVAL_S + 200 * tokenize + lat  # engine arrivals

    def wall(batch: object, seqs: int) -> float:
        return style.step_time_s(T(batch), seqs)

    t, ctx, k = a_in + wall(prefill(100), 1), 100, 1  # t = s_1, a's prefill done
    while t < b_in or k % interval:  # until t = s_k, the poll that sees b
        t += wall(decode(1, ctx), 1)
        ctx += 1
        k += 1
    t += wall(decode(1, ctx), 1)  # step k, planned before b was polled: a alone
    ctx += 1
    scheduled = t  # s_(k+1): b's step starts
    if style.mix_prefill_decode:
        first = t + wall(mixed(200, 0, 1, ctx), 2)
    else:
        first = t + wall(prefill(200), 1)
    res = simulator.simulate(sc)
    b = res.requests[1]
    assert b["arrival_s"] == approx(b_in)
    assert b["front_end_s"] == approx(200 * tokenize + lat)
    assert b["scheduled_s"] == approx(scheduled)
    assert b["first_token_s"] == approx(first)
    # The client's TTFT is the engine's (wait included) plus the style's front end for the
    # prompt (tokenization, request latency and the first chunk, engine_styles.yaml): a has
    # 100 tokens, b 200.
    front = style.front_end.client_offset_s(np.array([100, 200]))
    d = res.to_dict()
    engine_ttfts = [res.requests[0]["first_token_s"] - a_in, first - b_in]
    assert d["ttft_engine_s"]["mean"] == approx(sum(engine_ttfts) / 2)
    client = (engine_ttfts[0] + front[0] + engine_ttfts[1] + front[1]) / 2
    assert d["ttft_s"]["mean"] == pytest.approx(client, rel=1e-9)
    assert first - b_in > T(prefill(200))  # the wait is part of b's TTFT


def test_idle_engine_takes_a_request_at_once(tmp_path: Path) -> None:
    """Nothing running: the engine loop polls right away, whatever the lookahead."""
    sc = make(
        deployment={"engine": "sglang", "overhead": None,
                    "scheduler": {"recv_interval_steps": 7}},
        **trace_workload(tmp_path, [(0.0, 100, 2), (ARRIVAL_S, 200, 2)]),
    )
    res = simulator.simulate(sc)
    assert res.requests[0]["finish_s"] < ARRIVAL_S
    # b reaches the engine once tokenized, the style's request latency later: 2 s + 200 x
    # 3 us + L.
    front = load_engine_styles()["sglang"].front_end
    assert res.requests[1]["scheduled_s"] == approx(
        ARRIVAL_S + 200 * front.per_input_token_s + front.latency_s)


def test_intake_arithmetic() -> None:
    """Arrivals during step j: released before step j + 1 without lookahead, j + 2 with it;
    with interval 2 only at even step starts (then + 1 with lookahead)."""

    def first_step(lookahead: bool, interval: int, arrive_during: int) -> int:
        intake = Intake(lookahead, interval)
        for step in range(20):
            if intake.at_step_start(step):
                return step
            if step == arrive_during:
                intake.hold(Request(0, 0.0, 10, 5, 0), step + 1)
        raise AssertionError("never released")

    held = Intake(True, 1)
    held.hold(Request(0, 0.0, 10, 5, 0), 3)
    assert held.held_tokens == 15  # routers see a held request's prompt and output tokens
    held.drain()
    assert held.held_tokens == 0

    assert first_step(False, 1, 4) == 5
    assert first_step(True, 1, 4) == 6
    assert first_step(False, 2, 4) == 6  # poll at step 6's start
    assert first_step(False, 2, 5) == 6
    assert first_step(True, 2, 4) == 7  # polled at s_6, runs in step 7
    assert first_step(True, 2, 5) == 7
    assert not Intake(False, 1).delays and Intake(True, 1).delays and Intake(False, 3).delays
    # The release step directly, as a run of decode steps asks it (boundary j + 1 for an
    # arrival during step j): interval 4, lookahead: polled at s_8, runs in step 9.
    assert Intake(True, 4).release_step(5) == 9 and Intake(True, 4).release_step(8) == 9
    assert Intake(False, 4).release_step(8) == 8 and Intake(True, 1).release_step(5) == 6
