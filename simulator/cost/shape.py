"""What one engine step is asked to do (`BatchShape`) and what it cost (`StepCost`).

A batch is described by aggregates (token and sequence counts, summed contexts), so costing it
is O(1) however many requests it holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.cost.attention import prefill_pairs
from simulator.cost.ops import OpCost


@dataclass(frozen=True, slots=True)
class BatchShape:
    """One step's work per engine replica, as aggregates (O(1) to cost however large)."""

    prefill_tokens: int = 0  # new prompt tokens computed this step (all chunks)
    prefill_seqs: int = 0  # sequences with a prefill chunk this step
    prefill_attention_pairs: float = 0.0  # sum over chunks of c*p + c(c+1)/2
    prefill_context_tokens: int = 0  # sum over chunks of the cached prefix p they attend to
    prefill_sampled_seqs: int = 0  # chunks that finish their prompt and sample a token
    decode_seqs: int = 0
    decode_context_tokens: int = 0  # sum of cached tokens each decode attends to
    speculative_tokens_per_seq: int = 0  # draft tokens verified with each decode (later issue)

    @classmethod
    def one_chunk(
        cls,
        prefill_tokens: int = 0,
        offset_tokens: int = 0,
        decode_seqs: int = 0,
        decode_context_tokens: int = 0,
        completes_prompt: bool = True,
    ) -> BatchShape:
        """At most one prefill chunk of `prefill_tokens` after `offset_tokens` cached ones
        (sampling a token if it completes its prompt), alongside a decode batch."""
        chunk = prefill_tokens > 0
        return cls(
            prefill_tokens=prefill_tokens,
            prefill_seqs=int(chunk),
            prefill_attention_pairs=prefill_pairs(prefill_tokens, offset_tokens) if chunk else 0.0,
            prefill_context_tokens=offset_tokens if chunk else 0,
            prefill_sampled_seqs=int(chunk and completes_prompt),
            decode_seqs=decode_seqs,
            decode_context_tokens=decode_context_tokens,
        )

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decode_seqs * (1 + self.speculative_tokens_per_seq)

    @property
    def sampled_rows(self) -> int:
        return self.prefill_sampled_seqs + self.decode_seqs * (1 + self.speculative_tokens_per_seq)


@dataclass(frozen=True, slots=True)
class StepCost:
    step_time_s: float
    ops: tuple[OpCost, ...]
    compute_s: float
    memory_s: float
    communication_s: float
    overhead_s: float

    @classmethod
    def from_ops(cls, ops: list[OpCost]) -> StepCost:
        """The step of `ops`: each row's core time by its bound, launches as overhead."""
        compute = sum(o.core_s for o in ops if o.bound == "compute")
        memory = sum(o.core_s for o in ops if o.bound == "memory")
        comm = sum(o.time_s for o in ops if o.bound == "communication")
        overhead = sum(o.launch_s for o in ops)
        return cls(compute + memory + comm + overhead, tuple(ops), compute, memory, comm, overhead)

    @property
    def bound(self) -> str:
        kinds = {
            "compute": self.compute_s,
            "memory": self.memory_s,
            "communication": self.communication_s,
            "overhead": self.overhead_s,
        }
        return max(kinds, key=lambda k: kinds[k])
