"""Runs of pure decode steps (serving/decode_runs.py, Replica._decode_run) are an
optimization only: costed in one vectorized pass and committed as one SimPy event, they must
give exactly the floats, records and event order of stepping one by one (what `--check` and
`--timeseries` do). Each case compares both bit for bit, and checks that runs did happen."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.fast_forward_helpers import assert_runs_match_stepwise


def _scenario(**over: Any) -> dict[str, Any]:
    dep = over.pop("deployment", {})
    work = {
        "arrival": {"kind": "poisson", "rate_per_s": 1.5},
        "input_tokens": {"kind": "uniform", "min": 50, "max": 3000},
        "output_tokens": {"kind": "uniform", "min": 20, "max": 600},
        "num_requests": 150,
        "seed": 3,
    }
    work.update(over.pop("workload", {}))
    return {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus_per_node": 8},
            "deployment": {"scheduler": {"max_num_seqs": 32}, **dep}, "workload": work, **over}


CASES = {
    "vllm chunked": _scenario(),
    "vllm chunked prefill off": _scenario(deployment={"scheduler": {"chunked_prefill": False}}),
    "sglang, prefill-only steps": _scenario(deployment={"engine": "sglang"}),
    "sglang polling every 4 steps": _scenario(
        deployment={"engine": "sglang", "scheduler": {"recv_interval_steps": 4}}),
    "trtllm": _scenario(deployment={"engine": "trtllm"}),
    # Llama-3.1-8B's 32 layers x 0.46 ms = 14.7 ms dispatch floor holds every H100 step.
    "vllm-0.2, dispatch floor": _scenario(deployment={"engine": "vllm-0.2"}),
    # Two replicas routed by their outstanding tokens: the router reads a replica's state
    # at each arrival, so it must see what it would see step by step.
    "two replicas, least work": _scenario(
        deployment={"replicas": 2, "router": "shortest_expected_latency"},
        workload={"arrival": {"kind": "poisson", "rate_per_s": 6.0}}),
    # A small KV cache: runs stop before the decode set runs out of blocks, preemptions follow.
    "preemption": _scenario(
        deployment={"gpu_memory_utilization": 0.25, "scheduler": {"max_num_seqs": 256}},
        workload={"arrival": {"kind": "poisson", "rate_per_s": 20.0},
                  "output_tokens": {"kind": "uniform", "min": 500, "max": 2000}}),
    # Saturated: requests wait while every seat is taken (runs go on between finishes),
    # and with chunked prefill off while the waiting prompt does not fit the free blocks.
    "seats full": _scenario(
        deployment={"scheduler": {"max_num_seqs": 8}},
        workload={"arrival": {"kind": "poisson", "rate_per_s": 20.0}}),
    "kv full, whole prompts": _scenario(
        deployment={"gpu_memory_utilization": 0.25,
                    "scheduler": {"max_num_seqs": 256, "chunked_prefill": False}},
        workload={"arrival": {"kind": "poisson", "rate_per_s": 20.0},
                  "output_tokens": {"kind": "uniform", "min": 500, "max": 2000}}),
    "sglang kv full": _scenario(
        deployment={"engine": "sglang", "gpu_memory_utilization": 0.25,
                    "scheduler": {"max_num_seqs": 256}},
        workload={"arrival": {"kind": "poisson", "rate_per_s": 20.0},
                  "output_tokens": {"kind": "uniform", "min": 500, "max": 2000}}),
    # Everything arrives at once into a small KV pool: preemption and recompute.
    "offline, preemption": _scenario(
        deployment={"gpu_memory_utilization": 0.225, "scheduler": {"max_num_seqs": 64}},
        workload={"arrival": {"kind": "offline"}, "num_requests": 80,
                  "input_tokens": {"kind": "uniform", "min": 200, "max": 900},
                  "output_tokens": {"kind": "uniform", "min": 1, "max": 700}, "seed": 11}),
    "closed loop": _scenario(
        workload={"arrival": {"kind": "closed_loop", "concurrency": 6}}),
    # The time limit stops the run while a replica is between two steps.
    "time limit": _scenario(limits={"max_simulated_time_s": 30.0}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_decode_runs_are_exactly_the_step_by_step_run(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, stepwise = assert_runs_match_stepwise(CASES[case], monkeypatch, min_steps=100)
    assert len(fast.decode_end_s) == len(stepwise.decode_end_s)
    for a, b in zip(fast.decode_end_s, stepwise.decode_end_s, strict=True):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    assert fast.token_history == stepwise.token_history
