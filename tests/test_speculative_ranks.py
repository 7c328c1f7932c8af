"""Speculative decoding on attention-DP ranks: each rank drafts and verifies its own sequences,
the MoE layers take every rank's verified tokens (cost/spec_ranks.py), and the simulation runs
DeepSeek-R1 as practitioners serve it (attention-DP 8 + EP 8 + MTP)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.api import estimate, simulate
from simulator.cost import operators
from simulator.cost.draft import SpeculativeStepModel
from simulator.cost.ranks import ranked_step
from simulator.cost.shape import BatchShape
from simulator.cost.spec_ranks import ranked_speculative_step
from simulator.inputs.scenario import Scenario
from simulator.serving.engine_build import build_engine
from simulator.serving.speculative import SpecDecoding

FP8 = {"weights": "fp8", "activations": "fp8", "kv_cache": "fp8"}
TAU_R1_K1 = 1.9064  # mtp-deepseek-r1-trtllm: 1 + a_1 at k = 1 (speculative_presets.csv)


def r1(dp: int, ep: int, tp: int, spec: dict[str, Any] | None, concurrency: int = 8,
       n: int = 32, out: int = 200) -> dict[str, Any]:
    dep: dict[str, Any] = {
        "tensor_parallel": tp, "attention_data_parallel": dp, "expert_parallel": ep,
        "precision": FP8, "engine": "sglang",
        "scheduler": {"max_num_seqs": 64, "max_num_batched_tokens": 8192},
    }
    if spec is not None:
        dep["speculative"] = spec
    return {
        "schema_version": 1, "name": "r1 adp mtp", "model": "deepseek-r1",
        "hardware": {"gpu": "h200-sxm", "gpus_per_node": 8, "nodes": 1},
        "deployment": dep,
        "workload": {
            "kind": "math",
            "arrival": {"kind": "closed_loop", "concurrency": concurrency},
            "input_tokens": {"kind": "fixed", "value": 512},
            "output_tokens": {"kind": "fixed", "value": out},
            "num_requests": n, "seed": 1,
        },
    }


MTP1 = {"method": "mtp", "num_speculative_tokens": 1, "preset": "mtp-deepseek-r1-trtllm"}


def spec_model(dp: int = 8, ep: int = 8, tp: int = 1) -> SpeculativeStepModel:
    engine = build_engine(Scenario.model_validate(r1(dp, ep, tp, MTP1)))
    assert engine.speculative is not None
    return engine.speculative.model


# ---- the step's arithmetic, derived by hand from the cost layer's operators ---------------


def _sum(ops: list[Any]) -> float:
    return sum(o.time_s for o in ops)


def test_ranked_mtp_step_is_per_rank_draft_and_attention_plus_moe_over_all_verified() -> None:
    model = spec_model()
    target, drafter = model.target, model.drafter
    assert drafter is not None
    k = 1
    decoders = [3, 1, 0, 2, 5, 0, 1, 4]  # two ranks idle: they still join the MoE
    ctx = [1500 * n + 37 * n for n in decoders]
    batches = [BatchShape(decode_seqs=n, decode_context_tokens=c,
                          speculative_tokens_per_seq=k if n else 0)
               for n, c in zip(decoders, ctx, strict=True)]
    # Verify: each rank's (k + 1) positions per decoder through its own projections,
    # attention over its own contexts and its LM head; then every GPU together runs the
    # MoE (and gathers) over the sum of all ranks' verified tokens, padded to the busiest.
    verified = [n * (k + 1) for n in decoders]
    total, busiest = sum(verified), max(verified)
    consts = operators.attention_consts(target)
    local = [
        _sum(operators.rank_ops(target, t, total)) + _sum(operators.head_ops(target, t))
        + _sum(operators.attention_ops(target, consts, b, 1))
        if t else 0.0
        for t, b in zip(verified, batches, strict=True)
    ]
    verify = max(local) + _sum(operators.group_ops(target, total, busiest))
    assert total == 32  # 16 decoding sequences x (k + 1)
    # Draft (k = 1: one pass): each rank's eh_proj on its decoders, then the MTP layer's pass
    # on one token per decoder, its attention per rank, its MoE over every rank's drafts.
    h = drafter.arch.hidden_size
    fuse = max(drafter.gemm("mtp_eh_proj", n, h, 2 * h, k, bf16=True).time_s if n else 0.0
               for n in decoders)
    dconsts = operators.attention_consts(drafter)
    dlocal = [
        _sum(operators.rank_ops(drafter, n, sum(decoders))) + _sum(operators.head_ops(drafter, n))
        + _sum(operators.attention_ops(
            drafter, dconsts, BatchShape(decode_seqs=n, decode_context_tokens=c), 1))
        if n else 0.0
        for n, c in zip(decoders, ctx, strict=True)
    ]
    draft = fuse + max(dlocal) + _sum(operators.group_ops(drafter, sum(decoders), max(decoders)))
    got = ranked_speculative_step(model, batches)
    assert got.draft_s == pytest.approx(draft, rel=1e-12)
    assert got.step.time_s == pytest.approx(verify + draft, rel=1e-12)
    # The MoE is not costed per rank: splitting the same verified tokens over the ranks
    # differently leaves the shared part alone and moves only the slowest rank.
    even = [BatchShape(decode_seqs=2, decode_context_tokens=3074, speculative_tokens_per_seq=k)
            ] * 8
    assert ranked_speculative_step(model, even).step.time_s < got.step.time_s


def test_one_rank_is_the_plain_speculative_step() -> None:
    """With one attention-DP rank the lockstep cost is the plain speculative step's."""
    model = spec_model(dp=1, ep=8, tp=8)
    for n in (1, 7, 64):
        b = BatchShape(decode_seqs=n, decode_context_tokens=900 * n, speculative_tokens_per_seq=1)
        got = ranked_speculative_step(model, [b])
        assert got.step.time_s == pytest.approx(model.time_s(b), rel=1e-9)
        assert got.draft_s == pytest.approx(model.draft_s(b), rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 48), min_size=8, max_size=8).filter(any))
def test_drafting_is_never_free_and_verify_is_the_ranked_target_step(
    decoders: list[int],
) -> None:
    model = SPEC8
    batches = [BatchShape(decode_seqs=n, decode_context_tokens=700 * n,
                          speculative_tokens_per_seq=1 if n else 0) for n in decoders]
    got = ranked_speculative_step(model, batches)
    verify = ranked_step(model.target, batches)
    assert got.draft_s > 0
    assert got.step.time_s == pytest.approx(verify.time_s + got.draft_s, rel=1e-12)
    assert got.step.imbalance_s >= -1e-15


SPEC8 = spec_model()


# ---- the simulation ------------------------------------------------------------------------


def test_r1_attention_dp8_ep8_mtp_runs_and_emits_its_acceptance_per_step() -> None:
    plain = simulate(r1(8, 8, 1, None), check=True)
    mtp = simulate(r1(8, 8, 1, MTP1), check=True)
    assert mtp.summary["requests_completed"] == plain.summary["requests_completed"] == 32
    s = mtp.summary["speculative"]
    # Tokens per verify step: the acceptance length within sampling tolerance (each step
    # emits 1 or 2 tokens, 2 with probability a_1 = τ - 1).
    steps = sum(v["verify_steps"] for v in s["acceptance_by_kind"].values())
    sd = math.sqrt((TAU_R1_K1 - 1) * (2 - TAU_R1_K1) / steps)
    assert s["acceptance_length_expected"] == pytest.approx(TAU_R1_K1, abs=1e-9)
    assert s["acceptance_length_mean"] == pytest.approx(TAU_R1_K1, abs=5 * sd)
    assert 0 < s["draft_share_of_gpu_time"] < 0.2
    # More tokens per decode step than plain decode: fewer steps per request's output on
    # each rank's clock, and a lower TPOT at this low batch (one request per rank).
    def steps_taken(r: Any) -> int:
        return sum(len(c) for c in r.decode_end_s)

    assert steps_taken(plain) / steps_taken(mtp) == pytest.approx(TAU_R1_K1, rel=0.05)
    assert mtp.summary["tpot_s"]["mean"] < plain.summary["tpot_s"]["mean"]
    assert mtp.summary["output_tokens_per_s"] > plain.summary["output_tokens_per_s"]
    assert "attention_dp_imbalance_share" in mtp.summary
    # Every request's every verify step emitted 1 to k + 1 tokens, and all its outputs.
    for i, emitted in mtp.spec_emitted.items():
        assert emitted.min() >= 1 and emitted.max() <= 2
        assert int(emitted.sum()) == 200 - 1  # the first token came from the prefill
        assert i in range(32)


def test_speculating_ranks_each_hold_their_share_of_the_kv_pool() -> None:
    """The drafter's KV shrinks the pool, and every rank holds 1/D of what is left."""
    plain = build_engine(Scenario.model_validate(r1(8, 8, 1, None)))
    mtp = build_engine(Scenario.model_validate(r1(8, 8, 1, MTP1)))
    assert mtp.speculative is not None
    bs = mtp.scheduler.block_size
    assert mtp.scheduler.num_blocks == mtp.speculative.kv_capacity_tokens // 8 // bs
    assert mtp.scheduler.num_blocks < plain.scheduler.num_blocks


def test_estimate_of_r1_adp_mtp_says_so_and_tracks_the_simulation() -> None:
    sc = r1(8, 8, 1, MTP1, concurrency=8, n=32)
    est = estimate(sc)
    assert any("each rank drafts and verifies its own" in n for n in est.notes)
    sim = simulate(sc)
    tpot = sim.summary["tpot_s"]["mean"]
    assert est.tpot_p50_s == pytest.approx(tpot, rel=0.35)


def test_pipeline_microbatches_with_speculation_are_refused_in_one_line() -> None:
    sc = r1(1, 4, 4, MTP1)
    sc["deployment"]["pipeline_parallel"] = 2
    with pytest.raises(ValueError, match=r"deployment.speculative: .*pipeline_parallel 2"):
        build_engine(Scenario.model_validate(sc))


def test_mixed_idle_and_speculating_ranks_cost_the_idle_ranks_nothing_of_their_own() -> None:
    model = SPEC8
    one = BatchShape(decode_seqs=4, decode_context_tokens=4000, speculative_tokens_per_seq=1)
    alone = ranked_speculative_step(model, [one] + [BatchShape()] * 7)
    assert alone.step.mean_rank_s == pytest.approx(alone.step.slowest_rank_s / 8, rel=1e-12)
    assert np.isfinite(alone.step.time_s)


@settings(max_examples=60, deadline=None)
@given(
    rates=st.lists(st.floats(0.0, 0.99), min_size=1, max_size=6),
    remaining=st.integers(1, 3000),
    request=st.integers(0, 10_000),
)
def test_a_verify_step_never_emits_more_than_k_plus_one(
    rates: list[float], remaining: int, request: int
) -> None:
    spec = SpecDecoding(len(rates), tuple(rates), seed=3)
    e = spec.draw(request, 0, remaining, True)
    assert e.min() >= 1 and e.max() <= len(rates) + 1
    assert int(e.sum()) == remaining
