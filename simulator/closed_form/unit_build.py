"""The scheduling units of a built engine, for the fluid model: one per replica, attention-DP
rank or pipeline slot, each with a step function over the same `StepModel` the simulation
costs its steps with (plus the engine style's host time)."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.closed_form.steady_state import Unit
from simulator.cost.attention import prefill_pairs
from simulator.cost.draft import SpeculativeStepModel
from simulator.cost.pipeline import stage_times
from simulator.cost.ranks import ranked_step
from simulator.cost.shape import BatchShape
from simulator.cost.step import StepModel
from simulator.engines.style import EngineStyle
from simulator.serving.ranks_setup import microbatch_slots
from simulator.serving.sched_types import SchedulerConfig


@dataclass(frozen=True)
class UnitStep:
    """A unit's step time: `ranks` attention-DP ranks stepping together (the batch given per
    rank, costed as the replica's even split) or one of `slots` pipeline micro-batch slots (a
    slot's step comes round once per max(its latency, slots × the slowest stage))."""

    model: StepModel | SpeculativeStepModel
    style: EngineStyle
    decode_context: float
    ranks: int = 1
    slots: int = 1
    verify_tokens: int = 0

    def __call__(self, decode: float, prefill: float, prefill_seqs: float,
                 offset: float) -> float:
        r = self.ranks
        b = self._shape(decode * r, prefill * r, prefill_seqs * r, _chunk(prefill, prefill_seqs),
                        offset)
        if self.slots > 1 and isinstance(self.model, StepModel):
            st = stage_times(self.model, b)
            gpu = max(st.latency_s, self.slots * max(st.stages_s))
        else:
            gpu = self.model.time_s(b)
        return self.style.step_time_s(gpu, b.decode_seqs + max(0, round(prefill_seqs * r)))

    def chunk_on_one_rank(self, decode: float, prefill: float, prefill_seqs: float,
                          offset: float) -> float:
        """A step in which one rank carries the prefill and every rank `decode` decoders:
        the ranks step together, so the step takes the prefilling rank's time and the
        shared MoE part on all the step's tokens (cost/ranks.py). With one rank, or a model
        the ranked costing does not cover, the step as __call__ costs it."""
        r = self.ranks
        if r == 1 or self.slots > 1 or not isinstance(self.model, StepModel):
            return self(decode, prefill, prefill_seqs, offset)
        busy = self._shape(decode, prefill, prefill_seqs, _chunk(prefill, prefill_seqs), offset)
        idle = self._shape(decode, 0.0, 0.0, 0.0, 0.0)
        gpu = ranked_step(self.model, [busy, *([idle] * (r - 1))]).time_s
        return self.style.step_time_s(gpu, round(decode * r) + max(0, round(prefill_seqs)))

    def _shape(self, decode: float, prefill: float, seqs: float, chunk: float,
               offset: float) -> BatchShape:
        """The batch of `decode` decoders and `prefill` prompt tokens in `seqs` chunks of
        `chunk` tokens each, `offset` tokens into their prompts."""
        n = round(decode)
        p = round(prefill)
        pairs = seqs * prefill_pairs(round(chunk), round(offset)) if p else 0.0
        return BatchShape(
            prefill_tokens=p,
            prefill_seqs=max(1, round(seqs)) if p else 0,
            prefill_attention_pairs=pairs,
            prefill_context_tokens=round(seqs * offset) if p else 0,
            prefill_sampled_seqs=max(1, round(seqs)) if p else 0,
            decode_seqs=n,
            decode_context_tokens=round(n * self.decode_context),
            speculative_tokens_per_seq=self.verify_tokens if n else 0,
        )


def _chunk(prefill: float, prefill_seqs: float) -> float:
    """Tokens per prompt chunk of a rank carrying `prefill` tokens in `prefill_seqs` chunks."""
    return prefill / prefill_seqs if prefill_seqs > 0 else 0.0


def make_unit(
    model: StepModel | SpeculativeStepModel,
    style: EngineStyle,
    cfg: SchedulerConfig,
    decode_context: float,
    *,
    tokens_per_step: float = 1.0,
    verify_tokens: int = 0,
    tree_tokens: int = 0,
    decodes_first_token: bool = False,
    prefills_only: bool = False,
    first_token_from_prefill: bool = False,
) -> tuple[Unit, int]:
    """The unit of one scheduler of this engine, and how many units one replica holds."""
    target = model.target if isinstance(model, SpeculativeStepModel) else model
    ranks = target.layout.attention_data_parallel
    slots = microbatch_slots(target.layout)
    step = UnitStep(model, style, decode_context, ranks, slots, verify_tokens)
    unit = Unit(
        step,
        cfg.max_num_seqs,
        cfg.max_num_batched_tokens,
        cfg.num_blocks * cfg.block_size,
        not cfg.separate_prefill,
        cfg.chunked_prefill,
        tokens_per_step,
        verify_tokens,
        cfg.reserve_full,
        cfg.block_size,
        decodes_first_token,
        prefills_only,
        ranks,
        # Pipeline micro-batch slots take requests at their own boundaries, without lookahead.
        (float(style.schedules_ahead) + (cfg.recv_interval_steps - 1) / 2) if slots == 1 else 0.0,
        tree_tokens,
        first_token_from_prefill,
        cfg.state_blocks * cfg.block_size,
        step.chunk_on_one_rank if ranks > 1 else None,
        cfg.max_prefill_tokens,
    )
    return unit, ranks * slots
