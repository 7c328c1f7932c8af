"""The one-step physics a lesson quotes: the step model of the lesson's own configuration."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simulator.cost import BatchShape, Formats, ParallelLayout, StepModel
from simulator.hardware.profile import Hardware, load_hardware
from simulator.model.load import load_architecture

MAX_BATCH = 4096


def step_model(spec: Mapping[str, Any], hw: Hardware | None = None,
               moe_kernel: str | None = None) -> StepModel:
    """StepModel of a sweep's base scenario (model, GPU, layout, formats), on `hw` if given
    (the GPU with another kernel's figures), with `moe_kernel` if given, else the scenario's."""
    dep = spec.get("deployment") or {}
    moe_kernel = moe_kernel or str(dep.get("moe_kernel", "fused"))
    prec = dep.get("precision") or {}
    return StepModel(
        load_architecture(str(spec["model"])),
        hw or load_hardware(str(spec["hardware"]["gpu"])),
        ParallelLayout(int(dep.get("tensor_parallel", 1)), int(dep.get("pipeline_parallel", 1)),
                       int(dep.get("attention_data_parallel", 1)),
                       int(dep.get("expert_parallel", 1)),
                       moe_all_to_all=dep.get("moe_dispatch") == "all_to_all"),
        Formats(prec.get("weights", "bf16"), prec.get("activations", "bf16"),
                prec.get("kv_cache", "bf16")),
        moe_unfused=moe_kernel == "unfused",
    )


def linear_bound_shares(model: StepModel, batch: int) -> tuple[float, float]:
    """(compute-bound, HBM-bound) seconds of the linear layers (every row but attention) of a
    decode step of `batch` sequences: attention reads each sequence's own KV, so it stays
    HBM-bound at any batch; the GEMMs share one weight read among the whole batch."""
    ops = [o for o in model.cost(BatchShape(decode_seqs=batch)).ops
           if not o.op.startswith("attention")]
    return (sum(o.core_s for o in ops if o.bound == "compute"),
            sum(o.core_s for o in ops if o.bound == "memory"))


def compute_crossover_batch(model: StepModel) -> int | None:
    """Smallest decode batch whose linear layers spend more time compute-bound than HBM-bound;
    None if none up to MAX_BATCH."""
    lo, hi = 1, 1
    while hi <= MAX_BATCH:
        compute_s, memory_s = linear_bound_shares(model, hi)
        if compute_s >= memory_s:
            while lo < hi:  # bisect inside the last doubling
                mid = (lo + hi) // 2
                c, m = linear_bound_shares(model, mid)
                lo, hi = (lo, mid) if c >= m else (mid + 1, hi)
            return hi
        lo, hi = hi + 1, hi * 2
    return None


def prefill_s(model: StepModel, prompt_tokens: int, chunk_tokens: int) -> float:
    """GPU time of one prompt's prefill alone, in chunks of `chunk_tokens` (each attending to
    the chunks before it)."""
    total, done = 0.0, 0
    while done < prompt_tokens:
        c = min(chunk_tokens, prompt_tokens - done)
        total += model.cost(BatchShape.one_chunk(c, done)).step_time_s
        done += c
    return total
