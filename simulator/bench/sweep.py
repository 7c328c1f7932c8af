"""Speed of a whole sweep: points simulated per second, end to end (expansion, worker
processes, durable store, compaction), without the HTML report."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from typing import Any

CONFIGS_PER_RATE = 40  # TP 4 ways × max_num_seqs 5 ways × 2 formats
RATE_RANGE = (5.0, 40.0)  # req/s: from light load to past the knee of the smaller configs


def bench_sweep_spec(points: int, num_requests: int) -> dict[str, Any]:
    """TP 1/2/4/8 × max_num_seqs 32..512 × BF16/FP8 × ceil(points / 40) Poisson rates.

    The cost of a point grows with its number of engine steps, so light loads (many small
    steps per request) cost more wall time than heavy ones; the rates span the range a
    capacity planner sweeps for this model (light load to overload).
    """
    n_rates = max(1, -(-points // CONFIGS_PER_RATE))
    lo, hi = RATE_RANGE
    rates = [round(lo + (hi - lo) * i / max(1, n_rates - 1), 3) for i in range(n_rates)]
    return {
        "name": "bench-sweep: llama-3.1-8b on h100",
        "model": "llama-3.1-8b",
        "hardware": {"gpu": "h100-sxm", "gpus_per_node": 8},
        "workload": {
            "arrival": {"kind": "poisson", "rate_per_s": 10.0},
            "input_tokens": {"kind": "fixed", "value": 1000},
            "output_tokens": {"kind": "fixed", "value": 250},
            "num_requests": num_requests,
            "seed": 0,
        },
        "sweep": {
            "deployment.tensor_parallel": [1, 2, 4, 8],
            "deployment.scheduler.max_num_seqs": [32, 64, 128, 256, 512],
            "workload.arrival.rate_per_s": rates,
            "zip": [{"deployment.precision.weights": ["bf16", "fp8"],
                     "deployment.precision.activations": ["bf16", "fp8"],
                     "deployment.precision.kv_cache": ["bf16", "fp8"]}],
        },
    }


def run_sweep_bench(points: int = 1000, num_requests: int = 1000,
                    workers: int = 2) -> Iterator[str]:
    """Run a sweep of about `points` points (a multiple of 40) on `workers` processes."""
    from simulator.bench.engine import machine
    from simulator.sweep.grid import load_sweep
    from simulator.sweep.pipeline import run_sweep

    spec = load_sweep(bench_sweep_spec(points, num_requests))
    yield (f"bench-sweep: {spec.grid_size:,} points × {num_requests:,} requests each "
           f"(llama-3.1-8b on H100: TP × max_num_seqs × format × Poisson rate 5-40 req/s, "
           f"1000 in / 250 out) on {workers} worker process(es); machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="frontier-bench-sweep-") as tmp:
        t0 = time.perf_counter()
        outcome = run_sweep(spec, tmp, workers=workers)
        wall = time.perf_counter() - t0
    yield (f"{outcome.ran:,} points in {wall:.1f} s wall: {outcome.ran / wall:.2f} points/s, "
           f"{outcome.ran * num_requests / wall:,.0f} requests/s; {outcome.ok} ok, "
           f"{sum(outcome.dropped.values())} dropped, {outcome.crashed} crashed "
           f"(target, issue 16: 1,000 points of 1,000 requests in <= 45 s on 2 workers)")
