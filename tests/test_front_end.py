"""Client-side TTFT: the engine style's per-request front-end cost on top of engine TTFT."""

from __future__ import annotations

import numpy as np

import simulator
from simulator.engines.style import FrontEnd, load_engine_styles
from simulator.metrics.summary import summarize
from simulator.serving.records import RECORD_DTYPE


def test_offset_is_ingest_plus_tokens_plus_first_chunk() -> None:
    fe = FrontEnd(ingest_s=1e-3, per_input_token_s=10e-6, first_chunk_s=12.5e-6)
    # 1 ms + 2000 x 10 us + 12.5 us = 21.0125 ms
    got = fe.client_offset_s(np.array([2000], dtype=np.int64))
    assert abs(float(got[0]) - 21.0125e-3) < 1e-12


def test_shipped_styles_charge_tokenization() -> None:
    styles = load_engine_styles()
    for style in styles.values():
        # 3 us/token: the middle of the HF tokenizers benchmarks' 1-5 us a token
        # (engine_styles.yaml header).
        assert np.isclose(style.front_end.per_input_token_s, 3e-6)
    for name in ("vllm", "sglang", "trtllm"):
        assert styles[name].front_end.ingest_s == 0.0  # unknown: charged nothing
    # DistServe's artifact measured idle short-prompt TTFTs of its vLLM baseline and of
    # DistServe (engine_styles.yaml): 18 ms and 11 ms per request outside engine steps.
    assert np.isclose(styles["vllm-0.2"].front_end.ingest_s, 18e-3)
    # DistServe: median idle TTFT 27.8 ms less the 100-token tensor-2 prefill (12.9 ms GPU,
    # 3.6 ms host) and its tokenization at the shipped rate.
    tokenize_ms = 100 * styles["distserve"].front_end.per_input_token_s * 1e3
    assert np.isclose(styles["distserve"].front_end.ingest_s * 1e3,
                      27.8 - 12.9 - 3.6 - tokenize_ms, atol=0.05)


def _records() -> np.ndarray:
    r = np.zeros(2, dtype=RECORD_DTYPE)
    r["arrival_s"] = [0.0, 1.0]
    r["scheduled_s"] = [0.0, 1.0]
    r["first_token_s"] = [0.1, 1.2]
    r["finish_s"] = [1.1, 2.2]
    r["input_tokens"] = [1000, 3000]
    r["output_tokens"] = [11, 11]
    r["front_end_s"] = [10e-3, 30e-3]  # 1000 and 3000 tokens x 10 us, before the engine
    return r


def test_client_ttft_adds_offset_and_keeps_tpot() -> None:
    fe = FrontEnd(per_input_token_s=10e-6)
    w = np.zeros(0)
    plain = summarize(_records(), w, w, 1, None)
    client = summarize(_records(), w, w, 1, None, fe)
    # Engine TTFTs 0.1 and 0.2 s; front ends 10 ms and 30 ms -> client 0.11 and 0.23 s.
    assert np.isclose(client["ttft_s"]["mean"], (0.11 + 0.23) / 2)
    assert client["ttft_engine_s"] == plain["ttft_s"]
    # e2e carries the same offset, so TPOT = (e2e - ttft) / 10 is unchanged.
    assert client["tpot_s"] == plain["tpot_s"]
    assert np.isclose(client["e2e_s"]["mean"] - plain["e2e_s"]["mean"], 0.02)


def test_simulate_reports_both_ttfts() -> None:
    s = simulator.load_scenario(
        "chat-llama-3.1-8b-h100", overrides=["workload.num_requests=40"]
    )
    d = simulator.simulate(s).to_dict()
    assert d["ttft_s"]["p50"] > d["ttft_engine_s"]["p50"]
