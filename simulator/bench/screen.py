"""The sweep screen's own figures: its error band against the simulation (`measure_bands`,
which `screen_bands.yaml` was written from) and its speed (`run_screen_bench`)."""

from __future__ import annotations

import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from simulator.inputs.shipped import scenarios_dir
from simulator.inputs.yamlfile import load_yaml_mapping
from simulator.sweep.grid import expand, load_sweep
from simulator.sweep.runners import Task, evaluate_point, run_local
from simulator.sweep.screen import PREDICTED, band_classes, estimate_point
from simulator.sweep.store import Record, make_record
from simulator.sweep.table import flatten, number


def _pair_record(task: Task) -> Record:
    """The estimate and the simulation of one point, side by side."""
    est = estimate_point(task)
    res = est.get("result") or {}
    pair = {"est": est, "sim": evaluate_point(task),
            "classes": band_classes(task.scenario, bool(res.get("stable", True)),
                                    res.get("load"))}
    return make_record(task.key, task.values, "pair", result=pair)


def _scenario_grid(name: str, sweep: dict[str, Any]) -> dict[str, Any]:
    data = dict(load_yaml_mapping(scenarios_dir() / name, "scenario", "keys"))
    data["sweep"] = sweep
    return data


def band_grids() -> list[Mapping[str, Any]]:
    """Where the bands are measured beyond the shipped sweeps: the shipped scenarios over their
    load, engine styles and batch limits, and the bench-sweep grid."""
    from simulator.bench.sweep import bench_sweep_spec

    rates = "workload.arrival.rate_per_s"
    closed = [{"kind": "closed_loop", "concurrency": c} for c in (4, 32, 128)]
    return [
        _scenario_grid("chat-llama-3.1-8b-h100.yaml", {
            rates: [1, 3, 6, 10, 14, 20], "deployment.scheduler.max_num_seqs": [64, 256],
            "deployment.engine": ["vllm", "sglang", "trtllm"]}),
        _scenario_grid("chat-llama-3.1-8b-h100.yaml", {"workload.arrival": closed}),
        _scenario_grid("llama-3.3-70b-8xh100-fp8-poisson.yaml", {rates: [1, 4, 8, 16]}),
        _scenario_grid("pipeline-llama-405b-2x-h100.yaml", {rates: [0.5, 1, 2, 4]}),
        _scenario_grid("speculative-chat-eagle3-h100.yaml", {rates: [1, 4, 8, 16]}),
        _scenario_grid("speculative-code-eagle3-h100.yaml", {rates: [1, 4, 8]}),
        _scenario_grid("moe-gpt-oss-120b-b200.yaml", {rates: [2, 8, 16]}),
        _scenario_grid("moe-attention-dp-qwen3-235b-h200.yaml",
                       {"workload.arrival.concurrency": [16, 64, 256]}),
        _scenario_grid("disaggregated-long-input-h100.yaml", {rates: [1, 3, 6]}),
        bench_sweep_spec(400, 1000),
    ]


def measure_ratios(workers: int = 2, counts: Sequence[int | None] = (None, 200, 60)
                   ) -> dict[str, dict[str, list[float]]]:
    """Per class and metric, simulated / estimated over the shipped sweeps and `band_grids()`
    at each request count (None: the count each point names)."""
    sweeps = scenarios_dir() / "sweeps"
    sources: list[str | Path | Mapping[str, Any]] = [*sorted(sweeps.glob("*.yaml")),
                                                     *band_grids()]
    merged: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for n in counts:
        for cls, metrics in ratios(sources, n, workers).items():
            for col, r in metrics.items():
                merged[cls][col].extend(r)
    return merged


MARGIN = 0.10  # the widening of every measured range (checked by `held_out`)


def render_bands(merged: Mapping[str, Mapping[str, list[float]]],
                 counts: Sequence[int | None] = (None, 200, 60), margin: float = MARGIN) -> str:
    """screen_bands.yaml: per class and metric, the range of `merged`, widened by `margin`."""
    lines = ["# The sweep screen's error bands: simulated / estimated per point class and "
             "metric,", f"# min and max over the shipped sweeps and bench/screen.py band_grids()"
             f" at {', '.join(str(c or 'full') for c in counts)} requests,",
             f"# widened by {margin:.0%} (lo x {1 - margin:g}, hi x {1 + margin:g}). Rewrite "
             "with: python -m simulator.bench.screen", *HELD_OUT, "classes:"]
    for cls in sorted(merged):
        lines.append(f"  {cls}:")
        for col, r in sorted(merged[cls].items()):
            lo, hi = min(r) * (1 - margin), max(r) * (1 + margin)
            lines.append(f"    {col}: [{lo:.4f}, {hi:.4f}]  # n={len(r)}, measured "
                         f"{min(r):.3f}..{max(r):.3f}, median {statistics.median(r):.3f}")
    return "\n".join(lines) + "\n"


# How the margin is checked (`held_out`; README, "Screening a sweep"): bands measured with
# band_grids()' 400-point bench grid (10 rates) in the sample, then every point of the
# 1,000-point bench grid (25 rates, 21 of them not in the sample) simulated at 1,000 requests
# was compared with the band that judges it (sweep/screen.py `_judging_bands`).
HELD_OUT = (
    "# Held out: the 1,000-point bench grid of bench-sweep --screen (21 of its 25 rates are not",
    "# in the sample): no value of its 1,000 points falls outside these bands; unwidened, 98",
    "# values of 65 points do (misses up to 5.6 %), hence the 10 % margin. Check with:",
    "# python -m simulator.bench.screen --held-out",
)


def measure_bands(workers: int = 2, counts: Sequence[int | None] = (None, 200, 60),
                  margin: float = MARGIN) -> str:
    """screen_bands.yaml: per class and metric, the range of simulated / estimated over the
    shipped sweeps and `band_grids()` at each request count, widened by `margin`."""
    return render_bands(measure_ratios(workers, counts), counts, margin)


def ratios(sources: Sequence[str | Path | Mapping[str, Any]], num_requests: int | None,
           workers: int) -> dict[str, dict[str, list[float]]]:
    """class -> metric -> simulated / estimated over every point of `sources` (sweep files or
    dicts) that both simulated and estimated; `num_requests` replaces each point's count."""
    tasks = []
    for src in sources:
        ex = expand(load_sweep(src))
        for p in ex.points:
            sc = p.scenario
            if num_requests is not None:
                sc = {**sc, "workload": {**sc["workload"], "num_requests": num_requests}}
            tasks.append(Task(p.key, p.values, sc))
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    pairs: list[Record] = []
    run_local(tasks, workers, pairs.append, _pair_record)
    for rec in pairs:
        pair = rec["result"] or {}
        est, sim = pair["est"], pair["sim"]
        if est["point_status"] != "estimated" or sim["point_status"] != "ok":
            continue
        if est["result"]["refused"]:
            continue
        row = flatten(sim["result"])
        for col in PREDICTED:
            e, s = est["result"]["estimate"][col], number(row, col)
            if s is not None and e > 0 and e != float("inf"):
                for cls in pair["classes"]:
                    out[cls][col].append(s / e)
    return out


def held_out(workers: int = 2, points: int = 1000, num_requests: int = 1000,
             bands_path: Path | None = None) -> Iterator[str]:
    """The check of the margin on points the bands were not measured on: every point of the
    `bench-sweep --screen` grid, simulated and estimated, against the band that judges it (as
    sweep/screen.py picks it), with the shipped bands and with those bands unwidened."""
    from simulator.bench.sweep import bench_sweep_spec
    from simulator.sweep.screen import BANDS_PATH, Band, _judging_bands, load_bands

    shipped = load_bands(bands_path or BANDS_PATH)
    raw = {cls: {col: Band(b.lo / (1 - MARGIN), b.hi / (1 + MARGIN)) for col, b in m.items()}
           for cls, m in shipped.items()}
    ex = expand(load_sweep(bench_sweep_spec(points, num_requests)))
    pairs: list[Record] = []
    run_local([Task(p.key, p.values, p.scenario) for p in ex.points], workers, pairs.append,
              _pair_record)
    for name, bands in (("shipped bands", shipped), (f"unwidened (no {MARGIN:.0%})", raw)):
        values, at, worst = 0, set(), 0.0
        for rec in pairs:
            pair = rec["result"] or {}
            est, sim = pair["est"], pair["sim"]
            if (est["point_status"] != "estimated" or sim["point_status"] != "ok"
                    or est["result"]["refused"]):
                continue
            row = flatten(sim["result"])
            for col in PREDICTED:
                e, v = est["result"]["estimate"][col], number(row, col)
                band = (_judging_bands(bands, pair["classes"], [col]) or {}).get(col)
                if v is None or band is None or not 0 < e < float("inf"):
                    continue
                r = v / e
                if not band.lo <= r <= band.hi:
                    values += 1
                    at.add(rec["key"])
                    worst = max(worst, band.lo / r - 1, r / band.hi - 1)
        yield (f"held out, {len(pairs):,} points of the {points:,}-point bench grid at "
               f"{num_requests:,} requests, {name}: {values} values of {len(at)} points outside "
               f"the band that judges them (worst miss {worst:.1%})")


def band_lines(found: Mapping[str, Mapping[str, list[float]]]) -> Iterator[str]:
    for cls in sorted(found):
        for col, r in sorted(found[cls].items()):
            yield (f"{cls:28s} {col:34s} n={len(r):4d} min {min(r):.3f} median "
                   f"{statistics.median(r):.3f} max {max(r):.3f}")


def run_screen_bench(points: int, num_requests: int, workers: int,
                     screen_only: bool) -> Iterator[str]:
    """The bench grid with the screen: share screened out and time; without `screen_only`, the
    same grid without the screen too, for the speed-up (and the frontiers compared)."""
    from simulator.bench.engine import machine
    from simulator.bench.sweep import bench_sweep_spec
    from simulator.sweep.pipeline import run_sweep

    spec = load_sweep(bench_sweep_spec(points, num_requests))
    yield (f"bench-sweep --screen: {spec.grid_size:,} points × {num_requests:,} requests "
           f"(llama-3.1-8b on H100, TP × max_num_seqs × format × Poisson rate) on {workers} "
           f"worker process(es); machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="frontier-bench-screen-") as tmp:
        t0, c0 = time.perf_counter(), _cpu_s()
        screened = run_sweep(spec, Path(tmp) / "screen", workers=workers, screen=True,
                             screen_only=screen_only)
        wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    n_out = sum(screened.screened.values())
    share = n_out / max(1, screened.runnable)
    yield (f"screen: {screened.runnable:,} points estimated in {screened.screen_s:.1f} s "
           f"({screened.runnable / max(screened.screen_s, 1e-9):,.0f} points/s); {n_out:,} "
           f"screened out ({share:.1%}), {screened.ran:,} simulated; {wall:.1f} s wall, "
           f"{cpu:.1f} s CPU in all")
    for reason, n in screened.screened.most_common():
        yield f"  {n:,} {reason}"
    if screen_only:
        return
    with tempfile.TemporaryDirectory(prefix="frontier-bench-screen-") as tmp:
        t0, c0 = time.perf_counter(), _cpu_s()
        full = run_sweep(spec, Path(tmp) / "full", workers=workers)
        wall_full, cpu_full = time.perf_counter() - t0, _cpu_s() - c0
    same = [r["point_id"] for r in full.frontier] == [r["point_id"] for r in screened.frontier]
    yield (f"without the screen: {full.ran:,} points simulated in {wall_full:.1f} s wall, "
           f"{cpu_full:.1f} s CPU; speed-up x{wall_full / wall:.2f} wall, "
           f"x{cpu_full / max(cpu, 1e-9):.2f} CPU (CPU carries over a shared machine's load "
           f"swings); frontier {'identical' if same else 'DIFFERENT'} "
           f"({len(full.frontier)} points)")


def _cpu_s() -> float:
    """CPU seconds of this process and its finished worker processes."""
    import resource

    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF,
                                                  resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


if __name__ == "__main__":
    import json
    import sys

    # python -m simulator.bench.screen [RAW.json]: measure and print screen_bands.yaml; with
    # RAW.json, also keep the measured ratios there (or re-render from it if it exists).
    # python -m simulator.bench.screen --held-out [BANDS.yaml]: the check of the margin.
    if sys.argv[1:2] == ["--held-out"]:
        for line in held_out(bands_path=Path(sys.argv[2]) if len(sys.argv) > 2 else None):
            print(line)
        sys.exit(0)
    raw = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    if raw is not None and raw.exists():
        found = json.loads(raw.read_text())
    else:
        found = measure_ratios()
        if raw is not None:
            raw.write_text(json.dumps(found))
    print(render_bands(found), end="")
