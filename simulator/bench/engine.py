"""Speed benchmarks of the simulator itself (printed figures, never timed tests)."""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from simulator.cost import BatchShape, Formats, ParallelLayout, StepModel
from simulator.hardware.profile import load_hardware
from simulator.model.load import load_architecture

BENCH_SCENARIO: dict[str, Any] = {
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
            BatchShape.one_chunk(
                chunk, decode_seqs=dec, decode_context_tokens=dec * rng.randint(100, 4000)
            )
        )
    return out


def machine() -> str:
    """The figures depend on the machine: name its core count and load beside them."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{os.cpu_count()} cores, 1-min load {load:.2f}"


# Start-up of `frontier simulate` (issue 16 set 0.25 s; 0.35 s since the CLI stopped replacing
# parts of the standard library and of simpy and pydantic to save time: house, round three).
STARTUP_TARGET_S = 0.35
# As `frontier` itself starts (simulator.cli.app.main): no pydantic plugin scan, one BLAS thread.
_AS_FRONTIER: dict[str, str] = {"PYDANTIC_DISABLE_PLUGINS": "__all__", "OPENBLAS_NUM_THREADS": "1"}


def _fresh_seconds(args: list[str], repeat: int) -> float:
    """Median wall time of `python ARGS` in fresh interpreters, less a bare interpreter's."""

    def once(a: list[str]) -> float:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, *a], check=True, stdout=subprocess.DEVNULL,
                       env={**_AS_FRONTIER, **os.environ})
        return time.perf_counter() - t0

    bare = statistics.median(once(["-c", "pass"]) for _ in range(repeat))
    return statistics.median(once(args) for _ in range(repeat)) - bare


def import_seconds(module: str, repeat: int) -> float:
    """Start-up of a command: a fresh interpreter importing `module`, beyond a bare one."""
    return _fresh_seconds(["-c", f"import {module}"], repeat)


# What `frontier simulate` imports and how it leaves (cli/app.py `entry`: no teardown).
_SIMULATE_IMPORTS = "import os, simulator.cli.app, simulator.api; os._exit(0)"


def simulate_seconds(repeat: int) -> float:
    """`frontier simulate` of a one-request scenario end to end (start-up, load, simulate,
    print, exit) in fresh interpreters, beyond a bare one."""
    import tempfile

    import yaml

    one = {**BENCH_SCENARIO, "workload": {**BENCH_SCENARIO["workload"], "num_requests": 1}}
    with tempfile.TemporaryDirectory(prefix="frontier-bench-") as tmp:
        path = os.path.join(tmp, "one-request.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(one, f)
        return _fresh_seconds(["-m", "simulator", "simulate", path], repeat)


def bytecode_cached() -> str:
    """Whether simulator's modules load from cached bytecode (else each start compiles them,
    as under PYTHONDONTWRITEBYTECODE before the first run that may write them)."""
    import importlib.util

    import simulator.api

    cached = os.path.exists(importlib.util.cache_from_source(simulator.api.__file__))
    return "yes" if cached else "no"


def run_bench(num_requests: int, repeat: int, step_evals: int) -> Iterator[str]:
    import simulator

    yield f"machine: {machine()}"
    n = max(5, repeat)
    cli_s = import_seconds("simulator.cli.app", n)
    sim_s = _fresh_seconds(["-c", _SIMULATE_IMPORTS], n)
    run_s = simulate_seconds(n)
    yield (
        f"start-up (beyond a bare python, median of {n}; bytecode cached: "
        f"{bytecode_cached()}): imports of `frontier --help` {cli_s:.3f} s, "
        f"of `frontier simulate` {sim_s:.3f} s; `frontier simulate` of one request end to end "
        f"{run_s:.3f} s (target <= {STARTUP_TARGET_S} s)"
    )

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
    loaded = simulator.load_scenario(_bench_scenario(num_requests))
    walls, cpus, sims = [], [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        r = simulator.simulate(loaded)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        sims.append(r.summary["duration_s"])
    wall = statistics.median(walls)
    yield (
        f"serving: {num_requests:,} requests in {wall:.2f} s wall, "
        f"{statistics.median(cpus):.2f} s CPU (medians of {repeat}; target <= 0.25 s for 10k), "
        f"{num_requests / wall:,.0f} requests/s, {statistics.median(sims) / wall:,.0f} simulated "
        f"seconds per wall second"
    )


def _bench_scenario(num_requests: int) -> dict[str, Any]:
    """The bench scenario with `num_requests` requests."""
    return {**BENCH_SCENARIO,
            "workload": dict(BENCH_SCENARIO["workload"], num_requests=num_requests)}


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (ru_maxrss: KiB on Linux, bytes on macOS)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def run_bench_scale(num_requests: int, steps: int = 2) -> Iterator[str]:
    """Simulate num_requests / 10**(steps-1), ..., num_requests requests of the bench scenario
    (ascending, in this process) and report wall time, requests/s and peak RSS of each, then the
    ratios between consecutive sizes: linear scaling shows as ratios near the size ratio."""
    import simulator

    sizes = sorted({max(1, num_requests // 10**k) for k in range(steps)})
    # Warm the process first (lazy imports, memoized step costs), so that the smallest size
    # is not charged the first run's one-off costs and the ratios show how the loop scales.
    simulator.simulate(_bench_scenario(1000))
    base_rss = peak_rss_bytes()
    yield f"machine: {machine()}"
    yield (
        f"bench-scale: {BENCH_SCENARIO['name']}; sizes {', '.join(f'{n:,}' for n in sizes)}; "
        f"peak RSS before the runs (after a 1,000-request warm-up) {base_rss / 2**20:,.0f} MiB"
    )
    prev: tuple[int, float, float, int] | None = None
    for n in sizes:
        t0, c0 = time.perf_counter(), time.process_time()
        r = simulator.simulate(_bench_scenario(n))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        rss = peak_rss_bytes()
        yield (
            f"{n:>12,} requests: {wall:8.2f} s wall ({cpu:.2f} s CPU: on a busy machine the "
            f"wall time includes waiting for a core), {n / wall:10,.0f} requests/s, peak RSS "
            f"{rss / 2**20:8,.0f} MiB ({(rss - base_rss) / n:,.0f} B/request above the "
            f"baseline), status {r.status}, {r.summary['duration_s']:,.0f} s simulated"
        )
        if prev is not None:
            pn, pwall, pcpu, prss = prev
            yield (
                f"{'':>12}  x{n / pn:g} requests ({pn:,} -> {n:,}): wall x{wall / pwall:.2f}, "
                f"CPU x{cpu / max(pcpu, 1e-9):.2f}, RSS above baseline "
                + (f"x{(rss - base_rss) / (prss - base_rss):.2f}" if prss - base_rss >= 2**20
                   else "(under 1 MiB before: no ratio)")
            )
        prev = (n, wall, cpu, rss)
    yield ("targets (issue 16): x10 requests (100k/10k) -> wall <= x10.5; 1,000,000 requests "
           "<= 30 s in <= 500 MiB peak RSS")
