"""The KV-format chain of a finished run: bytes per cached token -> tokens the cache holds ->
the most sequences of this workload's mean length that fit at once -> what load did to them
(preemptions, queueing, throughput). A smaller KV format shows here as a larger resident
batch and fewer preemptions at high load, not only as a shorter step."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from simulator.model.precision import get_format
from simulator.serving.engine_build import Engine


def kv_chain_summary(engine: Engine, records: npt.NDArray[Any], kv_capacity_tokens: int,
                     preemptions: int, summary: dict[str, Any]) -> dict[str, Any]:
    """The chain's numbers for one run (summary: the metrics already computed)."""
    fmt = get_format(engine.step_model.formats.kv_cache)
    lengths = (records["input_tokens"] + records["output_tokens"]).astype(np.float64)
    mean_len = float(lengths.mean()) if len(lengths) else 0.0
    sched = engine.scheduler
    fits = 0
    if mean_len > 0:
        # Paged cache: a sequence holds whole blocks, so round its length up to blocks.
        blocks_per_seq = math.ceil(mean_len / sched.block_size) + sched.state_blocks
        per_replica_blocks = kv_capacity_tokens // sched.block_size
        fits = per_replica_blocks // blocks_per_seq
    limit = "kv_cache" if fits < sched.max_num_seqs else "max_num_seqs"
    state_cap = engine.memory.max_seqs_by_state
    if limit == "max_num_seqs" and state_cap is not None and sched.max_num_seqs == state_cap:
        limit = "state_pool"  # a hybrid's recurrent-state slots (engine_build caps max_num_seqs)
    queue = summary.get("queue_s") or {}
    return {
        "kv_format": fmt.name,
        "kv_bits_per_element": fmt.bits_per_element,
        "kv_bytes_per_token_per_gpu": engine.memory.kv_bytes_per_token_per_gpu,
        "kv_capacity_tokens": kv_capacity_tokens,
        "mean_sequence_tokens": mean_len,
        "max_batch_that_fits": min(fits, sched.max_num_seqs),
        "batch_limited_by": limit,
        "preemptions": preemptions,
        "queue_s_p99": queue.get("p99"),
        "output_tokens_per_s": summary.get("output_tokens_per_s"),
    }
