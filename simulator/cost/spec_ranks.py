"""One speculative step of an attention-data-parallel engine, and where drafting stops paying.

Each attention-DP rank drafts and verifies its own sequences: the drafter's passes and the
target's verify pass run attention, projections and the LM head on that rank's batch only.
The MoE (and dense-MLP) layers join every rank each layer, so they see the tokens of all ranks
together: the verify pass's MoE runs over the sum of the ranks' verified tokens ((k + 1) per
decoding sequence, or the tree's size), and each draft pass's over the sum of that pass's
draft tokens, since the drafter (DeepSeek's MTP layer is an MoE layer) runs on the target's
layout in lockstep too (SGLang builds the EAGLE/MTP draft worker as a TpModelWorker over the
same server arguments, with the attention-TP group of DP attention:
python/sglang/srt/speculative/eagle_worker.py). Every sequential pass is therefore one
lockstep step: the slowest rank plus the shared group part (`cost/ranks.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simulator.cost.draft import SpeculativeStepModel
from simulator.cost.ranks import RankedStep, ranked_step
from simulator.cost.shape import BatchShape

IDLE = BatchShape()


@dataclass(frozen=True, slots=True)
class RankedSpecStep:
    """A speculative lockstep step: its total (`step`, with the rank-local times behind it)
    and the drafter's share of it."""

    step: RankedStep
    draft_s: float


def _fuse_s(model: SpeculativeStepModel, b: BatchShape) -> float:
    return sum(o.time_s for o in model.fuse_ops(b))


def _plus(a: RankedStep, b: RankedStep) -> RankedStep:
    return RankedStep(a.time_s + b.time_s, a.slowest_rank_s + b.slowest_rank_s,
                      a.mean_rank_s + b.mean_rank_s)


def ranked_draft_step(model: SpeculativeStepModel, batches: Sequence[BatchShape]) -> RankedStep:
    """The drafter's work of one step of len(batches) ranks: each rank's input projection on
    its own decoders (rank-local, the slowest rank sets it), then pass after pass, each a
    lockstep step of every rank's draft shape (a rank with nothing to draft joins idle)."""
    drafter = model.drafter
    if drafter is None:
        return RankedStep(0.0, 0.0, 0.0)
    fuse = [_fuse_s(model, b) for b in batches]
    total = 0.0
    for f in fuse:  # summed left to right, as ranks.py sums its means
        total += f
    out = RankedStep(max(fuse), max(fuse), total / len(fuse))
    shapes = [model.draft_shapes(b) for b in batches]
    for j in range(max(len(s) for s in shapes)):
        passes = [s[j] if j < len(s) else IDLE for s in shapes]
        out = _plus(out, ranked_step(drafter, passes))
    return out


def ranked_speculative_step(
    model: SpeculativeStepModel, batches: Sequence[BatchShape]
) -> RankedSpecStep:
    """Cost one speculative step of len(batches) attention-DP ranks: the drafter's passes, then
    the target's verify pass with every rank's verified tokens in the MoE."""
    verify = ranked_step(model.target, [model.verify_shape(b) for b in batches])
    draft = ranked_draft_step(model, batches)
    return RankedSpecStep(_plus(verify, draft), draft.time_s)


def even_ranks_time_s(model: SpeculativeStepModel, rank_batch: BatchShape, ranks: int) -> float:
    """GPU time of a step in which each of `ranks` ranks runs `rank_batch` (one rank: the
    model's own `time_s`, so a TP-only engine's figures are unchanged)."""
    if ranks == 1:
        return model.time_s(rank_batch)
    return ranked_speculative_step(model, [rank_batch] * ranks).step.time_s


def plain_even_ranks_time_s(model: SpeculativeStepModel, rank_batch: BatchShape,
                            ranks: int) -> float:
    """The target alone (no drafts) on the same even split: what speculation is judged
    against."""
    if ranks == 1:
        return model.target.time_s(rank_batch)
    return ranked_step(model.target, [rank_batch] * ranks).time_s


def crossover_batch(
    model: SpeculativeStepModel, k: int, acceptance_length: float, context_tokens: int,
    max_batch: int, ranks: int | None = None,
) -> int | None:
    """Smallest decode batch (per attention-DP rank, every rank alike) at which speculating
    costs more per emitted token than plain decode at a per-sequence context of
    `context_tokens`; None if it pays up to `max_batch`. `ranks` 1 reads the batch as the
    whole replica's, split evenly by the step model (what `frontier explain` shows); None
    takes the layout's ranks, as each rank's scheduler counts its own decoders.

    Per token: (verify(n, k) + draft(n, k)) / τ against decode(n). Both come from the
    roofline, so the crossover moves with the chip's ridge point, not with a constant.
    """
    if ranks is None:
        ranks = model.target.layout.attention_data_parallel

    def pays(n: int) -> bool:
        spec = BatchShape(decode_seqs=n, decode_context_tokens=n * context_tokens,
                          speculative_tokens_per_seq=k)
        plain = BatchShape(decode_seqs=n, decode_context_tokens=n * context_tokens)
        return (even_ranks_time_s(model, spec, ranks) / acceptance_length
                < plain_even_ranks_time_s(model, plain, ranks))

    if pays(max_batch):
        return None
    if not pays(1):
        return 1
    lo, hi = 1, max_batch  # pays(lo), not pays(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pays(mid):
            lo = mid
        else:
            hi = mid
    return hi
