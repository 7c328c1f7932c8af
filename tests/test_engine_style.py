"""Engine styles: the shipped file loads, step-time arithmetic, one-line errors for bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.engines.style import EngineStyle, load_engine_styles
from simulator.errors import InputError

GOOD_BODY = (
    "{description: d, cpu_step_us: 100, cpu_per_seq_us: 2, overlap_cpu_with_gpu: true, source: s}"
)


def test_shipped_styles_load() -> None:
    styles = load_engine_styles()
    assert set(styles) == {"vllm", "sglang", "trtllm", "vllm-0.2", "distserve"}
    for name, style in styles.items():
        assert style.name == name
        assert style.cpu_step_s >= 0 and style.cpu_per_seq_s >= 0
        assert style.host_time_s(1) > 0
    # The three current engines overlap host work with the GPU by default; vLLM's V0 engine
    # (0.2.x) and DistServe's prototype run host and GPU work in series.
    assert all(styles[n].overlap_cpu_with_gpu for n in ("vllm", "sglang", "trtllm"))
    assert not any(styles[n].overlap_cpu_with_gpu for n in ("vllm-0.2", "distserve"))
    # vLLM 0.2 never mixes prompts into decode steps.
    assert not styles["vllm-0.2"].mix_prefill_decode
    assert styles["trtllm"].kv_admission == "reserve_full"
    assert styles["vllm"].kv_admission == "on_demand"


def test_host_time_is_fixed_plus_per_sequence() -> None:
    style = EngineStyle("x", cpu_step_s=1e-3, cpu_per_seq_s=10e-6, overlap_cpu_with_gpu=False)
    # 1 ms + 100 * 10 us = 2 ms
    assert style.host_time_s(100) == pytest.approx(2e-3)
    assert style.host_time_s(0) == pytest.approx(1e-3)


def test_serial_style_adds_host_to_gpu() -> None:
    style = EngineStyle("serial", cpu_step_s=2e-3, cpu_per_seq_s=0.0, overlap_cpu_with_gpu=False)
    # gpu 10 ms + host 2 ms = 12 ms
    assert style.step_time_s(10e-3, num_seqs=8) == pytest.approx(12e-3)


def test_overlapped_style_takes_the_longer_of_gpu_and_host() -> None:
    hidden = EngineStyle("ovl", cpu_step_s=2e-3, cpu_per_seq_s=0.0, overlap_cpu_with_gpu=True)
    # host 2 ms hides under gpu 10 ms
    assert hidden.step_time_s(10e-3, num_seqs=8) == pytest.approx(10e-3)
    exposed = EngineStyle("ovl", cpu_step_s=5e-3, cpu_per_seq_s=100e-6, overlap_cpu_with_gpu=True)
    # host 5 ms + 100 * 0.1 ms = 15 ms > gpu 10 ms
    assert exposed.step_time_s(10e-3, num_seqs=100) == pytest.approx(15e-3)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "styles.yaml"
    path.write_text(text)
    return path


def test_unknown_key_names_style_and_key(tmp_path: Path) -> None:
    body = GOOD_BODY[:-1] + ", cpu_per_token_us: 3}"
    path = _write(tmp_path, f"good: {GOOD_BODY}\nbadstyle: {body}\n")
    with pytest.raises(InputError) as err:
        load_engine_styles(path)
    msg = str(err.value)
    assert "badstyle" in msg and "cpu_per_token_us" in msg
    assert "\n" not in msg


def test_negative_value_names_style_and_key(tmp_path: Path) -> None:
    body = GOOD_BODY.replace("cpu_per_seq_us: 2", "cpu_per_seq_us: -1")
    path = _write(tmp_path, f"negstyle: {body}\n")
    with pytest.raises(InputError) as err:
        load_engine_styles(path)
    msg = str(err.value)
    assert "negstyle" in msg and "cpu_per_seq_us" in msg


def test_missing_key_and_non_mapping_top_level(tmp_path: Path) -> None:
    body = GOOD_BODY.replace(", source: s", "")
    with pytest.raises(InputError, match=r"nosource.*source"):
        load_engine_styles(_write(tmp_path, f"nosource: {body}\n"))
    with pytest.raises(InputError, match="top level"):
        load_engine_styles(_write(tmp_path, "- just a list\n"))


def test_good_tmp_file_converts_microseconds_to_seconds(tmp_path: Path) -> None:
    styles = load_engine_styles(_write(tmp_path, f"s: {GOOD_BODY}\n"))
    assert styles["s"].cpu_step_s == pytest.approx(100e-6)
    assert styles["s"].cpu_per_seq_s == pytest.approx(2e-6)



def test_vllm_02_timeline_adds_serial_host_and_ingest_and_never_mixes() -> None:
    """vllm-0.2 style, Llama-3.1-8B on one H100, chunked prefill switched on: request a
    (100 in / 3 out) at t=0, b (100 in / 3 out) arriving during a's first decode step. Each
    step costs GPU + 6.6 ms host in series, and b's prompt runs in a prefill-only step (a's
    decoding pauses for it) before one decode step carries both: a's token 3 at 101 cached
    tokens and b's token 2 at 100. The client TTFT adds 18 ms ingest + 100 x 3 us. Every
    step's GPU part is held to the style's dispatch floor, 32 layers x 0.46 ms = 14.72 ms,
    which on an H100 is longer than any of these 8B steps."""
    from simulator.api import simulate
    from simulator.cost.shape import BatchShape
    from tests.test_serving import decode, make, prefill, step_timer

    host = 6.6e-3
    floor = 32 * 0.46e-3
    timer = step_timer(make())

    def t(batch: BatchShape) -> float:
        return max(timer(batch), floor)

    assert timer(prefill(100)) < floor and timer(decode(2, 201)) < floor
    first = t(prefill(100)) + host
    step1 = t(decode(1, 100)) + host
    gap = first + step1 / 2  # b arrives halfway through a's first decode step
    dep = {"engine": "vllm-0.2", "overhead": None, "scheduler": {"chunked_prefill": True}}
    w = {"arrival": {"kind": "constant", "rate_per_s": 1.0 / gap}, "num_requests": 2}
    r = simulate(make(deployment=dep, workload=w))
    a, b = r.requests[0], r.requests[1]
    assert b["arrival_s"] - a["arrival_s"] == pytest.approx(gap, rel=1e-9)
    t0 = a["arrival_s"]
    assert a["first_token_s"] - t0 == pytest.approx(first, rel=1e-9)
    b_first = first + step1 + t(prefill(100)) + host
    assert b["first_token_s"] - t0 == pytest.approx(b_first, rel=1e-9)
    both = t(decode(2, 201)) + host
    assert a["finish_s"] - t0 == pytest.approx(b_first + both, rel=1e-9)
    # Both prompts have 100 tokens, so every client TTFT is the engine's + 18.3 ms.
    d = r.to_dict()
    offset = d["ttft_s"]["p50"] - d["ttft_engine_s"]["p50"]
    assert offset == pytest.approx(18e-3 + 100 * 3e-6, rel=1e-9)


def test_a_hybrid_state_has_one_home(tmp_path: Path) -> None:
    """A style pages states in its KV pool or keeps a pool of their own, not both; the pool's
    share of the memory after weights is r / (1 + r) of the ratio the engine names (SGLang's
    --mamba-full-memory-ratio 0.9: 0.9 / 1.9)."""
    both = GOOD_BODY[:-1] + ", states_paged: true, state_memory_ratio: 0.9}"
    with pytest.raises(InputError) as err:
        load_engine_styles(_write(tmp_path, f"twohomes: {both}\n"))
    assert "twohomes" in str(err.value) and "states_paged" in str(err.value)
    pool = GOOD_BODY[:-1] + ", state_memory_ratio: 0.9}"
    style = load_engine_styles(_write(tmp_path, f"pooled: {pool}\n"))["pooled"]
    assert style.state_pool_share == pytest.approx(0.9 / 1.9) and not style.states_paged
