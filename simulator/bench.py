"""Speed benchmarks of the simulator itself (printed figures, never timed tests)."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Iterator

from simulator.architecture import load_architecture
from simulator.cost import BatchShape, Formats, ParallelLayout, StepModel, prefill_pairs
from simulator.hardware import load_hardware

BENCH_SCENARIO = {
    "name": "bench: llama-3.1-8b on one h100, 20 req/s, 1000 in / 250 out",
    "model": "llama-3.1-8b",
    "hardware": {"gpu": "h100-sxm"},
    "workload": {
        "arrival": {"kind": "poisson", "rate_per_s": 20.0},
        "input_tokens": {"kind": "fixed", "value": 1000},
        "output_tokens": {"kind": "fixed", "value": 250},
        "num_requests": 10_000,
        "seed": 0,
    },
}


def _random_batches(n: int, seed: int = 0) -> list[BatchShape]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        dec = rng.randint(0, 256)
        chunk = rng.choice([0, 0, 0, rng.randint(1, 2048)])
        out.append(
            BatchShape(
                prefill_tokens=chunk,
                prefill_seqs=1 if chunk else 0,
                prefill_attention_pairs=prefill_pairs(chunk, 0),
                prefill_sampled_seqs=1 if chunk else 0,
                decode_seqs=dec,
                decode_context_tokens=dec * rng.randint(100, 4000),
            )
        )
    return out


def run_bench(num_requests: int, repeat: int, step_evals: int) -> Iterator[str]:
    import simulator

    model = StepModel(
        load_architecture("llama-3.1-8b"), load_hardware("h100-sxm"), ParallelLayout(), Formats()
    )
    batches = _random_batches(step_evals)
    rates = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for b in batches:
            model.time_s(b)
        rates.append(step_evals / (time.perf_counter() - t0))
    yield (
        f"step cost: {statistics.median(rates):,.0f} evaluations/s (median of {repeat}; "
        f"random decode batches 0-256 with occasional prefill chunks; target >= 100,000)"
    )
    scenario = dict(BENCH_SCENARIO)
    scenario["workload"] = dict(BENCH_SCENARIO["workload"], num_requests=num_requests)  # type: ignore[arg-type]
    loaded = simulator.load_scenario(scenario)
    walls, sims = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = simulator.simulate(loaded)
        walls.append(time.perf_counter() - t0)
        sims.append(r.summary["duration_s"])
    wall = statistics.median(walls)
    yield (
        f"serving: {num_requests:,} requests in {wall:.2f} s wall (median of {repeat}), "
        f"{num_requests / wall:,.0f} requests/s, {statistics.median(sims) / wall:,.0f} simulated "
        f"seconds per wall second"
    )
