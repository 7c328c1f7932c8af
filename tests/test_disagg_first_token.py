"""Disaggregation where the prefill replica emits the first token (DistServe's engine style):
TTFT ends with the prefill, the KV transfer delays the second token instead."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import simulator
from simulator.engines.style import load_engine_styles
from tests.test_disaggregation import LLAMA8B_KV_BYTES_PER_TOKEN, disagg, one_request
from tests.test_serving import decode, make, prefill, step_timer


def distserve(kv: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """disagg()'s single request (100 in / 3 out, 1 prefill + 1 decode H100, no host time)
    with both pools of the `distserve` style."""
    s = disagg(kv, **extra)
    for pool in ("prefill", "decode"):
        s["deployment"][pool]["engine"] = "distserve"
    return s


def test_the_shipped_distserve_style_emits_from_the_prefill() -> None:
    styles = load_engine_styles()
    assert styles["distserve"].prefill_emits_first_token
    assert not any(styles[n].prefill_emits_first_token for n in ("vllm", "sglang", "trtllm"))


def test_first_token_at_the_prefill_end_and_the_transfer_before_the_second() -> None:
    """100 in / 3 out: the prefill replica's prefill(100) samples token 1; transfer = 10 us +
    100 x 131072 B / 10 GB/s = 1.3207 ms; the decode replica's one-token step (the 100th
    prompt token after 99 cached, standing in for token 1 after 100 prompt tokens) samples
    token 2, a decode at 100 cached tokens token 3."""
    t = step_timer(make())
    kv = {"gb_per_s": 10.0, "latency_s": 1e-5}
    r = simulator.simulate(distserve(kv))
    rec = r.requests[0]
    first = t(prefill(100))
    assert rec["first_token_s"] == pytest.approx(first, rel=1e-9)
    transfer_s = 1e-5 + 100 * LLAMA8B_KV_BYTES_PER_TOKEN / 10e9
    second = first + transfer_s + t(prefill(1, 99))
    finish = second + t(decode(1, 100))
    assert rec["finish_s"] == pytest.approx(finish, rel=1e-9)
    assert rec["output_tokens"] == 3
    times = r.token_times(0)
    assert times == pytest.approx([first, second, finish], rel=1e-9)
    # TPOT spans the two tokens after the first: (finish - first) / 2; the inter-token gaps
    # are second - first (transfer included, the larger) and finish - second.
    d = r.to_dict()
    assert d["tpot_s"]["p50"] == pytest.approx((finish - first) / 2, rel=1e-9)
    assert d["itl_s"]["p99"] == pytest.approx(second - first, rel=1e-9)
    assert d["itl_s"]["p50"] == pytest.approx(finish - second, rel=1e-9)


def test_ttft_does_not_grow_with_a_slow_link_but_tpot_does() -> None:
    """4000-token prompt, 4 outputs: 524.3 MB of KV takes 0.524 s at 1 GB/s and 0.52 ms at
    1000 GB/s. With the prefill emitting the first token, the engine-side TTFT is the same on
    both links, in the simulation and in the closed-form estimate; the 0.524 s lands between
    tokens 1 and 2, so TPOT grows by about 0.524 / 3."""
    w = one_request(4000, 4)
    slow = distserve({"gb_per_s": 1.0, "latency_s": 0.0}, **w)
    fast = distserve({"gb_per_s": 1000.0, "latency_s": 0.0}, **w)
    s, f = simulator.simulate(slow).to_dict(), simulator.simulate(fast).to_dict()
    assert s["ttft_engine_s"]["p50"] == pytest.approx(f["ttft_engine_s"]["p50"], rel=1e-9)
    wire = 4000 * LLAMA8B_KV_BYTES_PER_TOKEN
    grown = s["tpot_s"]["p50"] - f["tpot_s"]["p50"]
    assert grown == pytest.approx((wire / 1e9 - wire / 1e12) / 3, rel=0.02)
    es = simulator.estimate(slow).to_dict()["ttft_ms"]["mean"]
    ef = simulator.estimate(fast).to_dict()["ttft_ms"]["mean"]
    assert es == pytest.approx(ef, rel=1e-9)


def test_a_one_token_request_finishes_at_its_prefill_and_moves_no_kv() -> None:
    """100 in / 1 out: the prefill's sample is the whole answer, so the request finishes at
    prefill(100) and no transfer is recorded."""
    t = step_timer(make())
    r = simulator.simulate(distserve(**one_request(100, 1)))
    rec = r.requests[0]
    assert rec["first_token_s"] == pytest.approx(t(prefill(100)), rel=1e-9)
    assert rec["finish_s"] == rec["first_token_s"]
    d = r.to_dict()["disaggregation"]
    assert d["kv_transfer_s"]["p50"] is None or np.isnan(d["kv_transfer_s"]["p50"])
