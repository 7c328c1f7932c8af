"""Speed of capacity by search (`recommend --rate`): the configs of a shipped sweep, each
searched for the highest rate its runs meet the sweep's SLO at, timed as a whole (wall and CPU
seconds, medians over repeats) with the machine's load beside the figures."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator

from simulator.errors import InputError


def run_capacity_bench(sweep: str, limit: int | None, repeat: int,
                       workers: int = 1) -> Iterator[str]:
    """Search every config (points differing only in load count once) of `sweep` on
    `workers` processes."""
    from simulator.bench.engine import machine
    from simulator.inputs.shipped import resolve_scenario
    from simulator.sweep.capacity import search_all, unique_configs
    from simulator.sweep.grid import expand, load_sweep
    from simulator.sweep.slo import slo_from_scenario

    spec = load_sweep(resolve_scenario(sweep))
    targets = slo_from_scenario(spec.base)
    if not targets:
        raise InputError(f"bench-capacity {sweep}: the sweep has no slo: to search against")
    import simulator

    _, configs = unique_configs((p.key, p.scenario) for p in expand(spec).points)
    refused = 0
    for key, scenario in list(configs.items()):
        try:  # a config the engine refuses (does not fit, does not split) has no capacity
            simulator.load_scenario(scenario)
        except ValueError:
            refused += 1
            del configs[key]
    chosen = list(configs.values())[:limit] if limit else list(configs.values())
    yield (f"bench-capacity: {len(chosen)} configs of {spec.source} ({refused} refused by "
           f"the engine, not timed) against "
           f"{', '.join(f'{k} <= {v:g} s' for k, v in targets.items())} on {workers} "
           f"process(es); machine: {machine()}")
    walls, cpus, runs = [], [], 0  # CPU: this process only (workers' time is not counted)
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        found = search_all(chosen, targets, workers=workers)
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
        runs = sum(c.simulations for c in found)
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    yield (f"capacity search: {wall:.2f} s wall, {cpu:.2f} s CPU (medians of {repeat}); "
           f"{runs} simulations, {runs / max(1, len(chosen)):.1f} per config; "
           f"{len(chosen) / wall if wall > 0 else float('inf'):.1f} configs/s; "
           f"1,000 configs at this rate: {1000 * wall / max(1, len(chosen)):.0f} s "
           f"(target <= 60 s)")
