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
import random
from collections.abc import Sequence

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
