"""Attention data parallelism and expert parallelism as real ranks; MoE routing skew; EPLB."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simulator.api import simulate
from simulator.cost import Formats, ParallelLayout, StepModel
from simulator.cost.moe_routing import hot_factor, hottest_rank_slots, zipf_loads
from simulator.cost.ranks import rank_time_s, ranked_step
from simulator.cost.shape import BatchShape
from simulator.errors import InputError
from simulator.hardware.profile import load_hardware
from simulator.inputs.scenario import Scenario
from simulator.model.load import load_architecture
from simulator.serving.engine_build import build_engine
from tests.fast_forward_helpers import assert_runs_match_stepwise

FP8 = {"weights": "fp8", "activations": "fp8", "kv_cache": "fp8"}


def scenario(
    model: str, tp: int, dp: int, ep: int, concurrency: int, n: int, **dep: Any
) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "name": "dp",
        "model": model,
        "hardware": {"gpu": "h200-sxm", "gpus_per_node": 8, "nodes": 1},
        "deployment": {
            "tensor_parallel": tp,
            "attention_data_parallel": dp,
            "expert_parallel": ep,
            "precision": FP8,
            "scheduler": {"max_num_seqs": 256, "max_num_batched_tokens": 8192},
            **dep,
        },
        "workload": {
            "arrival": {"kind": "closed_loop", "concurrency": concurrency},
            "input_tokens": {"kind": "fixed", "value": 1000},
            "output_tokens": {"kind": "fixed", "value": 1000},
            "num_requests": n,
            "seed": 0,
        },
    }


@pytest.mark.parametrize("model", ["qwen3-235b-a22b", "deepseek-r1"])
def test_tp_wins_latency_and_attention_dp_wins_throughput(model: str) -> None:
    # Same code both ways: at concurrency 1 TP8 splits each token's weights and attention over
    # 8 GPUs, while DP8 runs each token's attention on one rank; at concurrency 1024 DP8 holds
    # 8 per-rank batches of up to 256 with replicated attention weights and no TP all-reduce.
    def run(tp: int, dp: int, ep: int, conc: int, n: int) -> dict[str, Any]:
        return simulate(scenario(model, tp, dp, ep, conc, n)).summary

    tp1 = run(8, 1, 1, 1, 2)
    dp1 = run(1, 8, 8, 1, 2)
    assert tp1["tpot_s"]["p50"] < dp1["tpot_s"]["p50"]
    tp_hi = run(8, 1, 1, 1024, 2048)
    dp_hi = run(1, 8, 8, 1024, 2048)
    assert dp_hi["output_tokens_per_s_per_gpu"] > 1.5 * tp_hi["output_tokens_per_s_per_gpu"]


def model(dp: int, ep: int, tp: int = 1, slots: tuple[float, ...] | None = None) -> StepModel:
    arch = load_architecture("qwen3-235b-a22b")
    hw = load_hardware("h200-sxm")
    return StepModel(arch, hw, ParallelLayout(tp, 1, dp, ep), Formats("fp8", "fp8", "fp8"),
                     0.0, slots)


def test_one_rank_ranked_step_is_the_plain_step() -> None:
    m = model(1, 1, tp=8)
    b = BatchShape.one_chunk(512, 100, decode_seqs=30, decode_context_tokens=30_000)
    assert ranked_step(m, [b]).time_s == pytest.approx(m.time_s(b), rel=1e-12)


def test_the_rank_holding_the_long_context_sets_the_step() -> None:
    # Two ranks, 8 decoders each; rank 0's first sequence has 100k cached tokens, the others
    # 1k. Step = max(rank-local) + shared MoE part, and the max is rank 0's.
    m = model(2, 2, tp=4)
    short = BatchShape(decode_seqs=8, decode_context_tokens=8 * 1000)
    long = BatchShape(decode_seqs=8, decode_context_tokens=7 * 1000 + 100_000)
    skewed = ranked_step(m, [long, short])
    even = ranked_step(m, [short, short])
    assert skewed.slowest_rank_s == rank_time_s(m, long, 16)
    assert skewed.time_s - even.time_s == pytest.approx(
        rank_time_s(m, long, 16) - rank_time_s(m, short, 16), rel=1e-9
    )
    assert even.imbalance_s == 0.0
    assert skewed.imbalance_s == pytest.approx(
        (rank_time_s(m, long, 16) - rank_time_s(m, short, 16)) / 2, rel=1e-9
    )




def test_uniform_load_has_near_zero_imbalance_and_a_long_request_shows_it() -> None:
    even = simulate(scenario("qwen3-235b-a22b", 4, 2, 8, 16, 64)).summary
    assert even["attention_dp_imbalance_share"] < 0.01
    # One request alone on two ranks: rank 1 idles every step while rank 0 works, so the
    # imbalance is half of rank 0's local time; it must be a visible share.
    alone = simulate(scenario("qwen3-235b-a22b", 4, 2, 8, 1, 1)).summary
    assert alone["attention_dp_imbalance_share"] > 0.05


def test_each_rank_has_its_own_kv_pool_and_limits() -> None:
    e = build_engine(Scenario.model_validate(scenario("qwen3-235b-a22b", 1, 8, 8, 1, 1)))
    # The replica's KV capacity (8 GPUs' pools) split over 8 ranks, in blocks of 16.
    assert e.scheduler.num_blocks == e.memory.kv_capacity_tokens // 8 // 16
    assert e.scheduler.max_num_seqs == 256  # per rank, as SGLang and TRT-LLM apply it


def test_dense_attention_dp_is_independent_replicas() -> None:
    base = scenario("llama-3.1-8b", 1, 4, 1, 64, 256)
    as_dp = simulate(base)
    plain = dict(base, deployment=dict(base["deployment"], attention_data_parallel=1,
                                       replicas=4, attention_dp_router="round_robin"))
    as_replicas = simulate(plain)
    assert as_dp.summary["output_tokens_per_s"] == pytest.approx(
        as_replicas.summary["output_tokens_per_s"], rel=1e-12
    )
    assert any("independent replicas" in w for w in as_dp.warnings)


def test_hottest_rank_hand_case_and_eplb() -> None:
    # Experts 0..3 carry 0.5, 0.2, 0.2, 0.1; EP2 puts {0,1} on rank 0 (0.7) and {2,3} on
    # rank 1 (0.3): the busiest rank does 0.7 / 0.5 = 1.4x the mean.
    loads = [0.5, 0.2, 0.2, 0.1]
    slots = hottest_rank_slots(loads, 2)
    assert slots == (0.5, 0.2)
    assert hot_factor(slots, 2) == pytest.approx(1.4)
    # Two redundant slots: expert 0 (0.5) gets a copy (0.25 each), still the heaviest per
    # copy, so a third (1/6 each). Slots .2 .2 1/6 1/6 1/6 .1 packed 3 per rank heaviest
    # first onto the lighter rank: rank 0 = .2 + 1/6 + 1/6 = 0.5333 -> 1.0667x the mean.
    eplb = hottest_rank_slots(loads, 2, redundant_experts=2)
    assert hot_factor(eplb, 2) == pytest.approx(2 * (0.2 + 2 / 6))


def test_zipf_zero_is_uniform_and_skew_slows_the_moe() -> None:
    assert zipf_loads(8, 0.0) == [1 / 8] * 8
    uniform = model(8, 8)
    loads = zipf_loads(128, 1.2)
    skewed = model(8, 8, slots=hottest_rank_slots(loads, 8))
    balanced = model(8, 8, slots=hottest_rank_slots(loads, 8, redundant_experts=32))
    b = [BatchShape(decode_seqs=128, decode_context_tokens=128 * 2000)] * 8
    t_u, t_s, t_b = (ranked_step(m, b).time_s for m in (uniform, skewed, balanced))
    assert t_u < t_b < t_s


def test_routing_keys_reach_the_run() -> None:
    r = {"skew": "zipf", "s": 1.2}
    skewed = simulate(scenario("qwen3-235b-a22b", 1, 8, 8, 512, 1024, moe_routing=r)).summary
    flat = simulate(scenario("qwen3-235b-a22b", 1, 8, 8, 512, 1024)).summary
    assert skewed["output_tokens_per_s"] < flat["output_tokens_per_s"]


def test_bad_load_profile_is_one_clear_line(tmp_path: Path) -> None:
    f = tmp_path / "loads.csv"
    f.write_text("load\n1\n2\n")
    s = scenario("qwen3-235b-a22b", 1, 8, 8, 1, 1, moe_routing={"profile": str(f)})
    with pytest.raises(InputError, match=r"has 2 loads; .* 128 experts"):
        simulate(s)
    f.write_text("1,2\n3,x\n")
    with pytest.raises(InputError, match="non-number"):
        simulate(s)
    f.write_text("\n".join(["1"] * 128))
    assert simulate(s).summary["requests_completed"] == 1


@pytest.mark.parametrize(
    ("concurrency", "dep", "out"),
    [
        (1, {}, (250, 1000)),  # one request at a time: one busy rank, seven idle ones
        (12, {"attention_dp_router": "round_robin"}, (250, 1000)),  # all ranks busy, uneven KV
        # ~12k KV tokens per rank for six 3k-4k-token requests: runs stop before a rank would
        # preempt (and preemptions follow, step by step)
        (48, {"gpu_memory_utilization": 0.28}, (2000, 3000)),
        # prefill-only steps hold decoders back: a run's first step pays their gaps
        (12, {"scheduler": {"chunked_prefill": False, "max_num_seqs": 256}}, (250, 1000)),
        # the dispatch floor (94 layers x 0.46 ms) holds the runs' GPU parts
        (12, {"engine": "vllm-0.2"}, (250, 1000)),
    ],
)
def test_ranked_decode_runs_are_exactly_the_step_by_step_run(
    concurrency: int, dep: dict[str, Any], out: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs of pure decode steps over all ranks are one SimPy event and one vectorized
    costing; with --check every step is its own event. The two must agree bit for bit:
    clocks are summed step by step and each run stops before anything could change."""
    sc = scenario("qwen3-235b-a22b", 1, 8, 8, concurrency, 64, **dep)
    sc["workload"]["output_tokens"] = {"kind": "uniform", "min": out[0], "max": out[1]}
    assert_runs_match_stepwise(sc, monkeypatch, min_steps=1000)


def test_the_estimate_costs_a_prompt_chunk_on_one_rank_not_on_every_rank() -> None:
    """Attention-DP ranks step together, so a step in which one rank prefills holds every
    rank for it; the other ranks still only decode. DeepSeek-R1 on 8 B200s, attention-DP 8,
    EP 8, 8 decoders a rank: the closed form's chunk step is the ranked step with the 1024-
    token chunk on one rank (cost/ranks.py), well under the same chunk on all eight, and
    above a decode-only step."""
    from simulator.closed_form.unit_build import UnitStep
    from simulator.engines.style import engine_style

    model = StepModel(load_architecture("deepseek-r1"), load_hardware("b200"),
                      ParallelLayout(1, 1, 8, 8), Formats("fp8", "fp8", "fp8"))
    style = engine_style("trtllm")
    step = UnitStep(model, style, 1500.0, ranks=8)
    one = step.chunk_on_one_rank(8.0, 1024.0, 1.0, 0.0)
    every = step(8.0, 1024.0, 1.0, 0.0)
    decode = step(8.0, 0.0, 0.0, 0.0)
    busy = BatchShape(prefill_tokens=1024, prefill_seqs=1, prefill_attention_pairs=1024 * 1025 / 2,
                      prefill_sampled_seqs=1, decode_seqs=8, decode_context_tokens=8 * 1500)
    idle = BatchShape(decode_seqs=8, decode_context_tokens=8 * 1500)
    gpu = ranked_step(model, [busy, *([idle] * 7)]).time_s
    assert one == pytest.approx(style.step_time_s(gpu, 8 * 8 + 1), rel=1e-12)
    assert decode < one < every / 2


def test_wide_attention_dp_decode_is_not_held_by_padded_prompts() -> None:
    """A measured run (silicon_calibration.csv dsr1_b200_trtllm_fp4_agg_1024x1024_c128_cfg191,
    TensorRT-LLM 1.2.0rc6.post2): DeepSeek on 64 B200s (8 nodes), attention-DP 64, EP 8,
    128 clients of 1024 in and out, mean TPOT 21.33 ms. Costing every prompt as if all 64
    ranks prefilled one, padded, the estimate said 336 ms (the simulation 98 ms); with the
    prompt on its own rank, gathered unpadded, the estimate is within 50 % (28.6 ms; the
    simulation 25-28 ms depending on the clients' phases, not run here: 64 ranks are slow)."""
    import simulator

    scenario: dict[str, Any] = {
        "model": "deepseek-v3", "hardware": {"gpu": "b200", "gpus_per_node": 8, "nodes": 8},
        "deployment": {
            "gpu_memory_utilization": 0.8, "tensor_parallel": 1, "attention_data_parallel": 64,
            "expert_parallel": 8, "precision": {"weights": "nvfp4", "activations": "nvfp4",
                                                "kv_cache": "fp8"},
            "engine": "trtllm", "engine_version": "1.2.0rc6.post2",
            "scheduler": {"max_num_seqs": 2, "max_num_batched_tokens": 2528,
                          "chunked_prefill": False, "block_size": 32}},
        "workload": {"arrival": {"kind": "closed_loop", "concurrency": 128},
                     "input_tokens": {"kind": "fixed", "value": 1024},
                     "output_tokens": {"kind": "fixed", "value": 1024},
                     "num_requests": 128, "seed": 0},
    }
    measured_ms = 21.33
    est_ms = simulator.estimate(scenario).tpot_p50_s * 1e3
    assert est_ms == pytest.approx(measured_ms, rel=0.5)
