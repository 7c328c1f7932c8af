"""`frontier bench` and `bench-scale`: how fast the simulator itself runs."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.option("--requests", "num_requests", type=click.IntRange(min=1), default=10_000,
              show_default=True)
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--step-evals", type=click.IntRange(min=1), default=200_000, show_default=True)
def bench(num_requests: int, repeat: int, step_evals: int) -> None:
    """Benchmark the simulator itself: step-cost evaluations/s and requests simulated/s."""
    from simulator.bench.engine import run_bench

    for line in run_bench(num_requests, repeat, step_evals):
        click.echo(line)


@click.command("bench-scale")
@click.option("--requests", "num_requests", type=click.IntRange(min=1), default=1_000_000,
              show_default=True)
@click.option("--steps", type=click.IntRange(min=1, max=4), default=3, show_default=True,
              help="Also run 1/10, 1/100, ... of the requests first, to show the scaling "
                   "(the default 3 gives 10k, 100k and 1M: both x10 ratios).")
def bench_scale(num_requests: int, steps: int) -> None:
    """Scale benchmark: wall time, requests/s and peak memory for many requests."""
    from simulator.bench.engine import run_bench_scale

    for line in run_bench_scale(num_requests, steps):
        click.echo(line)


@click.command("bench-validate")
@click.argument("files", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--sample", type=click.IntRange(min=1), default=200, show_default=True,
              help="Runs drawn (seeded) for the simulation; the estimate scores them all.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True)
def bench_validate(files: tuple[Path, ...], sample: int, seed: int, repeat: int,
                   workers: int) -> None:
    """Benchmark scoring measured runs: all with the estimate, a sample with the simulation
    (wall and CPU medians, the machine's load, the rate carried over to the whole file)."""
    from simulator.bench.validate import run_validate_bench

    for line in run_validate_bench(list(files), sample, seed, repeat, workers):
        click.echo(line)
