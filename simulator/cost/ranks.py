"""One step of an attention-data-parallel engine: D ranks, each with its own batch.

Every rank runs embedding, attention projections, attention and sampling on its own batch; then
all GPUs of the replica gather the tokens for the MLP/MoE (dispatch, experts, combine) and
scatter them back, layer by layer. The collectives make every layer wait for the slowest rank,
so the step takes max over ranks of the rank-local time plus the shared group time. With one
rank this is exactly `StepModel.time_s`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simulator.cost import operators
from simulator.cost.shape import BatchShape
from simulator.cost.step import StepModel


@dataclass(frozen=True, slots=True)
class RankedStep:
    """GPU time of one step, and the rank-local times behind it (for the imbalance share)."""

    time_s: float
    slowest_rank_s: float
    mean_rank_s: float

    @property
    def imbalance_s(self) -> float:
        """Time the other ranks wait, on average, for the slowest one."""
        return self.slowest_rank_s - self.mean_rank_s


def rank_time_s(model: StepModel, b: BatchShape, step_tokens: int) -> float:
    """Rank-local time of one rank's batch `b` (attention over its own contexts)."""
    if b.tokens <= 0:
        return 0.0
    key = (b.tokens, step_tokens, b.sampled_rows)
    cache = model._rank_cache
    t = cache.get(key)
    if t is None:
        ops = operators.rank_ops(model, b.tokens, step_tokens)
        ops += operators.head_ops(model, b.sampled_rows)
        t = cache[key] = sum(o.time_s for o in ops)
    return t + model._attention_time_s(b, 1)


def ranked_step(model: StepModel, batches: Sequence[BatchShape]) -> RankedStep:
    """Cost one step of len(batches) attention-DP ranks (an idle rank passes an empty batch:
    it still joins the MoE collectives, as SGLang's idle batches do)."""
    tokens = sum(b.tokens for b in batches)
    if tokens <= 0:
        return RankedStep(0.0, 0.0, 0.0)
    local = [rank_time_s(model, b, tokens) for b in batches]
    busiest = max(b.tokens for b in batches)
    shared = model._group_time_s(tokens, busiest)
    slowest = max(local)
    return RankedStep(slowest + shared, slowest, sum(local) / len(local))
