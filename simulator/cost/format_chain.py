"""What a number format buys, in words and in numbers: the FP4-without-FP4-tensor-cores
fallback (Hopper), and the KV-format chain -- bytes per cached token -> tokens the cache holds
-> the largest batch that fits -> decode throughput at that batch.

A smaller KV format does not make attention cheaper in FLOPs (serving kernels dequantize KV to
BF16 before the MMA); its effect is capacity: more sequences resident at once, so fewer
preemptions and less queueing under load, and a larger decode batch that amortizes the weight
stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.cost.memory import MemoryBudget
from simulator.cost.shape import BatchShape
from simulator.cost.step import StepModel
from simulator.model.precision import get_format


def format_notes(model: StepModel) -> list[str]:
    """Sentences on formats the chip cannot multiply natively (FP4 on Hopper, FP8 on Ampere):
    they still save memory and weight-streaming bytes, but compute at the wider format."""
    f, hw = model.formats, model.hw
    notes = []
    gemm = model.gemm_format
    for role, name in (("weights", f.weights), ("activations", f.activations)):
        kind = get_format(name).tensor_format
        if kind is None:
            notes.append(
                f"{name} {role} are weight-only: stored at {get_format(name).bits_per_element:g} "
                f"bits per element and dequantized, so GEMMs run at {gemm}."
            )
        elif kind not in hw.dense_flops_per_s:
            notes.append(
                f"{hw.name} has no {kind.upper()} tensor cores: {name} {role} are stored at "
                f"{get_format(name).bits_per_element:g} bits per element (saving memory; the "
                f"dequantizing kernels pay a fixed latency per launch, so small-batch decode "
                f"gains less than the bytes suggest) but are dequantized and multiplied "
                f"at {gemm}, so there is no {kind.upper()} compute speed-up."
            )
    return notes


@dataclass(frozen=True, slots=True)
class KVChain:
    """The KV-format chain at one context length (per engine replica)."""

    kv_format: str
    kv_bits_per_element: float  # element plus amortized scale bits
    kv_bytes_per_token_per_gpu: float
    kv_capacity_tokens: int
    context_tokens: int
    max_batch_that_fits: int  # sequences of `context_tokens` the cache holds at once
    step_time_s: float | None  # one decode step at that batch (None: nothing fits)
    output_tokens_per_s: float | None  # decode throughput at that batch

    def to_dict(self) -> dict[str, Any]:
        return {
            "kv_format": self.kv_format,
            "kv_bits_per_element": self.kv_bits_per_element,
            "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token_per_gpu,
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "context_tokens": self.context_tokens,
            "max_batch_that_fits": self.max_batch_that_fits,
            "step_time_s": self.step_time_s,
            "output_tokens_per_s": self.output_tokens_per_s,
        }

    def to_text(self) -> str:
        head = (
            f"KV {self.kv_format} ({self.kv_bits_per_element:.4g} bits/element): "
            f"{self.kv_bytes_per_token_per_gpu / 1e3:.1f} kB per token per GPU -> "
            f"{self.kv_capacity_tokens:,} tokens -> {self.max_batch_that_fits:,} sequences of "
            f"{self.context_tokens:,} tokens fit"
        )
        if self.step_time_s is None or self.output_tokens_per_s is None:
            return head + " -> no decode batch fits"
        return (f"{head} -> decode step {self.step_time_s * 1e3:.2f} ms at that batch -> "
                f"{self.output_tokens_per_s:,.0f} output tokens/s per replica")


def kv_chain(model: StepModel, memory: MemoryBudget, context_tokens: int,
             max_batch: int | None = None) -> KVChain:
    """Follow the chain for sequences of `context_tokens` (capped by `max_batch`, e.g. the
    scheduler's max_num_seqs, and for a hybrid model by the recurrent states set aside)."""
    fmt = get_format(model.formats.kv_cache)
    fits = memory.kv_capacity_tokens // max(1, context_tokens)
    if max_batch is not None:
        fits = min(fits, max_batch)
    if memory.state_bytes_per_seq_per_gpu > 0:
        states = memory.state_reserve_bytes_per_gpu // memory.state_bytes_per_seq_per_gpu
        fits = min(fits, int(states) * model.layout.attention_data_parallel)
    step_s = tps = None
    if fits > 0:
        batch = BatchShape.one_chunk(0, decode_seqs=fits,
                                     decode_context_tokens=fits * context_tokens)
        step_s = model.cost(batch).step_time_s
        tps = fits / step_s
    return KVChain(fmt.name, fmt.bits_per_element, memory.kv_bytes_per_token_per_gpu,
                   memory.kv_capacity_tokens, context_tokens, fits, step_s, tps)
