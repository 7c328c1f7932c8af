"""A serial API front end (SGLang's one TokenizerManager): a burst of arrivals reaches the
engine one tokenization apart, and the queue is part of the client's TTFT."""

from __future__ import annotations

import numpy as np

import simulator
from simulator.engines.style import FrontEnd, load_engine_styles
from simulator.serving.front_end import FrontEndQueue
from tests.test_serving import approx, make, prefill, step_timer

FE = FrontEnd(ingest_s=1e-3, per_input_token_s=10e-6)  # 1 ms + 10 us per prompt token


def test_serial_queue_arithmetic() -> None:
    q = FrontEndQueue(FE, serial=True, served=True)
    # Services: 1 ms + 1000 x 10 us = 11 ms; 1 ms + 500 x 10 us = 6 ms.
    # Two sent at t = 0: the first is ready at 11 ms, the second waits for it: 11 + 6 = 17 ms.
    assert q.ready_s(0.0, 1000) == approx(11e-3)
    assert q.ready_s(0.0, 500) == approx(17e-3)
    # One sent at 50 ms finds the front end idle: 50 + 6 = 56 ms.
    assert q.ready_s(50e-3, 500) == approx(56e-3)
    assert q.client_side_s(0.0, 17e-3, 500) == approx(17e-3)


def test_parallel_and_offline_fronts() -> None:
    par = FrontEndQueue(FE, serial=False, served=True)
    assert par.ready_s(0.0, 1000) == approx(11e-3)
    assert par.ready_s(0.0, 500) == approx(6e-3)  # no queue: its own 6 ms
    off = FrontEndQueue(FE, serial=True, served=False)
    # Offline: the engine has every prompt at once; the 11 ms is charged after the fact.
    assert off.ready_s(0.0, 1000) == 0.0
    assert off.client_side_s(0.0, 0.0, 1000) == approx(11e-3)


def test_sglang_burst_reaches_the_engine_in_tokenizer_order() -> None:
    """Closed loop of 4, all sent at t = 0, 100-token prompts, SGLang (serial front end,
    3 us/token, no ingest figure): the front end frees at 0.3, 0.6, 0.9, 1.2 ms, and each
    request reaches the engine the style's request latency L later (it holds no queue):
    0.3, 0.6, 0.9, 1.2 ms + L. The first request finds the engine idle and is prefilled alone
    from 0.3 ms + L; the other three join the next prefill."""
    sc = make(
        deployment={"engine": "sglang", "overhead": None},
        workload={"arrival": {"kind": "closed_loop", "concurrency": 4}, "num_requests": 4},
    )
    style = load_engine_styles()["sglang"]
    assert style.serial_front_end and style.front_end.ingest_s == 0.0
    tok = style.front_end.per_input_token_s * 100  # 0.3 ms per prompt
    lat = style.front_end.latency_s
    rec = simulator.simulate(sc).requests
    assert rec["arrival_s"] == approx(np.array([1, 2, 3, 4]) * tok + lat)
    assert rec["front_end_s"] == approx(np.array([1, 2, 3, 4]) * tok + lat)  # queue, own tok
    assert rec["scheduled_s"][0] == approx(tok + lat)  # idle engine: polled at once
    first = tok + lat + style.step_time_s(step_timer(sc)(prefill(100)), 1)
    assert rec["first_token_s"][0] == approx(first)
    assert (rec["scheduled_s"][1:] >= rec["arrival_s"][1:]).all()


def test_vllm_burst_is_tokenized_in_parallel() -> None:
    sc = make(
        deployment={"engine": "vllm", "overhead": None},
        workload={"arrival": {"kind": "closed_loop", "concurrency": 4}, "num_requests": 4},
    )
    rec = simulator.simulate(sc).requests
    # vLLM's front end concurrency is unknown (left parallel): each its own 100 x 3 us, then
    # the style's request latency.
    front = load_engine_styles()["vllm"].front_end
    assert rec["arrival_s"] == approx(np.full(4, 100 * front.per_input_token_s + front.latency_s))


def test_client_ttft_includes_the_queue() -> None:
    sc = make(
        deployment={"engine": "sglang", "overhead": None},
        workload={"arrival": {"kind": "closed_loop", "concurrency": 4}, "num_requests": 4},
    )
    res = simulator.simulate(sc)
    rec, d = res.requests, res.to_dict()
    emit = load_engine_styles()["sglang"].front_end.first_chunk_s
    # Client TTFT = engine TTFT + front_end_s (queue + tokenization) + first-chunk emit.
    client = rec["first_token_s"] - rec["arrival_s"] + rec["front_end_s"] + emit
    assert d["ttft_s"]["mean"] == approx(float(client.mean()))
    assert d["ttft_engine_s"]["mean"] == approx(
        float((rec["first_token_s"] - rec["arrival_s"]).mean())
    )


LAT = FrontEnd(ingest_s=1e-3, per_input_token_s=10e-6, latency_s=0.2)  # + 200 ms on the way


def test_latency_follows_the_service_and_holds_no_queue() -> None:
    """The request latency delays each request by itself: a serial front end is free again
    after the service, so the second of a burst is not held by the first one's 200 ms."""
    q = FrontEndQueue(LAT, serial=True, served=True)
    # Services 11 ms and 6 ms as above; the serial queue frees at 11 ms, then 17 ms.
    assert q.ready_s(0.0, 1000) == approx(11e-3 + 0.2)
    assert q.ready_s(0.0, 500) == approx(17e-3 + 0.2)  # not 11 + 200 + 6 + 200 ms
    assert q.client_side_s(0.0, 17e-3 + 0.2, 500) == approx(0.217)
    par = FrontEndQueue(LAT, serial=False, served=True)
    assert par.ready_s(0.0, 500) == approx(6e-3 + 0.2)
    off = FrontEndQueue(LAT, serial=True, served=False)
    assert off.ready_s(0.0, 1000) == 0.0  # offline: charged after the fact, ingest + latency
    assert off.client_side_s(0.0, 0.0, 1000) == approx(11e-3 + 0.2)
    assert LAT.client_offset_s(np.array([1000]))[0] == approx(11e-3 + 0.2)
    assert LAT.client_offset_s(1000.0) == approx(11e-3 + 0.2)  # the estimate's scalar form


def _one_served(latency_s: float) -> dict[str, object]:
    overhead = {"step_s": 0.0, "per_seq_s": 0.0, "request_latency_s": latency_s}
    return make(deployment={"engine": "vllm", "overhead": overhead},
                workload={"arrival": {"kind": "closed_loop", "concurrency": 1},
                          "num_requests": 3})


def test_scenario_latency_moves_ttft_not_tpot_in_simulation_and_estimate() -> None:
    """deployment.overhead.request_latency_s = 0.25: one request at a time, so every request
    sees the same engine; client TTFT grows by exactly 250 ms and TPOT does not move, in the
    simulation and in the closed-form estimate alike."""
    base = simulator.simulate(_one_served(0.0)).to_dict()
    late = simulator.simulate(_one_served(0.25)).to_dict()
    assert late["ttft_s"]["mean"] == approx(base["ttft_s"]["mean"] + 0.25)
    assert late["tpot_s"]["mean"] == approx(base["tpot_s"]["mean"])
    e0 = simulator.estimate(simulator.load_scenario(_one_served(0.0)))
    e1 = simulator.estimate(simulator.load_scenario(_one_served(0.25)))
    assert e1.ttft_mean_s == approx(e0.ttft_mean_s + 0.25)
    assert e1.tpot_p50_s == approx(e0.tpot_p50_s)
    # An overhead without request_latency_s keeps the style's own latency.
    style = load_engine_styles()["vllm"]
    assert style.with_host_cost(0.0, 0.0, None).front_end == style.front_end
    assert style.with_host_cost(0.0, 0.0, 0.25).front_end.latency_s == 0.25
