"""How routed tokens spread over the experts and over the GPUs that hold them (EP ranks).

A load profile gives each expert's share of all token-expert pairs. The busiest EP rank sets the
MoE time of a step (every rank waits for it at the combine all-to-all), so what the cost model
needs is that rank's expert slots and their shares. Uniform routing is the default: routers are
trained to balance (DeepSeek-V3's auxiliary-loss-free bias, Switch/GShard auxiliary losses),
and no published per-expert profile is general enough to be a default; give a Zipf exponent or a
measured profile to see skew. EPLB-style redundant experts copy the hottest experts and place
slots so the ranks' loads even out (DeepSeek's EPLB: replicate heavy experts, then pack).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt

PLACEMENT_SEED = 0  # which experts are popular is unrelated to their ids: a fixed shuffle


def uniform_loads(num_experts: int) -> list[float]:
    return [1.0 / num_experts] * num_experts


def zipf_loads(num_experts: int, s: float) -> list[float]:
    """Shares proportional to 1 / rank^s (s = 0 is uniform), shuffled over the expert ids."""
    raw = [1.0 / (i + 1) ** s for i in range(num_experts)]
    random.Random(PLACEMENT_SEED).shuffle(raw)
    total = sum(raw)
    return [x / total for x in raw]


def normalized(loads: Sequence[float]) -> list[float]:
    """A measured profile (counts or shares, one per expert) as shares that sum to 1."""
    total = float(sum(loads))
    if total <= 0 or any(x < 0 for x in loads):
        raise ValueError("an expert load profile needs non-negative loads with a positive sum")
    return [x / total for x in loads]


def hottest_rank_slots(
    loads: Sequence[float], ep: int, redundant_experts: int = 0
) -> tuple[float, ...]:
    """Shares of all token-expert pairs served by each expert slot of the busiest EP rank.

    Without redundant experts, expert e sits on rank e // (E / ep) (contiguous, as vLLM and
    SGLang place them). With R redundant slots the R copies go one at a time to the expert with
    the largest load per copy, copies split their expert's tokens evenly, and the E + R slots are
    packed heaviest-first onto the least loaded rank with room ((E + R) / ep slots each).
    """
    n = len(loads)
    if ep < 1 or n % ep:
        raise ValueError(f"expert_parallel {ep} does not divide {n} experts")
    if redundant_experts == 0:
        per = n // ep
        ranks = [list(loads[r * per : (r + 1) * per]) for r in range(ep)]
        return tuple(max(ranks, key=sum))
    if redundant_experts % ep:
        raise ValueError(
            f"redundant_experts {redundant_experts} must be a multiple of expert_parallel {ep} "
            f"so every rank holds the same number of expert slots"
        )
    copies = [1] * n
    heap = [(-x, e) for e, x in enumerate(loads)]
    heapq.heapify(heap)
    for _ in range(redundant_experts):
        _, e = heapq.heappop(heap)
        copies[e] += 1
        heapq.heappush(heap, (-loads[e] / copies[e], e))
    slots = sorted(
        (loads[e] / copies[e] for e in range(n) for _ in range(copies[e])), reverse=True
    )
    per = (n + redundant_experts) // ep
    bins: list[list[float]] = [[] for _ in range(ep)]
    sums = [0.0] * ep
    for share in slots:
        r = min((i for i in range(ep) if len(bins[i]) < per), key=lambda i: (sums[i], i))
        bins[r].append(share)
        sums[r] += share
    return tuple(bins[max(range(ep), key=lambda i: sums[i])])


def hot_factor(slots: Sequence[float], ep: int) -> float:
    """Busiest rank's load over the mean rank's load (1.0 when perfectly balanced)."""
    return sum(slots) * ep


def rank_slots(num_experts: int, ep: int, expert_slots: tuple[float, ...] | None
               ) -> tuple[float, ...]:
    """The shares of all token-expert pairs one EP rank's slots serve: the busiest rank's of
    a skewed profile (`expert_slots`), else any rank's E/ep slots of 1/E each."""
    if expert_slots is not None:
        return expert_slots
    return (1.0 / num_experts,) * (num_experts // ep)


def _expected_max(pmf: Sequence[float] | npt.NDArray[np.float64], start: int,
                  copies: int) -> float:
    """E[max] of `copies` independent counts whose pmf over start, start + 1, ... is `pmf`:
    the sum over m of P(max > m) = 1 - F(m)^copies."""
    # below `start` every term is 1 - 0 = 1
    cdf = np.minimum(np.cumsum(np.asarray(pmf, dtype=np.float64)[:-1]), 1.0)
    return float(start + np.sum(1.0 - cdf ** copies))


# busiest_rank's own misses still repeat counts (the same token-expert pairs beside other
# slots): 1,227 of the 6,074 calls of the calibration file's estimate.
@lru_cache(maxsize=8192)
def expected_max_binomial(n: int, p: float, copies: int) -> float:
    """E[max] of `copies` independent Binomial(n, p) counts, over a window of 12 standard
    deviations around the mean (the mass outside it is below 1e-30)."""
    if copies <= 1 or p <= 0.0 or p >= 1.0 or n <= 0:
        return n * min(max(p, 0.0), 1.0)
    mean, sd = n * p, math.sqrt(n * p * (1.0 - p))
    lo, hi = max(0, math.floor(mean - 12 * sd)), min(n, math.ceil(mean + 12 * sd))
    log_p, log_q, log_n = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    # log pmf at lo, then each next term by the ratio pmf(m + 1) / pmf(m) = (n - m) p /
    # ((m + 1) q), summed in numpy (scipy.special would load numpy.ma on every start).
    first = log_n - math.lgamma(lo + 1) - math.lgamma(n - lo + 1) + lo * log_p + (n - lo) * log_q
    m = np.arange(lo, hi, dtype=np.float64)
    steps = np.log((n - m) / (m + 1)) + (log_p - log_q)
    pmf = np.exp(first + np.concatenate(([0.0], np.cumsum(steps))))
    return _expected_max(pmf, lo, copies)


def expected_max_hits(hit_probabilities: Sequence[float], copies: int) -> float:
    """E[max] of `copies` independent counts of hit slots, slot i hit with its own
    probability (a Poisson-binomial count, its pmf built one slot at a time)."""
    if copies <= 1:
        return float(sum(hit_probabilities))
    pmf = [1.0]
    for p in hit_probabilities:
        nxt = [0.0] * (len(pmf) + 1)
        for m, q in enumerate(pmf):
            nxt[m] += q * (1.0 - p)
            nxt[m + 1] += q * p
        pmf = nxt
    return _expected_max(pmf, 0, copies)


@lru_cache(maxsize=4096)
def busiest_rank(slots: tuple[float, ...], ep: int, experts_per_token: int, tokens: int
                 ) -> tuple[float, float]:
    """(expert slots hit, token-expert pairs) on the busiest of `ep` ranks in one step.

    `slots` are the shares of all token-expert pairs that one rank's expert slots serve: the
    busiest rank's under skewed routing, any rank's (E/ep slots of 1/E) under uniform routing.
    Routing balances the ranks only on average: a step's T tokens draw their k experts at
    random, so a rank's count of hit slots (slot i hit with 1 - (1 - k x_i)^T) and of routed
    pairs (Binomial(T k, sum x)) scatter, and every rank waits for the largest at the combine.
    The busiest rank is taken as the largest of `ep` independent draws of this rank's counts
    (exact for uniform routing up to the slight correlation of a token's k distinct picks; an
    upper bound under skew, where the other ranks are lighter). At decode batches the spread
    is large: 16 tokens of DeepSeek-V3 (k 8 of E 256) over 8 ranks hit 12.7 experts a rank on
    average but 16.7 on the busiest. Nothing here is fitted.
    """
    hits = [1.0 - (1.0 - min(1.0, experts_per_token * x)) ** tokens for x in slots]
    share = min(1.0, sum(slots))
    pairs = tokens * experts_per_token
    if ep <= 1:
        return float(sum(hits)), pairs * share
    if len(set(slots)) == 1:  # identical slots: a plain binomial count
        hit = expected_max_binomial(len(slots), hits[0], ep)
    else:
        hit = expected_max_hits(hits, ep)
    return hit, expected_max_binomial(pairs, share, ep)
