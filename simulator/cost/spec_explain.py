"""The teaching view of speculative decoding: one draft-and-verify step beside a plain one.

For a decode batch it shows what the drafter's passes and the target's verify pass cost, the
tokens a step emits on average (τ, bonus included), the time per emitted token against plain
decode, and the batch past which drafting stops paying on this chip (from the roofline).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.cost.draft import SpeculativeStepModel, make_drafter
from simulator.cost.shape import BatchShape
from simulator.cost.spec_ranks import crossover_batch
from simulator.cost.step import StepModel
from simulator.model.architecture import Architecture
from simulator.units import duration

CROSSOVER_SEARCH_MAX_BATCH = 4096  # decode batches searched for the crossover


@dataclass(frozen=True, slots=True)
class SpeculativeExplanation:
    method: str
    k: int
    acceptance_length: float
    decode_batch: int
    context_tokens: int
    draft_s: float
    verify_s: float
    plain_s: float
    crossover_batch: int | None  # None: pays up to CROSSOVER_SEARCH_MAX_BATCH

    @property
    def speedup(self) -> float:
        """Plain time per token over speculative time per token at this batch."""
        return self.plain_s * self.acceptance_length / (self.draft_s + self.verify_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "num_speculative_tokens": self.k,
            "acceptance_length": self.acceptance_length,
            "decode_batch": self.decode_batch,
            "draft_s": self.draft_s,
            "verify_s": self.verify_s,
            "plain_decode_s": self.plain_s,
            "emitted_tokens_per_step": self.acceptance_length,
            "speedup": self.speedup,
            "crossover_batch": self.crossover_batch,
            "crossover_search_max_batch": CROSSOVER_SEARCH_MAX_BATCH,
        }

    def to_text(self) -> str:
        step = self.draft_s + self.verify_s
        cross = (
            f"speculation stops paying past a decode batch of {self.crossover_batch - 1}"
            if self.crossover_batch is not None
            else f"speculation pays at every decode batch up to {CROSSOVER_SEARCH_MAX_BATCH}"
        )
        return (
            f"speculative {self.method}, k={self.k}, acceptance length {self.acceptance_length:g}"
            f" at {self.decode_batch} decode seqs × {self.context_tokens} context tokens:\n"
            f"draft {duration(self.draft_s)} + verify {duration(self.verify_s)} = "
            f"{duration(step)} per step emitting {self.acceptance_length:g} tokens per seq "
            f"({duration(step / self.acceptance_length)} per token) against plain decode "
            f"{duration(self.plain_s)} per token: speed-up {self.speedup:.2f}×; {cross} "
            f"(at {self.context_tokens} context tokens)"
        )


def explain_speculative(
    target: StepModel,
    method: str,
    k: int,
    acceptance_length: float,
    decode_batch: int,
    context_tokens: int,
    draft_arch: Architecture | None = None,
) -> SpeculativeExplanation:
    """Cost one speculative step of `decode_batch` sequences and find the crossover batch."""
    if not 1.0 <= acceptance_length <= k + 1:
        raise ValueError(
            f"--speculative: acceptance length {acceptance_length:g} must lie in "
            f"[1, k + 1] = [1, {k + 1}]"
        )
    n = max(decode_batch, 1)
    model = SpeculativeStepModel(target, method, make_drafter(method, target, draft_arch))
    spec = BatchShape(decode_seqs=n, decode_context_tokens=n * context_tokens,
                      speculative_tokens_per_seq=k)
    plain = BatchShape(decode_seqs=n, decode_context_tokens=n * context_tokens)
    cross = crossover_batch(model, k, acceptance_length, context_tokens,
                            CROSSOVER_SEARCH_MAX_BATCH, ranks=1)
    return SpeculativeExplanation(
        method, k, acceptance_length, n, context_tokens, model.draft_s(spec),
        model.verify_s(spec), target.time_s(plain), cross,
    )
