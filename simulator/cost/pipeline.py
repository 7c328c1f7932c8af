"""One micro-batch through a pipeline of stages: each stage's time and each boundary's send.

Layers split as vLLM's `get_pp_indices` splits them: L // P per stage, the remainder one each
to the stages before the last (which also holds the LM head). A stage is charged its share of
the per-layer work of the step (`StepModel.time_s` less embedding, LM head and sends); the
first stage adds the embedding, the last the LM head and sampling. Summed, the stages and sends
are exactly `StepModel.time_s`: the latency of one micro-batch; the pipeline's throughput is
set by the slowest stage once micro-batches overlap (serving/pipelined_replica.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.cost.comm import pipeline_hop_times_s
from simulator.cost.shape import BatchShape
from simulator.cost.step import StepModel
from simulator.model.precision import BF16_BYTES


def stage_layers(num_layers: int, stages: int) -> list[int]:
    """Layers per stage: an even split, the remainder on the stages before the last."""
    split = [num_layers // stages] * stages
    for i in range(num_layers % stages):
        split[-2 - i if stages > 1 else 0] += 1
    return split


@dataclass(frozen=True, slots=True)
class StageTimes:
    stages_s: tuple[float, ...]  # GPU time of each stage for this micro-batch
    hops_s: tuple[float, ...]  # activation send across each stage boundary

    @property
    def latency_s(self) -> float:
        return sum(self.stages_s) + sum(self.hops_s)


def stage_times(model: StepModel, b: BatchShape) -> StageTimes:
    """Split one micro-batch's step time over the pipeline stages of `model`'s layout."""
    lay, a = model.layout, model.arch
    pp = lay.pipeline_parallel
    total = model.time_s(b)
    if pp == 1 or b.tokens <= 0:
        return StageTimes((total,), ())
    head = sum(o.time_s for o in model.head_ops(b.sampled_rows))
    rank_tokens = math.ceil(b.tokens / lay.attention_data_parallel)
    nbytes = rank_tokens * a.hidden_size * BF16_BYTES
    embed = model.elementwise("embedding", nbytes, 1).time_s
    keep = 1.0 - model.comm_overlap
    hops = tuple(t * keep for t in pipeline_hop_times_s(nbytes, pp, lay.gpus // pp, model.hw))
    body = max(0.0, total - head - embed - sum(hops))
    split = stage_layers(a.num_layers, pp)
    stages = [body * n / a.num_layers for n in split]
    stages[0] += embed
    stages[-1] += head
    return StageTimes(tuple(stages), hops)
