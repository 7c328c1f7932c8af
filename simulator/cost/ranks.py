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

import numpy as np
import numpy.typing as npt

from simulator.cost import operators
from simulator.cost.shape import BatchShape
from simulator.cost.step import StepModel

FloatArray = npt.NDArray[np.float64]


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


def _rank_base_s(model: StepModel, tokens: int, step_tokens: int, rows: int) -> float:
    """Rank-local time of everything but attention (memoized: it depends only on counts)."""
    key = (tokens, step_tokens, rows)
    cache = model._rank_cache
    t = cache.get(key)
    if t is None:
        ops = operators.rank_ops(model, tokens, step_tokens)
        ops += operators.head_ops(model, rows)
        t = cache[key] = sum(o.time_s for o in ops)
    return t


def rank_time_s(model: StepModel, b: BatchShape, step_tokens: int) -> float:
    """Rank-local time of one rank's batch `b` (attention over its own contexts)."""
    if b.tokens <= 0:
        return 0.0
    return _rank_base_s(model, b.tokens, step_tokens, b.sampled_rows) + model._attention_time_s(
        b, 1
    )


def _mean(values: Sequence[float]) -> float:
    total = 0.0  # summed left to right, as ranked_decode_run sums its arrays
    for v in values:
        total += v
    return total / len(values)


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
    return RankedStep(slowest + shared, slowest, _mean(local))


@dataclass(frozen=True, slots=True)
class RankedRun:
    """`RankedStep` of each step of a run of pure decode steps, as arrays."""

    time_s: FloatArray
    slowest_rank_s: FloatArray
    mean_rank_s: FloatArray


def ranked_decode_run(
    model: StepModel, decoders: Sequence[int], kv_sums: Sequence[int], steps: int
) -> RankedRun:
    """ranked_step of `steps` consecutive pure decode steps, vectorized: rank j decodes
    decoders[j] sequences (0: idle) over kv_sums[j] + decoders[j] * k cached tokens at step k.
    The same operations in the same order as ranked_step step by step, so the floats agree."""
    tokens = sum(decoders)
    assert tokens > 0
    offsets = np.arange(steps, dtype=np.float64)
    zero = np.zeros(steps)
    local = [
        _rank_base_s(model, n, tokens, n) + model.decode_attention_s(n, kv + n * offsets, 1)
        if n > 0
        else zero
        for n, kv in zip(decoders, kv_sums, strict=True)
    ]
    shared = model._group_time_s(tokens, max(decoders))
    slowest: FloatArray = np.maximum.reduce(local)
    total = np.zeros(steps)
    for t in local:
        total = total + t
    return RankedRun(slowest + shared, slowest, total / len(local))
