"""The busiest EP rank under random routing (cost/moe_routing.py busiest_rank): hand cases of
the order statistic, and a seeded Monte Carlo of real top-k routing it must match."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.cost.moe_routing import (
    busiest_rank,
    expected_max_binomial,
    expected_max_hits,
)


def test_expected_max_hand_cases() -> None:
    # Binomial(2, 1/4): P(0) = 9/16, P(1) = 6/16, P(2) = 1/16. Max of two:
    # E = (1 - F(0)^2) + (1 - F(1)^2) = (1 - (9/16)^2) + (1 - (15/16)^2) = 0.68359 + 0.12109
    assert expected_max_binomial(2, 0.25, 2) == pytest.approx(0.68359375 + 0.12109375)
    # One copy is the mean; the Poisson-binomial form agrees with the binomial one.
    assert expected_max_binomial(64, 0.1, 1) == pytest.approx(6.4)
    assert expected_max_hits([0.25, 0.25], 2) == pytest.approx(0.8046875)
    # Slots hit with certainty give exactly their count, whatever the copies.
    assert expected_max_hits([1.0, 1.0, 1.0], 8) == pytest.approx(3.0)


def test_one_rank_is_the_mean_and_large_batches_balance() -> None:
    uniform8 = (1 / 256,) * 32
    # EP 1: no scatter, the mean counts (32 slots hit with 1 - (1 - 8/256)^16; 16 x 8 pairs).
    hit, pairs = busiest_rank(uniform8, 1, 8, 16)
    assert hit == pytest.approx(32 * (1 - (1 - 8 / 256) ** 16))
    assert pairs == pytest.approx(16 * 8 / 8)
    # A prefill of 8192 tokens: every expert hit, pairs within 1.5 % of the mean 8192.
    hit, pairs = busiest_rank(uniform8, 8, 8, 8192)
    assert hit == pytest.approx(32.0)
    assert 8192 < pairs < 8192 * 1.015


def _monte_carlo(experts: int, ep: int, k: int, tokens: int, trials: int) -> tuple[float, float]:
    """Mean over seeded trials of the busiest rank's hit experts and routed pairs, each token
    picking k distinct experts uniformly, experts placed contiguously on the ranks."""
    rng = np.random.default_rng(0)
    rank = np.arange(experts) // (experts // ep)
    hits, pairs = [], []
    for _ in range(trials):
        picks = np.argsort(rng.random((tokens, experts)), axis=1)[:, :k]
        count = np.bincount(picks.ravel(), minlength=experts)
        hits.append(np.bincount(rank, weights=count > 0, minlength=ep).max())
        pairs.append(np.bincount(rank, weights=count, minlength=ep).max())
    return float(np.mean(hits)), float(np.mean(pairs))


@pytest.mark.parametrize(
    ("experts", "ep", "k", "tokens"),
    [(256, 8, 8, 1), (256, 8, 8, 16), (256, 8, 8, 64), (128, 4, 8, 16), (160, 8, 6, 16)],
)
def test_matches_sampled_top_k_routing(experts: int, ep: int, k: int, tokens: int) -> None:
    # DeepSeek-V3 (256 experts, top 8), Qwen3-235B (128, top 8), GLM-4.5-like (160, top 6).
    # Independence across a rank's slots and across ranks is an approximation: on 1,500
    # trials the hit count agrees within 1 % and the routed pairs within 5 % (a token's k
    # picks are distinct, which the binomial pairs count ignores, so it reads a little low).
    model_hit, model_pairs = busiest_rank((1 / experts,) * (experts // ep), ep, k, tokens)
    mc_hit, mc_pairs = _monte_carlo(experts, ep, k, tokens, 1500)
    assert model_hit == pytest.approx(mc_hit, rel=0.01)
    assert model_pairs == pytest.approx(mc_pairs, rel=0.05)
    # And the scatter is real: the busiest rank is above the mean rank.
    assert model_hit > (experts // ep) * (1 - (1 - k / experts) ** tokens)
    assert model_pairs > tokens * k / ep


def test_decode_reads_the_busiest_ranks_experts() -> None:
    # 16 decode tokens of DeepSeek-V3 over EP 8: a GPU holds 32 experts, each hit with
    # p = 1 - (1 - 8/256)^16 = 0.398 (12.7 on average); the busiest of 8 GPUs hits
    # E[max of 8 Binomial(32, 0.398)] = 16.7, rounded to 17 grouped GEMMs.
    p = 1 - (1 - 8 / 256) ** 16
    assert 32 * p == pytest.approx(12.745, abs=1e-3)
    cdf = np.cumsum([math.comb(32, m) * p**m * (1 - p) ** (32 - m) for m in range(33)])
    by_hand = float(np.sum(1 - cdf[:-1] ** 8))
    assert busiest_rank((1 / 256,) * 32, 8, 8, 16)[0] == pytest.approx(by_hand, rel=1e-9)
    assert round(by_hand) == 17


def test_explain_names_the_busiest_gpu() -> None:
    from simulator.cost.explain import explain
    from simulator.cost.layout import Formats, ParallelLayout

    fp8 = Formats("fp8", "fp8", "fp8")
    e = explain("deepseek-r1", "b200", ParallelLayout(8, 1, 1, 8), fp8, decode_batch=16,
                context=2048)
    spread = e.expert_spread()
    assert spread is not None
    # The hand case above: 16.7 of 32 experts on the busiest GPU, 12.7 on the mean one; the
    # 16 x 8 = 128 pairs are 16 a GPU on average.
    assert spread["busiest_experts_hit"] == pytest.approx(16.71, abs=0.01)
    assert spread["mean_experts_hit"] == pytest.approx(12.745, abs=1e-3)
    assert spread["mean_pairs"] == pytest.approx(16.0)
    assert "the busiest GPU sets the MoE time, 16.7 of its 32 experts" in e.to_text()
    assert e.to_dict()["expert_spread"] == spread
    # Without EP every GPU holds a slice of every expert: no spread to name.
    tp_only = explain("deepseek-r1", "b200", ParallelLayout(8, 1, 1, 1), fp8, decode_batch=16,
                      context=2048)
    assert tp_only.expert_spread() is None and "busiest GPU" not in tp_only.to_text()
