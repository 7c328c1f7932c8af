"""The serving engine as a spec: hand-derived timelines, invariants, queueing laws, limits.

Timeline tests set the host overhead to zero (`deployment.overhead`), so a step's wall time is
exactly the StepModel's time for the batch; each expected batch is written out by hand
(BatchShape fields, prefill_pairs(chunk, offset)) and costed by the same StepModel.
"""

from __future__ import annotations

import copy
import glob
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simulator
from simulator.cost.attention import prefill_pairs
from simulator.cost.shape import BatchShape
from simulator.errors import InputError
from simulator.inputs.scenario import load_scenario_file
from simulator.serving.engine_build import build_engine
from simulator.serving.replica import Replica

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = sorted(glob.glob(str(ROOT / "scenarios" / "*.yaml")))
CHAT = str(ROOT / "scenarios" / "chat-llama-3.1-8b-h100.yaml")

DESIGN_KEYS = (
    "requests_completed",
    "requests_dropped",
    "duration_s",
    "num_gpus",
    "output_tokens_per_s",
    "output_tokens_per_s_per_gpu",
    "input_tokens_per_s",
    "requests_per_s",
    "ttft_s",
    "tpot_s",
    "itl_s",
    "e2e_s",
    "queue_s",
    "output_tokens_per_s_per_user",
    "goodput_requests_per_s",
    "slo_attainment",
)
PERCENTILE_KEYS = (
    "ttft_s",
    "tpot_s",
    "itl_s",
    "e2e_s",
    "queue_s",
    "output_tokens_per_s_per_user",
)


# ----------------------------------------------------------------------------- helpers


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Deep merge; a mapping with a `kind` (a tagged-union variant) replaces the old one."""
    out = copy.deepcopy(base)
    for k, v in extra.items():
        if isinstance(v, dict) and "kind" not in v and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def make(**extra: Any) -> dict[str, Any]:
    """Llama-3.1-8B on one H100, no host overhead, offline 1 request of 100 in / 3 out."""
    base: dict[str, Any] = {
        "model": "llama-3.1-8b",
        "hardware": {"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": 1},
        "deployment": {"overhead": {"step_s": 0.0, "per_seq_s": 0.0, "request_latency_s": 0.0}},
        "workload": {
            "arrival": {"kind": "offline"},
            "input_tokens": {"kind": "fixed", "value": 100},
            "output_tokens": {"kind": "fixed", "value": 3},
            "num_requests": 1,
        },
    }
    return _merge(base, extra)


def trace_workload(tmp_path: Path, rows: list[tuple[float, int, int]]) -> dict[str, Any]:
    """A `workload` block replaying `rows` (arrival_s, input, output) from a plain trace CSV."""
    path = tmp_path / "trace.csv"
    lines = ["arrival_s,input_tokens,output_tokens"] + [f"{t!r},{i},{o}" for t, i, o in rows]
    path.write_text("\n".join(lines) + "\n")
    return {
        "workload": {
            "arrival": {"kind": "trace", "path": str(path)},
            "input_tokens": None,
            "output_tokens": None,
            "num_requests": len(rows),
        }
    }


def step_timer(scenario: dict[str, Any]) -> Callable[[BatchShape], float]:
    s, _ = load_scenario_file(scenario)
    return build_engine(s).step_model.time_s


def prefill(chunk: int, offset: int = 0, sampled: bool = True) -> BatchShape:
    return BatchShape.one_chunk(chunk, offset, completes_prompt=sampled)


def decode(seqs: int, context: int) -> BatchShape:
    return BatchShape(decode_seqs=seqs, decode_context_tokens=context)


def mixed(chunk: int, offset: int, decode_seqs: int, context: int) -> BatchShape:
    return BatchShape.one_chunk(chunk, offset, decode_seqs, context)


def approx(x: float) -> Any:
    return pytest.approx(x, rel=1e-12, abs=0.0)


# A served request reaches the engine after its tokenization, 3 us per prompt token in every
# shipped style (engine_styles.yaml; serving/front_end.py): 100 tokens sent at 0 arrive at 0.3 ms.
TOKENIZE_S = 3e-6


class Recorder:
    """A check hook that audits KV block accounting every step and remembers every request.

    Decoders hold their blocks implicitly (blocks_for(cached tokens)), so the audit recomputes
    what every running request holds after `plan()` reserved this step's blocks and compares
    it with the scheduler's used-block count.
    """

    def __init__(self) -> None:
        self.replicas: dict[int, Replica] = {}
        self.requests: dict[int, Any] = {}
        self.steps = 0

    def __call__(self, replica: Replica, planned: Any, dt: float) -> None:
        self.steps += 1
        self.replicas[replica.index] = replica
        sched = replica.sched
        cfg = sched.cfg
        assert dt > 0 and math.isfinite(dt)
        assert sched.free_blocks >= 0
        assert sched.used_blocks <= cfg.num_blocks
        assert len(sched.running) <= cfg.max_num_seqs
        b = planned.batch
        # without chunking, a recomputed context (prompt + outputs) may exceed the budget; it
        # is then prefilled alone, as vLLM v0 does
        lone_recompute = (
            not cfg.chunked_prefill
            and b.decode_seqs == 0
            and len(planned.chunks) == 1
            and planned.chunks[0][0].preemptions > 0
        )
        assert b.tokens <= cfg.max_num_batched_tokens or lone_recompute
        decoding_step = planned.batch.decode_seqs > 0
        held = 0
        decoders = 0
        for r in sched.running.values():
            self.requests[r.index] = r
            if r.decode_start_step >= 0:
                decoders += 1
                if cfg.reserve_full:
                    held += r.blocks
                else:
                    kv = r.kv_tokens_at(sched.step) + (1 if decoding_step else 0)
                    held += sched.blocks_for(kv)
            else:
                held += r.blocks
        assert held == sched.used_blocks, (held, sched.used_blocks)
        assert decoders == sched.num_decoding
        if decoding_step:
            assert planned.batch.decode_seqs == decoders
        if cfg.separate_prefill:
            # vLLM without chunked prefill (V0 semantics): steps are prefill-only or
            # decode-only; TensorRT-LLM still batches whole contexts with its generations
            assert planned.batch.prefill_tokens == 0 or planned.batch.decode_seqs == 0
        elif not cfg.chunked_prefill:
            assert cfg.mix_whole_prompts  # whole prompts only: no chunk is ever cut
            assert all(chunk == r.target - r.computed for r, chunk in planned.chunks)

    def assert_drained(self) -> None:
        for rep in self.replicas.values():
            s = rep.sched
            assert s.free_blocks == s.cfg.num_blocks, "KV blocks leaked"
            assert not s.running and len(s.waiting) == 0
            assert s.num_decoding == 0 and s.decode_kv_sum == 0
            assert s.outstanding_tokens == 0


# ------------------------------------------------------------------- 1. timelines


def test_timeline_single_request() -> None:
    sc = make()
    T = step_timer(sc)
    t1 = T(prefill(100))  # step 1: the whole prompt, samples the first token
    t2 = t1 + T(decode(1, 100))  # step 2: token 2, attends to 100 cached tokens
    t3 = t2 + T(decode(1, 101))  # step 3: token 3, context 101; done
    res = simulator.simulate(sc)
    rec = res.requests[0]
    assert rec["arrival_s"] == 0.0 and rec["scheduled_s"] == 0.0
    assert rec["first_token_s"] == approx(t1)
    assert rec["finish_s"] == approx(t3)
    d = res.to_dict()
    # The client sees the engine times plus the style's front end: 100 prompt tokens
    # tokenized at 3 us each and 12.5 us to emit the first chunk (engine_styles.yaml, vllm).
    front = 100 * TOKENIZE_S + 12.5e-6
    assert d["ttft_engine_s"]["p50"] == approx(t1)
    assert d["ttft_s"]["p50"] == approx(t1 + front)
    assert d["e2e_s"]["p50"] == approx(t3 + front)
    assert d["tpot_s"]["mean"] == approx((t3 - t1) / 2)
    assert d["queue_s"]["mean"] == 0.0
    assert d["output_tokens_per_s"] == approx(3 / t3)
    assert d["status"] == "completed" and d["preemptions"] == 0


@pytest.mark.parametrize("a_out", [1000, 3])
def test_timeline_a_then_b_at_2s_chunked(tmp_path: Path, a_out: int) -> None:
    """a (100 in, a_out out) at t=0, then b (200 in, 3 out) at t=2 with chunked prefill.

    a_out=1000: a is still decoding at t=2. vLLM's async scheduler planned the step after the
    one in flight when that one started, so b waits for the step in flight and then one more
    decode of a, and its whole prompt rides in the mixed step after. a_out=3: a is long done,
    the replica is idle, and b's prefill starts at exactly t=2.
    """
    sc = make(**trace_workload(tmp_path, [(0.0, 100, a_out), (2.0, 200, 3)]))
    T = step_timer(sc)
    b_in = 2.0 + 200 * TOKENIZE_S  # b reaches the engine once tokenized
    t = 100 * TOKENIZE_S + T(prefill(100))
    a_first, a_gen, a_ctx = t, 1, 100
    while a_gen < a_out and t < b_in:
        t += T(decode(1, a_ctx))
        a_ctx += 1
        a_gen += 1
    if a_gen < a_out:
        assert t > 2.0  # the step in flight when b arrived
        t += T(decode(1, a_ctx))  # the step planned while that one ran, without b
        a_ctx += 1
        a_gen += 1
        b_sched = t
        t += T(mixed(200, 0, 1, a_ctx))  # b's prompt + a's decode
        a_ctx += 1
        a_gen += 1
        b_first = t
        b_ctx, b_gen = 200, 1
        while b_gen < 3:
            t += T(decode(2, a_ctx + b_ctx))
            a_ctx, b_ctx, a_gen, b_gen = a_ctx + 1, b_ctx + 1, a_gen + 1, b_gen + 1
        b_finish = t
        while a_gen < a_out:
            t += T(decode(1, a_ctx))
            a_ctx += 1
            a_gen += 1
        a_finish = t
    else:
        a_finish = t
        assert a_finish < 2.0
        b_sched = b_in
        b_first = b_in + T(prefill(200))
        b_finish = b_first + T(decode(1, 200)) + T(decode(1, 201))
    res = simulator.simulate(sc)
    a, b = res.requests
    assert a["first_token_s"] == approx(a_first)
    assert a["finish_s"] == approx(a_finish)
    assert b["arrival_s"] == approx(b_in)
    assert b["scheduled_s"] == approx(b_sched)
    assert b["first_token_s"] == approx(b_first)
    assert b["finish_s"] == approx(b_finish)


def test_timeline_chunked_prefill_three_chunks() -> None:
    """10000-token prompt, 4096-token budget: chunks 4096, 4096, 1808 at offsets 0, 4096, 8192;
    only the last samples a token. Chunk c after p cached tokens attends c*p + c(c+1)/2 pairs."""
    sc = make(
        deployment={"scheduler": {"max_num_batched_tokens": 4096}},
        workload={"input_tokens": {"kind": "fixed", "value": 10000},
                  "output_tokens": {"kind": "fixed", "value": 2}},
    )
    assert prefill_pairs(1808, 8192) == 1808 * 8192 + 1808 * 1809 / 2
    T = step_timer(sc)
    t = 0.0
    for chunk, offset in ((4096, 0), (4096, 4096), (1808, 8192)):
        t += T(prefill(chunk, offset, sampled=offset + chunk == 10000))
    first = t
    finish = t + T(decode(1, 10000))
    res = simulator.simulate(sc, timeseries=True)
    rec = res.requests[0]
    assert rec["first_token_s"] == approx(first)
    assert rec["finish_s"] == approx(finish)
    assert res.timeseries is not None
    ts = res.timeseries
    assert ts[:, 4].tolist() == [4096, 4096, 1808, 0]  # prefill_tokens per step
    assert ts[:, 3].tolist() == [0, 0, 0, 1]  # decode_seqs per step


@pytest.mark.parametrize(("engine", "mixes"), [("vllm", False), ("trtllm", True)])
def test_whole_prompts_ride_with_decodes_only_where_the_engine_mixes_them(
        tmp_path: Path, engine: str, mixes: bool) -> None:
    """Chunked prefill off. vLLM (V0 semantics): b's 2,000-token prompt runs in a step of its
    own while a decodes. TensorRT-LLM's in-flight batching still batches b's whole context
    with a's generation (enable_chunked_prefill only decides whether a context may be split):
    some step carries both, and no step carries part of a prompt."""
    sc = make(
        deployment={"engine": engine, "scheduler": {"chunked_prefill": False}},
        **trace_workload(tmp_path, [(0.0, 100, 400), (1.0, 2000, 3)]),
    )
    res = simulator.simulate(sc, timeseries=True)
    assert res.timeseries is not None
    ts = res.timeseries
    both = [row for row in ts if row[4] > 0 and row[3] > 0]  # prefill tokens and decodes
    assert bool(both) is mixes
    assert all(row[4] in (100, 2000) for row in ts if row[4] > 0)  # whole prompts only


def test_timeline_no_chunked_prefill_stalls_decodes(tmp_path: Path) -> None:
    """Chunked prefill off (vLLM v0): b's prompt runs in a prefill-only step, during which the
    decoding a gets no token; a's remaining tokens all come later, so a finishes one prefill
    step later than it would alone."""
    sc = make(
        deployment={"scheduler": {"chunked_prefill": False}},
        **trace_workload(tmp_path, [(0.0, 100, 1000), (2.0, 2000, 3)]),
    )
    T = step_timer(sc)
    t = 100 * TOKENIZE_S + T(prefill(100))  # a reaches the engine once tokenized
    a_gen, a_ctx = 1, 100
    while t < 2.0 + 2000 * TOKENIZE_S:  # until b, tokenized, reaches it
        t += T(decode(1, a_ctx))
        a_ctx, a_gen = a_ctx + 1, a_gen + 1
    t += T(decode(1, a_ctx))  # planned ahead while the step in flight at t=2 ran
    a_ctx, a_gen = a_ctx + 1, a_gen + 1
    tokens_before = a_gen
    b_prefill_s = T(prefill(2000))
    t += b_prefill_s  # prefill-only: a's context and token count do not move
    b_first = t
    b_ctx, b_gen = 2000, 1
    while b_gen < 3:
        t += T(decode(2, a_ctx + b_ctx))
        a_ctx, b_ctx, a_gen, b_gen = a_ctx + 1, b_ctx + 1, a_gen + 1, b_gen + 1
    b_finish = t
    while a_gen < 1000:
        t += T(decode(1, a_ctx))
        a_ctx, a_gen = a_ctx + 1, a_gen + 1
    a_finish = t
    rec = Recorder()
    res = simulator.simulate(sc, timeseries=True, check=rec)
    rec.assert_drained()
    a, b = res.requests
    assert b["first_token_s"] == approx(b_first)
    assert b["finish_s"] == approx(b_finish)
    assert a["finish_s"] == approx(a_finish)
    assert res.timeseries is not None
    ts = res.timeseries
    row = int(np.flatnonzero(ts[:, 4] == 2000)[0])
    assert ts[row, 3] == 0  # no decode in b's prefill step
    assert ts[row, 8] == approx(b_prefill_s)
    # a emitted `tokens_before` tokens by the end of the step before b's prefill step
    assert int(np.count_nonzero(ts[:row, 3])) + 1 == tokens_before


# ------------------------------------------------------------------- 2. conservation

KV_UTILS = (0.22, 0.225, 0.23, 0.25, 0.3)  # llama-3.1-8b bf16 on H100: ~2.5k .. ~50k KV tokens


@st.composite
def small_scenarios(draw: st.DrawFn) -> dict[str, Any]:
    seqs = draw(st.integers(1, 48))
    budget = draw(st.sampled_from([64, 256, 1024, 4096]).filter(lambda b: b >= seqs))
    arrival = draw(
        st.one_of(
            st.just({"kind": "offline"}),
            st.builds(lambda r: {"kind": "poisson", "rate_per_s": r}, st.floats(0.5, 200.0)),
            st.builds(lambda c: {"kind": "closed_loop", "concurrency": c}, st.integers(1, 12)),
            st.builds(lambda r: {"kind": "constant", "rate_per_s": r}, st.floats(1.0, 100.0)),
        )
    )
    lo_in = draw(st.integers(1, 400))
    lo_out = draw(st.integers(1, 100))
    sc = make(
        deployment={
            "replicas": draw(st.integers(1, 2)),
            "router": draw(st.sampled_from(
                ["round_robin", "least_outstanding", "shortest_expected_latency"])),
            "engine": draw(st.sampled_from(["vllm", "trtllm"])),
            "gpu_memory_utilization": draw(st.sampled_from(KV_UTILS)),
            "scheduler": {
                "max_num_seqs": seqs,
                "max_num_batched_tokens": budget,
                "chunked_prefill": draw(st.booleans()),
                # the schema refuses a token budget below one block
                "block_size": draw(st.sampled_from([b for b in (1, 7, 16, 64, 256)
                                                    if b <= budget])),
                "policy": draw(st.sampled_from(["fcfs", "priority"])),
            },
        },
        workload={
            "arrival": arrival,
            "input_tokens": {"kind": "uniform", "min": lo_in,
                             "max": lo_in + draw(st.integers(0, 2500))},
            "output_tokens": {"kind": "uniform", "min": lo_out,
                              "max": lo_out + draw(st.integers(0, 300))},
            "num_requests": draw(st.integers(1, 24)),
            "seed": draw(st.integers(0, 2**16)),
            "priorities": {"values": [0, 1], "weights": [1, 1]},
        },
    )
    return sc


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_scenarios())
def test_conservation_and_kv_accounting(sc: dict[str, Any]) -> None:
    rec = Recorder()
    res = simulator.simulate(sc, check=rec)
    n = sc["workload"]["num_requests"]
    r = res.requests
    d = res.to_dict()
    assert res.status == "completed"
    assert d["requests_completed"] + d["requests_dropped"] == n
    finished = np.isfinite(r["finish_s"])
    assert d["requests_completed"] == int(np.count_nonzero(finished))
    dropped = r["drop_reason"] != 0
    assert np.array_equal(finished, ~dropped)
    assert sum(res.drop_reasons().values()) == d["requests_dropped"]
    done = r[finished]
    assert np.all(done["arrival_s"] <= done["scheduled_s"])
    assert np.all(done["scheduled_s"] <= done["first_token_s"])
    assert np.all(done["first_token_s"] <= done["finish_s"])
    assert int(r["preemptions"].sum()) == res.preemptions
    # every request the engine saw produced exactly its output count
    assert len(rec.requests) == d["requests_completed"]
    for req in rec.requests.values():
        assert req.generated == req.output_tokens
        assert req.output_tokens == r["output_tokens"][req.index]
    rec.assert_drained()


# -------------------------------------------------------------------- 3. closed loop


@pytest.mark.parametrize("concurrency", [1, 3, 8])
def test_closed_loop_never_exceeds_concurrency(concurrency: int) -> None:
    sc = make(workload={
        "arrival": {"kind": "closed_loop", "concurrency": concurrency},
        "input_tokens": {"kind": "uniform", "min": 10, "max": 2000},
        "output_tokens": {"kind": "uniform", "min": 1, "max": 200},
        "num_requests": 60,
        "seed": 7,
    })
    r = simulator.simulate(sc).requests
    start, end = r["arrival_s"] - r["front_end_s"], r["finish_s"]  # the client's send times
    assert np.all(np.isfinite(start)) and np.all(np.isfinite(end))
    # in flight at instant t: arrival <= t < finish; the maximum is reached at an arrival
    in_flight = [int(np.count_nonzero((start <= t) & (t < end))) for t in start]
    assert max(in_flight) == concurrency
    # a new request is sent exactly when one finishes
    later = np.sort(start)[concurrency:]
    assert all(np.isclose(end, t, rtol=0, atol=1e-12).any() for t in later)
    # the engine has each one after its tokenization: prompt x 3 us later (no queue in vLLM)
    assert r["front_end_s"] == pytest.approx(r["input_tokens"] * TOKENIZE_S, abs=1e-12)


# ------------------------------------------------------- 4./5. KV capacity, preemption


def test_preemption_when_kv_is_scarce() -> None:
    sc = make(
        # 0.21 x 85.5 GB (an H100 as CUDA reports it) leaves a cache of a few requests
        deployment={"gpu_memory_utilization": 0.2105},
        workload={"input_tokens": {"kind": "fixed", "value": 512},
                  "output_tokens": {"kind": "fixed", "value": 1024},
                  "num_requests": 64},
    )
    rec = Recorder()
    res = simulator.simulate(sc, check=rec)
    # room for ~3 full requests (1535 tokens each) while max_num_seqs is 256
    assert 1535 <= res.kv_capacity_tokens < 8 * 1535
    assert res.preemptions > 0
    assert res.to_dict()["requests_completed"] == 64
    r = res.requests
    assert np.all(r["output_tokens"] == 1024)
    assert int(r["preemptions"].sum()) == res.preemptions
    assert len(rec.requests) == 64
    assert all(q.generated == 1024 for q in rec.requests.values())
    rec.assert_drained()
    # chunked prefill's token identity: ITL mean == mean gap, preemptions included
    d = res.to_dict()
    gaps = float((r["finish_s"] - r["first_token_s"]).sum())
    assert d["itl_s"]["mean"] == pytest.approx(gaps / (64 * 1023), rel=1e-9)


def test_no_preemption_when_kv_is_roomy() -> None:
    sc = make(workload={"input_tokens": {"kind": "fixed", "value": 512},
                        "output_tokens": {"kind": "fixed", "value": 1024},
                        "num_requests": 64})
    rec = Recorder()
    res = simulator.simulate(sc, check=rec)
    assert res.kv_capacity_tokens > 64 * 1536
    assert res.preemptions == 0
    assert res.to_dict()["requests_completed"] == 64
    rec.assert_drained()


def test_reserve_full_admission_never_preempts() -> None:
    sc = make(
        deployment={"gpu_memory_utilization": 0.225, "engine": "trtllm"},
        workload={"input_tokens": {"kind": "fixed", "value": 512},
                  "output_tokens": {"kind": "fixed", "value": 1024},
                  "num_requests": 16},
    )
    rec = Recorder()
    res = simulator.simulate(sc, check=rec)
    assert res.preemptions == 0
    assert res.to_dict()["requests_completed"] == 16
    rec.assert_drained()


# -------------------------------------------------------------------- 6. determinism


def test_same_scenario_same_result() -> None:
    sc = simulator.load_scenario(CHAT, ["workload.num_requests=200"])
    a = json.dumps(simulator.simulate(sc).to_dict())
    b = json.dumps(simulator.simulate(sc).to_dict())
    assert a == b


def test_deterministic_across_processes_and_hash_seeds() -> None:
    outs = []
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run(
            [sys.executable, "-m", "simulator", "simulate", CHAT,
             "--set", "workload.num_requests=200", "--json"],
            capture_output=True, env=env, cwd=ROOT, check=True, timeout=120,
        )
        outs.append(proc.stdout)
    assert outs[0] == outs[1]
    assert json.loads(outs[0])["requests_completed"] == 200


# ---------------------------------------------------------------- 7. Little's law


def test_littles_law_on_steady_poisson_run() -> None:
    """Mean number in system over the middle half of the arrivals ≈ λ × mean time in system."""
    sc = simulator.load_scenario(CHAT, ["workload.num_requests=3000"])
    r = simulator.simulate(sc).requests
    arrive, leave = r["arrival_s"], r["finish_s"]
    t0, t1 = np.quantile(arrive, [0.25, 0.75])
    # integral of N(t) over [t0, t1] = sum of each request's time in system inside the window
    overlap = np.clip(np.minimum(leave, t1) - np.maximum(arrive, t0), 0.0, None)
    mean_in_system = float(overlap.sum()) / (t1 - t0)
    inside = (arrive >= t0) & (arrive < t1)
    rate = float(np.count_nonzero(inside)) / (t1 - t0)
    mean_e2e = float((leave - arrive)[inside].mean())
    assert mean_in_system == pytest.approx(rate * mean_e2e, rel=0.05)
    assert rate == pytest.approx(4.0, rel=0.1)


# ------------------------------------------------------- 8. queueing near capacity


def test_queueing_delay_explodes_near_capacity() -> None:
    base = make(
        deployment={"scheduler": {"max_num_seqs": 64, "max_num_batched_tokens": 4096}},
        workload={"input_tokens": {"kind": "fixed", "value": 512},
                  "output_tokens": {"kind": "fixed", "value": 64},
                  "num_requests": 300},
    )
    capacity = simulator.simulate(base).to_dict()["requests_per_s"]
    queue = {}
    for frac in (0.3, 0.6, 0.9, 1.05):
        sc = _merge(base, {"workload": {
            "arrival": {"kind": "poisson", "rate_per_s": frac * capacity},
            "num_requests": 1000,
        }})
        queue[frac] = simulator.simulate(sc).to_dict()["queue_s"]["mean"]
    assert queue[0.3] < queue[0.6] < queue[0.9] < queue[1.05]
    # the last 15% of load costs far more waiting than going from 30% to 60% did
    assert queue[1.05] - queue[0.9] > 10 * (queue[0.6] - queue[0.3])


# -------------------------------------------------------- 9. every shipped scenario


def _finite_numbers(d: dict[str, Any]) -> None:
    for key in DESIGN_KEYS:
        assert key in d, key
    for key in PERCENTILE_KEYS:
        block = d[key]
        assert set(block) == {"mean", "p50", "p90", "p99"}
        for v in block.values():
            assert isinstance(v, float) and math.isfinite(v), (key, block)
    for key in DESIGN_KEYS:
        if key in PERCENTILE_KEYS:
            continue
        v = d[key]
        if key in ("goodput_requests_per_s", "slo_attainment") and v is None:
            continue
        assert isinstance(v, int | float) and math.isfinite(v), (key, v)


@pytest.mark.parametrize("path", SCENARIOS, ids=[Path(p).stem for p in SCENARIOS])
def test_every_shipped_scenario_runs(path: str) -> None:
    loaded = simulator.load_scenario(path, ["workload.num_requests=100"])
    res = simulator.simulate(loaded)
    d = res.to_dict()
    assert res.status == "completed"
    assert d["requests_completed"] == 100 and d["requests_dropped"] == 0
    _finite_numbers(d)
    if loaded.scenario.slo is not None:
        assert 0.0 <= d["slo_attainment"] <= 1.0
    json.dumps(d, allow_nan=False)


# -------------------------------------------------------------------- 10. routers


def _two_replicas(router: str, n: int) -> np.ndarray:
    sc = simulator.load_scenario(CHAT, [
        "deployment.replicas=2", f"deployment.router={router}",
        "workload.arrival.rate_per_s=8", f"workload.num_requests={n}",
    ])
    return simulator.simulate(sc).requests["replica"]


def test_round_robin_alternates() -> None:
    rep = _two_replicas("round_robin", 50)
    assert rep.tolist() == [i % 2 for i in range(50)]


@pytest.mark.parametrize("router", ["least_outstanding", "shortest_expected_latency"])
def test_load_aware_routers_balance(router: str) -> None:
    rep = _two_replicas(router, 400)
    share = float(np.count_nonzero(rep == 0)) / rep.size
    assert 0.35 <= share <= 0.65
    assert set(rep.tolist()) == {0, 1}


# ---------------------------------------------------------------------- 11. drops


def test_trace_row_past_the_context_window_is_a_bad_row(tmp_path: Path) -> None:
    # llama-3.1-8b: max_position_embeddings 131072; 131000 + 100 = 131100 passes it (line 3)
    sc = make(**trace_workload(tmp_path, [(0.0, 100, 10), (0.5, 131000, 100), (1.0, 50, 5)]))
    with pytest.raises(InputError, match=r"1 bad row at line 3 .*131100 passes the context "
                                         r"window of 131072 tokens.*--skip-bad-rows"):
        simulator.simulate(sc)
    res = simulator.simulate(sc, skip_bad_rows=True)
    d = res.to_dict()
    assert d["requests_completed"] == 2 and d["requests_dropped"] == 0
    assert any("skipped 1 bad row (line 3)" in w for w in res.warnings)


def test_max_model_len_bounds_trace_rows(tmp_path: Path) -> None:
    # deployment.max_model_len 200: 100 + 10 fits, 150 + 60 = 210 does not (line 3)
    sc = make(deployment={"max_model_len": 200},
              **trace_workload(tmp_path, [(0.0, 100, 10), (0.5, 150, 60)]))
    with pytest.raises(InputError, match=r"line 3 .*210 passes the context window of 200"):
        simulator.simulate(sc)


def test_rare_tail_past_the_window_is_dropped_per_request() -> None:
    # max_model_len 2048, prompts normal(1000, 320): p99.9 = 1000 + 3.09 * 320 = 1989, plus 10
    # output tokens = 1999 <= 2048, so the scenario loads; P(prompt > 2038) = P(z > 3.24)
    # ~ 6e-4, so a few of 4000 requests pass the window and are dropped as vLLM refuses them.
    sc = make(deployment={"max_model_len": 2048, "overhead": {"step_s": 0.0, "per_seq_s": 0.0}},
              workload={"arrival": {"kind": "offline"},
                        "input_tokens": {"kind": "normal", "mean": 1000, "std": 320},
                        "output_tokens": {"kind": "fixed", "value": 10},
                        "num_requests": 4000, "seed": 3})
    res = simulator.simulate(sc)
    past = res.requests["input_tokens"] + res.requests["output_tokens"] > 2048
    assert past.sum() >= 1  # seed 3 draws some: the test sees the per-request path
    assert res.drop_reasons().get("exceeds max context length", 0) == int(past.sum())
    assert (res.requests["drop_reason"][past] != 0).all()


@pytest.mark.parametrize(
    ("deployment", "workload", "needle"),
    [
        ({}, {"input_tokens": {"kind": "fixed", "value": 10_000_000}},
         "workload.input_tokens: prompts up to 10000000 tokens"),
        ({}, {"input_tokens": {"kind": "uniform", "min": 1, "max": 131_000},
              "output_tokens": {"kind": "fixed", "value": 100}},
         "workload.output_tokens: prompt 131000 (max) + output 100 (the fixed value) = 131100"),
        ({"max_model_len": 4096}, {"input_tokens": {"kind": "empirical",
                                                    "values": [10, 4096]}},
         "prompts up to 4096 tokens (largest value) leave no room for an output token in "
         "deployment.max_model_len of 4096"),
        # lognormal median 2000, sigma 1: p99.9 = 2000 * e^3.09 = 43,969 > 8192
        ({"max_model_len": 8192}, {"input_tokens": {"kind": "lognormal", "median": 2000,
                                                    "sigma": 1.0}}, "(p99.9 of the unclipped"),
        ({"max_model_len": 200_000}, {}, "deployment.max_model_len: max_model_len 200000 "
                                         "exceeds llama-3.1-8b's context window of 131072"),
        ({"scheduler": {"max_num_batched_tokens": 512, "max_num_seqs": 8, "block_size": 1024}},
         {}, "block_size 1024 is above max_num_batched_tokens 512"),
        ({"scheduler": {"max_num_batched_tokens": 8, "max_num_seqs": 8},
          "speculative": {"method": "eagle3", "num_speculative_tokens": 8,
                          "acceptance_length": 2.0}}, {},
         "num_speculative_tokens 8 needs 9 tokens per verification step"),
    ],
)
def test_context_and_budget_bounds_are_refused_at_load(
    deployment: dict[str, Any], workload: dict[str, Any], needle: str
) -> None:
    sc = make()
    sc["deployment"].update(deployment)
    sc["workload"].update(workload)
    with pytest.raises(InputError) as info:
        simulator.load_scenario(sc)
    assert needle in str(info.value), info.value


def test_disaggregated_window_is_the_smaller_pool() -> None:
    sc = make(workload={"input_tokens": {"kind": "fixed", "value": 5000}})
    sc["deployment"] = {"kind": "disaggregated", "prefill": {"max_model_len": 8192},
                        "decode": {"max_model_len": 4096}}
    with pytest.raises(InputError, match=r"deployment\.decode\.max_model_len of 4096"):
        simulator.load_scenario(sc)


def test_drop_prompt_above_budget_without_chunked_prefill(tmp_path: Path) -> None:
    sc = make(
        deployment={"scheduler": {"chunked_prefill": False, "max_num_batched_tokens": 8192}},
        **trace_workload(tmp_path, [(0.0, 9000, 10), (0.1, 8192, 10)]),
    )
    res = simulator.simulate(sc)
    assert res.drop_reasons() == {
        "prompt exceeds max_num_batched_tokens without chunked prefill": 1
    }
    assert res.to_dict()["requests_completed"] == 1
    # the same prompt is served in chunks when chunked prefill is on
    on = simulator.simulate(_merge(sc, {"deployment": {"scheduler": {"chunked_prefill": True}}}))
    assert on.to_dict()["requests_dropped"] == 0


def test_drop_beyond_kv_capacity(tmp_path: Path) -> None:
    sc = make(deployment={"gpu_memory_utilization": 0.2058},
              **trace_workload(tmp_path, [(0.0, 100, 10), (0.1, 4000, 10)]))
    res = simulator.simulate(sc)
    assert res.kv_capacity_tokens < 4000
    assert res.drop_reasons() == {"exceeds KV cache capacity": 1}


# ------------------------------------------------------------------------ 12. ITL


def test_itl_of_one_request_is_its_decode_steps() -> None:
    out = 6
    sc = make(workload={"output_tokens": {"kind": "fixed", "value": out}})
    T = step_timer(sc)
    steps = np.array([T(decode(1, 100 + k)) for k in range(out - 1)])
    d = simulator.simulate(sc).to_dict()
    itl = d["itl_s"]
    assert itl["mean"] == pytest.approx(steps.mean(), rel=1e-12)
    for name, q in (("p50", 50), ("p90", 90), ("p99", 99)):
        assert itl[name] == approx(float(np.percentile(steps, q, method="inverted_cdf")))
    assert itl["mean"] == pytest.approx(d["tpot_s"]["mean"], rel=1e-12)


@pytest.mark.parametrize("chunked", [True, False])
def test_itl_mean_is_the_mean_token_gap(tmp_path: Path, chunked: bool) -> None:
    """Every gap between output tokens is one ITL sample, so their mean is
    sum(finish - first token) / sum(outputs - 1) over requests."""
    sc = make(
        deployment={"scheduler": {"chunked_prefill": chunked}},
        **trace_workload(tmp_path, [(0.0, 100, 1000), (2.0, 2000, 3)]),
    )
    res = simulator.simulate(sc)
    r = res.requests
    gaps = float((r["finish_s"] - r["first_token_s"]).sum())
    assert res.to_dict()["itl_s"]["mean"] == pytest.approx(
        gaps / float((r["output_tokens"] - 1).sum()), rel=1e-9
    )


# --------------------------------------------------------------------- 13. limits


def test_time_limit_stops_an_overloaded_run() -> None:
    # ~80 req/s of 500-token prompts fill an H100's 8192-token steps; 400 req/s overloads it
    sc = make(
        workload={"arrival": {"kind": "poisson", "rate_per_s": 400.0},
                  "input_tokens": {"kind": "fixed", "value": 500},
                  "output_tokens": {"kind": "fixed", "value": 20},
                  "num_requests": 5000},
        limits={"max_simulated_time_s": 5},
    )
    res = simulator.simulate(sc)
    d = res.to_dict()
    assert res.status == "time_limit" == d["status"]
    assert any("time_limit" in w for w in res.warnings)
    assert 0 < d["requests_completed"] < 5000
    assert float(np.nanmax(res.requests["finish_s"])) <= 5.0
    _finite_numbers(d)


def test_waiting_queue_limit() -> None:
    sc = simulator.load_scenario(CHAT, [
        "workload.arrival.rate_per_s=200", "workload.num_requests=5000",
        "deployment.scheduler.max_num_seqs=16", "limits.max_waiting_requests=50",
    ])
    res = simulator.simulate(sc)
    assert res.status == "queue_limit"
    assert any("queue_limit" in w for w in res.warnings)
    assert res.to_dict()["requests_completed"] < 5000


@pytest.mark.parametrize("chunked", [True, False])
def test_token_times_reconstruct_every_token(chunked: bool) -> None:
    """Each finished request's token times come back from the compact clock: exactly
    output_tokens of them, starting at its first token, ending at its finish, never going
    backwards, also for requests preempted and recomputed (a small KV pool forces it)."""
    sc = make(
        deployment={
            "gpu_memory_utilization": 0.225,
            "scheduler": {"chunked_prefill": chunked, "max_num_seqs": 64},
        },
        workload={
            "arrival": {"kind": "offline"},
            "input_tokens": {"kind": "uniform", "min": 200, "max": 900},
            "output_tokens": {"kind": "uniform", "min": 1, "max": 700},
            "num_requests": 80,
            "seed": 11,
        },
    )
    res = simulator.simulate(sc)
    assert res.preemptions > 0
    recs = res.requests
    for i in range(len(recs)):
        t = res.token_times(i)
        assert len(t) == recs["output_tokens"][i]
        assert t[0] == recs["first_token_s"][i] and t[-1] == recs["finish_s"][i]
        assert np.all(np.diff(t) >= 0)


def test_timeline_sglang_runs_prefill_apart_from_decode(tmp_path: Path) -> None:
    """SGLang style (mix_prefill_decode false): with chunked prefill on, b's 2000-token prompt
    runs as two prefill-only chunks of the 1024-token budget (1024 at offset 0, 976 at 1024)
    while the decoding a waits; vLLM style would have put a's decode beside each chunk."""
    sc = make(
        deployment={"engine": "sglang", "scheduler": {"max_num_batched_tokens": 1024}},
        **trace_workload(tmp_path, [(0.0, 100, 1000), (2.0, 2000, 3)]),
    )
    T = step_timer(sc)
    t = 100 * TOKENIZE_S + T(prefill(100))  # a reaches the engine once tokenized
    a_gen, a_ctx = 1, 100
    while t < 2.0 + 2000 * TOKENIZE_S:  # until b, tokenized, reaches it
        t += T(decode(1, a_ctx))
        a_ctx, a_gen = a_ctx + 1, a_gen + 1
    t += T(decode(1, a_ctx))  # the overlap scheduler planned this one before b arrived
    a_ctx, a_gen = a_ctx + 1, a_gen + 1
    t += T(prefill(1024, 0, sampled=False)) + T(prefill(976, 1024))  # a gets no token
    b_first = t
    res = simulator.simulate(sc, timeseries=True, check=Recorder())
    b = res.requests[1]
    assert b["first_token_s"] == approx(b_first)
    assert res.timeseries is not None
    steps = res.timeseries[:, 3:5].tolist()  # (decode_seqs, prefill_tokens) per step
    assert [0, 1024] in steps and [0, 976] in steps
    assert all(d == 0 or p == 0 for d, p in steps)  # never mixed


def test_whole_prompt_beside_decodes_waits_for_the_budget() -> None:
    """TensorRT-LLM batches whole contexts beside its generations (chunked prefill off): a
    64-token prompt does not join a step that already carries a decode under a 64-token
    budget (64 + 1 > 64); it waits until it fits. Found by the conservation property: the
    Recorder asserts every step's tokens against the budget."""
    sc = {
        "model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
        "deployment": {"engine": "trtllm", "overhead": {"step_s": 0.0, "per_seq_s": 0.0},
                       "scheduler": {"max_num_seqs": 2, "max_num_batched_tokens": 64,
                                     "chunked_prefill": False, "block_size": 1}},
        "workload": {"arrival": {"kind": "offline"},
                     "input_tokens": {"kind": "uniform", "min": 23, "max": 65},
                     "output_tokens": {"kind": "fixed", "value": 2},
                     "num_requests": 15, "seed": 0},
    }
    rec = Recorder()
    res = simulator.simulate(sc, check=rec)
    assert res.to_dict()["requests_completed"] + res.to_dict()["requests_dropped"] == 15
    rec.assert_drained()
