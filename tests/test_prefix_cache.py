"""Prefix caching (serving/prefix_cache.py): block names from content, hits that skip
prefill, reference counts of shared blocks, least-recently-used eviction under pressure, and
the accounting a session workload reports. Hand-derived cases with the arithmetic shown."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import simulator
from simulator.serving.prefix_cache import (
    KEY_STRIDE,
    PrefixCache,
    block_names,
    cached_prefix,
    prompt_names,
)
from simulator.serving.request import Request
from simulator.serving.sched_types import SchedulerConfig
from simulator.serving.scheduler import Scheduler
from simulator.workload.content import Content


def _name(seg: int, block: int) -> int:
    return seg * KEY_STRIDE + block


def test_a_block_is_named_by_the_segment_of_its_last_token() -> None:
    # Segments 0 (40 tokens: 0..39) and 5 (30 tokens: 40..69), blocks of 16: 70 // 16 = 4 full
    # blocks, ending at tokens 15, 31 (segment 0), 47, 63 (segment 5).
    assert block_names([(0, 40), (5, 30)], 16, 70) == [
        _name(0, 0), _name(0, 1), _name(5, 2), _name(5, 3)]
    # A prompt looks up its full blocks short of its last token: 64 tokens -> 63 -> 3 blocks.
    c = Content(((0, 64),), 1, 9)
    assert prompt_names(c, 16, 64) == [_name(0, 0), _name(0, 1), _name(0, 2)]


def test_cache_counts_references_and_evicts_the_least_recently_used() -> None:
    cache = PrefixCache()
    a = [_name(0, b) for b in range(3)]
    assert cache.register(a) == a  # computed by one request: held once each
    assert cache.hits(a) == (3, 0, 0)
    cache.acquire(a[:2])  # a second request shares the first two
    # The first lets go: blocks 0 and 1 are still held by the second, block 2 goes idle.
    assert cache.release(a) == 2
    assert list(cache.idle) == [a[2]]
    assert cache.release(a[:2]) == 0  # the second lets go: all idle, tail first
    assert list(cache.idle) == [a[2], a[1], a[0]]
    cache.trim(1)  # an allocation left room for one idle block: the two oldest go
    assert list(cache.idle) == [a[0]] and cache.evicted_blocks == 2
    assert cache.hits(a) == (1, 1, 0)


def _sched(num_blocks: int) -> Scheduler:
    return Scheduler(SchedulerConfig(
        max_num_seqs=16, max_num_batched_tokens=8192, chunked_prefill=True, policy="fcfs",
        block_size=16, num_blocks=num_blocks, prefix_caching=True))


def _request(i: int, segments: tuple[tuple[int, int], ...], output: int) -> Request:
    r = Request(i, 0.0, sum(n for _, n in segments), output, 0)
    r.attach(Content(segments, len(segments), 100 + i))
    return r


def _step(s: Scheduler, t: float) -> list[tuple[int, int]]:
    planned = s.plan(t)
    assert planned is not None
    s.commit(planned, t + 1.0)
    return [(r.index, c) for r, c in planned.chunks]


def test_a_shared_prompt_is_prefilled_once() -> None:
    # Two 100-token prompts opening with the same 64-token system prompt (segment 0), each
    # with 36 tokens of its own. The first prefills all 100 and caches its full blocks short
    # of its last token: 99 // 16 = 6 blocks, of which blocks 0-3 (tokens 0-63) lie in the
    # shared prompt. The second, admitted after, finds those 4 blocks: 64 tokens cached, its
    # prefill is the other 36.
    s = _sched(1000)
    s.add(_request(0, ((0, 64), (10, 36)), 4))
    assert _step(s, 0.0) == [(0, 100)]
    s.add(_request(1, ((0, 64), (11, 36)), 4))
    assert _step(s, 1.0) == [(1, 36)]
    second = s.running[1]
    assert second.cached_tokens == 64
    # Blocks in use: the first holds blocks_for(101) = 7 (prompt and one output), the second
    # 7 as well (blocks_for(100) = 7 at prefill, +0 yet) of which 4 are the first's: 7 + 3.
    assert s.used_blocks == 7 + 3


def test_eviction_takes_the_oldest_tails_first() -> None:
    # A pool of 20 blocks. Request A (prefix segment 0, 64 tokens, then 16 of its own) and
    # then B (prefix segment 1, the same shape) each prefill 80 tokens and finish with one
    # output: their KV, 80 + 1 - 1 = 80 tokens, is 5 full blocks each, all left cached and
    # idle, tail first: A4 A3 A2 A1 A0 B4 B3 B2 B1 B0 (oldest first). 20 blocks free, 10 idle.
    s = _sched(20)
    s.add(_request(0, ((0, 64), (10, 16)), 1))
    _step(s, 0.0)
    s.add(_request(1, ((1, 64), (11, 16)), 1))
    _step(s, 1.0)
    assert s.free_blocks == 20 and s.cache is not None and len(s.cache.idle) == 10
    # C, 224 tokens of its own (14 blocks, 15 with its first output's block at 224 + 1 - 1 =
    # 224 tokens: 14), takes 14 of the 20 free blocks: 6 left, so 4 idle blocks are evicted,
    # the oldest: A4, A3, A2, A1. A's prompt still finds A0 (16 tokens), B's all of B0-B3.
    s.add(_request(2, ((20, 224),), 8))
    _step(s, 2.0)
    assert s.free_blocks == 6 and s.cache.evicted_blocks == 4
    probe_a = _request(3, ((0, 64), (12, 16)), 1)
    probe_b = _request(4, ((1, 64), (13, 16)), 1)
    assert cached_prefix(s.cache, probe_a, 16) == (16, 1, 0)
    assert cached_prefix(s.cache, probe_b, 16) == (64, 4, 0)


def _sessions_scenario(**workload: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "sessions",
        "model": "llama-3.1-8b",
        "hardware": {"gpu": "h100-sxm"},
        "deployment": {"kind": "aggregated", "precision": "fp8", "engine": "vllm"},
        "workload": {
            "arrival": {"kind": "closed_loop", "concurrency": 1},
            "input_tokens": {"kind": "fixed", "value": 100},
            "output_tokens": {"kind": "fixed", "value": 50},
            "shared_prefix": {"tokens": 1024},
            "sessions": {"turns": {"kind": "fixed", "value": 2}},
            "num_requests": 4,
        },
    }
    base["workload"].update(workload)
    return base


def test_two_sessions_sharing_a_system_prompt() -> None:
    # One session at a time, two turns each, a 1024-token shared prompt, 100 new tokens a
    # turn, 50-token answers, blocks of 16.
    #   session 0 turn 1: prompt 1024 + 100 = 1124, nothing cached.
    #   session 0 turn 2: prompt 1124 + 50 + 100 = 1274; turn 1 left prompt and answer but the
    #     last token cached: 1124 + 50 - 1 = 1173 tokens, 73 full blocks = 1168 tokens (block
    #     73, tokens 1168-1183, ends in the new input).
    #   session 1 turn 1: prompt 1124; the shared prompt's 1024 / 16 = 64 blocks: 1024 tokens.
    #   session 1 turn 2: as session 0's, 1168.
    r = simulator.simulate(_sessions_scenario())
    assert r.requests["cached_tokens"].tolist() == [0, 1168, 1024, 1168]
    assert r.requests["input_tokens"].tolist() == [1124, 1274, 1124, 1274]
    pc = r.summary["prefix_cache"]
    assert pc["cached_tokens"] == 3360 and pc["prompt_tokens"] == 4796
    assert pc["token_hit_rate"] == 3360 / 4796 and pc["requests_hit"] == 3
    assert r.summary["sessions"]["sessions"] == 2
    assert r.summary["sessions"]["sessions_completed"] == 2


def test_caching_off_prefills_everything() -> None:
    s = _sessions_scenario()
    s["deployment"]["scheduler"] = {"prefix_caching": False}
    r = simulator.simulate(s)
    assert r.requests["cached_tokens"].tolist() == [0, 0, 0, 0]
    assert r.summary["prefix_cache"]["enabled"] is False


def test_requests_without_shared_content_run_the_same_with_caching_on_or_off() -> None:
    # Independent requests carry no content: the cache never sees them, bit for bit.
    s: dict[str, Any] = {
        "name": "plain", "model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
        "deployment": {"kind": "aggregated", "precision": "fp8"},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 20},
                     "input_tokens": {"kind": "uniform", "min": 100, "max": 2000},
                     "output_tokens": {"kind": "uniform", "min": 10, "max": 300},
                     "num_requests": 300, "seed": 3},
    }
    off = copy.deepcopy(s)
    off["deployment"]["scheduler"] = {"prefix_caching": False}
    a, b = simulator.simulate(s), simulator.simulate(off)
    for field in ("first_token_s", "finish_s"):
        assert np.array_equal(a.requests[field], b.requests[field])
    assert "prefix_cache" not in a.summary


@settings(max_examples=15, deadline=None)
@given(turns=st.integers(1, 6), new_in=st.integers(1, 600), out=st.integers(1, 200),
       prefix=st.integers(0, 3000), think=st.floats(0.0, 2.0), n=st.integers(1, 12))
def test_caching_never_slows_one_session_at_a_time(turns: int, new_in: int, out: int,
                                                    prefix: int, think: float, n: int) -> None:
    # One session in flight and nothing evicted: each turn runs alone, and with caching its
    # prefill is a part of the same prompt's over a cached context, so no turn's first token
    # comes later, and the run ends no later.
    w: dict[str, Any] = {
        "input_tokens": {"kind": "fixed", "value": new_in},
        "output_tokens": {"kind": "fixed", "value": out},
        "sessions": {"turns": {"kind": "fixed", "value": turns},
                     "think_time_s": {"kind": "fixed", "value_s": think}},
        "num_requests": n,
    }
    on = _sessions_scenario(**w)
    if prefix:
        on["workload"]["shared_prefix"] = {"tokens": prefix}
    else:
        del on["workload"]["shared_prefix"]
    off = copy.deepcopy(on)
    off["deployment"]["scheduler"] = {"prefix_caching": False}
    a, b = simulator.simulate(on), simulator.simulate(off)
    assert a.summary["prefix_cache"]["evicted_blocks"] == 0
    ttft_on = a.requests["first_token_s"] - a.requests["arrival_s"]
    ttft_off = b.requests["first_token_s"] - b.requests["arrival_s"]
    assert np.all(ttft_on <= ttft_off + 1e-12)
    assert a.requests["finish_s"].max() <= b.requests["finish_s"].max() + 1e-9


class _Target:
    """A routing candidate with a given load and cached prefix."""

    def __init__(self, index: int, requests: int, tokens: int, hit: int) -> None:
        self.index, self.outstanding_requests, self.outstanding_tokens = index, requests, tokens
        self.hit = hit

    def prefix_hit_tokens(self, r: Request) -> int:
        return self.hit


def test_prefix_affinity_follows_the_cache_and_cache_aware_weighs_the_queue() -> None:
    from simulator.serving.router import cache_aware, prefix_affinity

    r = _request(0, ((0, 3000), (10, 200)), 100)  # a 3200-token prompt
    # Replica 0 holds 3000 tokens of it but has 5000 tokens of work queued; replica 1 holds
    # none and has 1000 queued.
    busy, idle = _Target(0, 9, 5000, 3000), _Target(1, 2, 1000, 0)
    assert prefix_affinity([busy, idle], 0, r) is busy  # the cache, whatever the queue
    # cache_aware: replica 0: 5000 + (3200 - 3000) = 5200 tokens of work; replica 1:
    # 1000 + 3200 = 4200. The shorter queue wins here...
    assert cache_aware([busy, idle], 0, r) is idle
    # ...and with 3500 queued at replica 0 (3500 + 200 = 3700 < 4200) the cache does.
    assert cache_aware([_Target(0, 9, 3500, 3000), idle], 0, r).index == 0


def test_sessions_under_kv_pressure_keep_every_invariant() -> None:
    # A KV pool far smaller than 48 sessions' histories: blocks are shared, evicted and
    # preempted, and every step's accounting is checked (simulate(check=True)): the blocks in
    # use are those the running requests hold, a shared block counted once, and the idle
    # cached blocks fit in the free ones.
    s = _sessions_scenario(
        arrival={"kind": "closed_loop", "concurrency": 48},
        input_tokens={"kind": "uniform", "min": 50, "max": 1500},
        output_tokens={"kind": "uniform", "min": 20, "max": 400},
        shared_prefix={"tokens": 700, "count": 3},
        sessions={"turns": {"kind": "uniform", "min": 1, "max": 6},
                  "think_time_s": {"kind": "exponential", "mean_s": 0.5}},
        num_requests=400, seed=5)
    s["deployment"]["gpu_memory_utilization"] = 0.13  # ~18,000 tokens of FP8 KV
    s["deployment"]["replicas"] = 2
    s["deployment"]["router"] = "round_robin"
    s["hardware"]["gpus_per_node"] = 8
    r = simulator.simulate(s, check=True)
    pc = r.summary["prefix_cache"]
    assert pc["evicted_blocks"] > 0 and pc["cached_tokens"] > 0
    assert r.summary["requests_completed"] + r.summary["requests_dropped"] == 400


def test_a_dropped_turn_ends_its_session() -> None:
    # A 4096-token context (max_model_len): turn k's prompt is (k - 1) x 1000 + 500 tokens
    # (inputs and answers of 500). Turn 4: 3500 + a 500-token answer = 4000 fits; turn 5:
    # 4500 + 500 passes the window and is dropped (code 2); turn 6 is not sent (code 4, "an
    # earlier turn of its session was dropped").
    s = _sessions_scenario(input_tokens={"kind": "fixed", "value": 500},
                           output_tokens={"kind": "fixed", "value": 500},
                           sessions={"turns": {"kind": "fixed", "value": 6}},
                           num_requests=6)
    del s["workload"]["shared_prefix"]
    s["deployment"]["max_model_len"] = 4096
    r = simulator.simulate(s)
    assert r.requests["drop_reason"].tolist() == [0, 0, 0, 0, 2, 4]
    assert r.summary["sessions"]["sessions_completed"] == 0


def test_bad_session_inputs_are_one_line(capsys: Any) -> None:
    from tests.cli_helpers import run_cli

    for bad, says in [
        ("workload.sessions.turns={kind: fixed, value: 0}", "turns.value"),
        ("workload.sessions.think_time_s={kind: fixed, value_s: -1}", "think_time_s.value_s"),
        ("workload.sessions.think_time_s={kind: gamma, mean_s: 1}", "think_time_s kind"),
        ("workload.shared_prefix.count=0", "shared_prefix.count"),
    ]:
        code, _, err = run_cli(["simulate", "chat-sessions-llama-3.1-8b-h100", "--set", bad],
                                 capsys)
        assert code == 2 and says in err and len(err.strip().splitlines()) == 1, (bad, err)


def test_the_router_trade_is_visible() -> None:
    # The shipped routers sweep at 8 sessions/s: prefix affinity sends every session to the
    # replica that first cached the shared system prompt (busiest share 1.0) and misses the
    # SLO more than balancing does; cache_aware keeps the load even and finds more of the
    # prompts cached than least_outstanding, which ignores the caches.
    from simulator.sweep.grid import expand, load_sweep

    points = expand(load_sweep(Path(__file__).resolve().parent.parent / "scenarios" / "sweeps"
                               / "routers-chat-sessions-4xh100.yaml")).points
    at = {p.scenario["deployment"]["router"]: p.scenario for p in points
          if p.scenario["workload"]["arrival"]["rate_per_s"] == 8.0}
    s = {name: simulator.simulate(at[name]).summary
         for name in ("least_outstanding", "prefix_affinity", "cache_aware")}
    assert s["prefix_affinity"]["busiest_replica_share"] == 1.0
    assert s["cache_aware"]["busiest_replica_share"] < 0.35
    assert s["prefix_affinity"]["slo_attainment"] < s["least_outstanding"]["slo_attainment"]
    assert s["cache_aware"]["slo_attainment"] > s["least_outstanding"]["slo_attainment"]
    hit = {k: v["prefix_cache"]["token_hit_rate"] for k, v in s.items()}
    assert hit["cache_aware"] > hit["least_outstanding"]


def test_the_host_tier_keeps_what_the_gpu_evicts() -> None:
    # A host tier of 2 blocks. Three idle blocks a0 a1 a2 are evicted (a0 oldest): the host
    # keeps the two most recent, a1 and a2, and lets a0 go.
    cache = PrefixCache(offload_blocks=2)
    a = [_name(0, b) for b in range(3)]
    cache.register(a)
    cache.release(a[::-1])  # idle in order a0, a1, a2 (released last first)
    cache.trim(0)
    assert list(cache.host) == a[1:]
    assert cache.offloaded_blocks == 3 and cache.dropped_blocks == 1
    # A prompt over a1 a2 finds nothing at a0: no hit. A prompt starting at a1 is not a
    # prompt (a0 holds its first tokens), so a fresh a0 on the GPU makes a0 a1 a2 hit: one
    # on the GPU (idle), two to load.
    assert cache.hits(a) == (0, 0, 0)
    cache.register(a[:1])
    cache.release(a[:1])
    assert cache.hits(a) == (3, 1, 2)
    cache.acquire(a)
    assert cache.reloaded_blocks == 2 and cache.refs[a[2]] == 1


def test_a_host_hit_costs_its_load_on_the_admitting_step() -> None:
    # One block of 16 tokens costs 1 ms to load. Request A (80 tokens: 64 shared + 16 own)
    # leaves 5 idle blocks; a pool of 6 blocks; request C (96 tokens, 6 blocks) evicts all five
    # to the host. B, opening with the same 64 tokens, finds them there: 4 blocks loaded, 4 ms
    # on the step that admits it, and a prefill of its own 16 tokens.
    s = Scheduler(SchedulerConfig(
        max_num_seqs=16, max_num_batched_tokens=8192, chunked_prefill=True, policy="fcfs",
        block_size=16, num_blocks=6, prefix_caching=True, offload_blocks=100,
        reload_s_per_block=1e-3))
    s.add(_request(0, ((0, 64), (10, 16)), 1))
    _step(s, 0.0)
    s.add(_request(1, ((20, 96),), 1))
    _step(s, 1.0)
    assert s.cache is not None and s.cache.evicted_blocks == 5 and len(s.cache.host) == 5
    s.add(_request(2, ((0, 64), (11, 16)), 1))
    planned = s.plan(2.0)
    assert planned is not None
    assert [(r.index, c) for r, c in planned.chunks] == [(2, 16)]
    assert planned.reload_s == 4e-3


def test_reload_time_is_the_block_over_the_profile_link() -> None:
    # Llama-3.1-8B with an FP8 KV cache: 32 layers x 8 KV heads x 128 x 2 (K, V) = 65,536
    # elements a token on one GPU, at 8.002 bits each with the scales (the KV chain of
    # `frontier explain`): 65,552.4 bytes; a block of 16 tokens 1,048,838 bytes. H200's host
    # link (PCIe Gen5 x16, its profile) carries 63 GB/s: 16.65 us a block. 100 GB of host
    # memory holds 100e9 // 1,048,838 = 95,344 blocks.
    s = _sessions_scenario()
    s["hardware"]["gpu"] = "h200-sxm"
    s["deployment"]["precision"] = {"weights": "fp8", "activations": "fp8", "kv_cache": "fp8"}
    s["deployment"]["kv_offload"] = {"cpu_gb_per_gpu": 100}
    cfg = simulator.load_scenario(s).engine.scheduler  # type: ignore[union-attr]
    assert cfg.reload_s_per_block == pytest.approx(16 * 65_536 * 8.002 / 8 / 63e9, rel=1e-5)
    assert cfg.offload_blocks == 95_344


def test_bad_offload_inputs_are_one_line(capsys: Any) -> None:
    from tests.cli_helpers import run_cli

    base = ["simulate", "chat-sessions-llama-3.1-8b-h100", "--set"]
    for extra, says in [
        (["deployment.kv_offload={cpu_gb_per_gpu: 300}"], "more than h100-sxm's host memory"),
        (["deployment.kv_offload={cpu_gb_per_gpu: 50}", "--set", "hardware.gpu=b300"],
         "records no host link"),
        (["deployment.kv_offload={cpu_gb_per_gpu: 50}", "--set",
          "deployment.scheduler.prefix_caching=false"], "prefix_caching: true"),
        (["deployment.kv_offload={cpu_gb_per_gpu: 0}"], "cpu_gb_per_gpu"),
    ]:
        code, _, err = run_cli([*base, *extra], capsys)
        assert code == 2 and says in err and len(err.strip().splitlines()) == 1, (extra, err)


def _trace_scenario(path: Path, **arrival: Any) -> dict[str, Any]:
    s = _sessions_scenario()
    w = s["workload"]
    for key in ("input_tokens", "output_tokens", "shared_prefix", "sessions"):
        del w[key]
    w["arrival"] = {"kind": "trace", "path": str(path), **arrival}
    w["num_requests"] = 10
    return s


def test_a_trace_with_session_ids_continues_each_session(tmp_path: Path) -> None:
    # Session a's turn 2 (250 tokens) is its turn 1 (100) and answer (50), then 100 new
    # tokens. Turn 1 left 100 + 50 - 1 = 149 tokens of KV: 9 full blocks, 144 tokens cached.
    # Session b shares nothing. Session a's turn 3, 120 tokens, is shorter than its history
    # (250 + 20): a cut history, taken as a fresh prompt (warned).
    trace = tmp_path / "sessions.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens,session_id,turn\n"
                     "0.0,100,50,a,1\n5.0,250,20,a,2\n10.0,100,10,b,1\n12.0,120,10,a,3\n")
    r = simulator.simulate(_trace_scenario(trace))
    assert r.requests["cached_tokens"].tolist() == [0, 144, 0, 0]
    assert any("taken as fresh prompts" in w for w in r.warnings)


def test_a_mooncake_trace_shares_its_hashed_blocks(tmp_path: Path) -> None:
    # Mooncake's blocks are 512 tokens. Request 2 (1300 tokens, hashes 1 2 5) shares blocks
    # 1 and 2 with request 1 (1100 tokens, hashes 1 2 3): tokens 0-1023, which is 64 of the
    # engine's 16-token blocks, all cached (request 1 is done 2 s earlier): 1024 tokens.
    trace = tmp_path / "mooncake.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 1100, "output_length": 10, "hash_ids": [1, 2, 3]}\n'
        '{"timestamp": 2000, "input_length": 1300, "output_length": 10, "hash_ids": [1, 2, 5]}'
        "\n")
    r = simulator.simulate(_trace_scenario(trace))
    assert r.requests["cached_tokens"].tolist() == [0, 1024]
    sent = r.requests["arrival_s"] - r.requests["front_end_s"]  # the client's send instants
    assert sent[1] - sent[0] == pytest.approx(2.0)  # timestamps in milliseconds


def test_bad_session_traces_are_one_line(tmp_path: Path, capsys: Any) -> None:
    from tests.cli_helpers import run_cli

    out_of_order = tmp_path / "order.csv"
    out_of_order.write_text("arrival_s,input_tokens,output_tokens,session_id,turn\n"
                            "0.0,100,50,a,2\n1.0,300,50,a,1\n")
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5}\nnot json\n')
    for path, says in [(out_of_order, "line 3: session 'a' turn 1 comes after its turn 2"),
                       (bad_json, "line 2 (line 2: not a JSON object)")]:
        scenario = tmp_path / "s.yaml"
        scenario.write_text(yaml.safe_dump(_trace_scenario(path)))
        code, _, err = run_cli(["simulate", str(scenario)], capsys)
        assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err


def test_capacity_search_leaves_sessions_to_their_runs() -> None:
    # A session sweep's rate starts sessions, not requests, and the search's bracket (the
    # closed-form estimate) refuses sessions: recommend judges such points as they ran.
    from simulator.sweep.capacity import searchable

    assert not searchable(_sessions_scenario())
    plain = _sessions_scenario()
    del plain["workload"]["sessions"]
    assert searchable(plain)
