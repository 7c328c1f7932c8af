"""`frontier validate --measurements FILE...`: score the simulator against measured runs
(silicon calibration CSV, vllm bench serve JSON, aiperf export, sglang bench_serving JSONL).

The options are added to `frontier validate` by the `measured_options` decorator, which runs
this path when measurement files are given and leaves the command unchanged otherwise."""

from __future__ import annotations

import functools
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from simulator.units import table

if TYPE_CHECKING:
    from simulator.measured.run import MeasuredRun
    from simulator.measured.scenario import Mapped

_READ_ONLY = ("subset", "write_report", "ablation", "update_baseline")


def measured_options(f: Callable[..., None]) -> Callable[..., None]:
    """Add the --measurements options to a click callback; with files given, score them."""

    @functools.wraps(f)
    def wrapper(**kwargs: Any) -> None:
        mine = {k: kwargs.pop(k) for k in _PARAMS}
        files = [*mine.pop("measurements"), *mine.pop("more_files")]
        if not files:
            if mine["calibration"] is not None:
                raise click.UsageError("--calibration applies to --measurements (the "
                                       "published rows run on the shipped values)")
            return f(**kwargs)
        clash = [k for k in _READ_ONLY if kwargs.get(k)]
        if clash:
            name = "--" + clash[0].replace("_", "-")
            raise click.UsageError(f"{name} applies to the published rows, not --measurements")
        if (mine["resume"] or mine["fresh"]) and mine["store"] is None:
            raise click.UsageError("--resume and --fresh apply to a --store folder")
        if mine["resume"] and mine["fresh"]:
            raise click.UsageError("--resume and --fresh exclude each other")
        if mine["full_runs"] and mine["method"] != "simulate":
            raise click.UsageError("--full-runs applies to --method simulate (the estimate "
                                   "simulates no run)")
        return run_measured([Path(p) for p in files], as_json=kwargs["as_json"], **mine)

    options = [
        click.argument("more_files", nargs=-1, type=click.Path(dir_okay=False)),
        click.option("--measurements", multiple=True, type=click.Path(dir_okay=False),
                     help="Score against these measured runs (silicon CSV, vllm bench serve "
                     "JSON, aiperf profile_export_aiperf.json, sglang JSONL); more files may "
                     "follow as arguments."),
        click.option("--format", "fmt", type=click.Choice(["silicon", "vllm", "aiperf",
                                                           "sglang"]), default=None,
                     help="The files' format (default: told from extension and keys)."),
        click.option("--scenario", "scenario", type=click.Path(dir_okay=False), default=None,
                     help="Scenario YAML giving model, hardware and deployment for files "
                     "that do not record them (vllm, aiperf, sglang)."),
        click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                     help="Override a scenario key of every run (after mapping)."),
        click.option("--method", type=click.Choice(["simulate", "estimate"]),
                     default="simulate", show_default=True,
                     help="Simulate each run, or use the closed-form estimate (much faster)."),
        click.option("--limit", type=click.IntRange(min=1), default=None,
                     help="Score only the first N runs."),
        click.option("--sample", type=click.IntRange(min=1), default=None,
                     help="Score N runs drawn at random (with --seed)."),
        click.option("--seed", type=int, default=0, show_default=True,
                     help="Seed of --sample."),
        click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Score in this many processes."),
        click.option("--full-runs", "full_runs", is_flag=True,
                     help="Simulate every closed loop to its end (default: a long loop of "
                     "identical requests stops once its rounds repeat and the rest are carried "
                     "over, measured/steady.py)."),
        click.option("--store", "store", type=click.Path(file_okay=False), default=None,
                     help="Keep every scored run in DIR/store.jsonl as it finishes (the "
                     "sweep's store); with --resume a later call scores only the runs it "
                     "lacks (or failed), --fresh starts over."),
        click.option("--resume", is_flag=True, help="Continue the scoring kept in --store."),
        click.option("--fresh", is_flag=True, help="Discard the --store's runs and start over."),
        click.option("--backend", type=click.Choice(["local", "ray"]), default="local",
                     show_default=True,
                     help="Score on local processes (--workers) or as Ray tasks (a local Ray "
                     "instance of --workers CPUs, or the cluster at --ray-address)."),
        click.option("--ray-address", "ray_address", default=None,
                     help="Ray cluster to score on with --backend ray (default: RAY_ADDRESS, "
                     "else a local instance)."),
        click.option("--calibration", "calibration", type=click.Path(dir_okay=False),
                     default=None,
                     help="Score the runs under this calibration overlay (from `frontier "
                     "calibrate`): its host costs and GPU factors, as simulate and estimate "
                     "apply them (with --measurements)."),
    ]
    out: Callable[..., None] = wrapper
    for option in reversed(options):  # the first listed shows first in --help
        out = option(out)
    return out


_PARAMS = ("measurements", "more_files", "fmt", "scenario", "sets", "method", "limit",
           "sample", "seed", "workers", "calibration", "full_runs", "store", "resume", "fresh",
           "backend", "ray_address")


def read_and_map(files: list[Path], fmt: str | None, scenario: str | None,
                 sets: tuple[str, ...], limit: int | None, sample: int | None,
                 seed: int, max_concurrency: int | None = None
                 ) -> tuple[int, list[MeasuredRun], list[Mapped]]:
    """Read every file (failing before any work), keep the closed loops of at most
    `max_concurrency` in flight (when given), then --limit or a seeded --sample of the runs,
    and map each to a scenario (a user's scenario that does not validate: exit 2). Returns
    the runs read, the runs kept and their mappings."""
    from simulator.inputs.yamlfile import load_yaml_mapping
    from simulator.measured.detect import read_measurements
    from simulator.measured.scenario import map_run

    if limit is not None and sample is not None:
        raise click.UsageError("give --limit or --sample, not both")
    runs = read_measurements(files, fmt)
    read = len(runs)
    base = None
    if scenario is not None:
        base = load_yaml_mapping(Path(scenario), "scenario", "keys (model, hardware, ...)")
    if max_concurrency is not None:
        runs = [r for r in runs
                if r.load.concurrency is not None and r.load.concurrency <= max_concurrency]
    if limit is not None:
        runs = runs[:limit]
    elif sample is not None and sample < len(runs):
        keep = sorted(random.Random(seed).sample(range(len(runs)), sample))
        runs = [runs[i] for i in keep]
    mapped = [map_run(r, base, sets) for r in runs]
    _check_user_scenarios(mapped)
    return read, runs, mapped


def run_measured(files: list[Path], *, as_json: bool, fmt: str | None, scenario: str | None,
                 sets: tuple[str, ...], method: str, limit: int | None, sample: int | None,
                 seed: int, workers: int, calibration: str | None = None,
                 full_runs: bool = False, store: str | None = None, resume: bool = False,
                 fresh: bool = False, backend: str = "local",
                 ray_address: str | None = None) -> None:
    """Read every file (failing before any scoring), map, score, then print once; under a
    calibration, with its host costs in each run's scenario and its GPU profiles in each run,
    and said on the first line."""
    from simulator.measured.scoring import score_under, summarise
    from simulator.progress import Progress

    start = time.perf_counter()
    applied, head = None, None
    if calibration is not None:  # a bad overlay fails before any file is read
        from simulator.cli.calibration_flag import calibration_applied, calibration_line

        applied = calibration_applied(calibration)
        head = calibration_line(calibration, applied)
    _, _, mapped = read_and_map(files, fmt, scenario, sets, limit, sample, seed)
    from simulator.sweep.runners import require_ray

    require_ray(backend)
    kept = None if store is None else _open_store(Path(store), resume, fresh)
    progress = Progress(len(mapped), label="validate", unit="runs")
    try:
        records = score_under(mapped, applied, method, workers, progress,
                              steady=not full_runs, store=kept, backend=backend,
                              ray_address=ray_address)
    finally:
        progress.close()
        if kept is not None:
            kept.close()
    result = {"method": method, "files": [str(f) for f in files],
              "calibration": calibration, "seconds": time.perf_counter() - start,
              **summarise(records), "runs": records}
    if as_json:
        click.echo(json.dumps(result, indent=2, allow_nan=False))
        return
    click.echo(((head + "\n") if head else "") + measured_text(result))


def _open_store(folder: Path, resume: bool, fresh: bool) -> Any:
    """The sweep's store in `folder` (made if missing): refuses a folder already holding one
    unless resumed or started fresh, and a folder another scoring or sweep holds."""
    from simulator.safeio import make_folder
    from simulator.sweep.store import STORE_NAME, ResultStore

    make_folder(folder)
    return ResultStore(folder / STORE_NAME, resume=resume, fresh=fresh)


def _check_user_scenarios(mapped: list[Any]) -> None:
    """Runs whose deployment the user gave (--scenario, --set): a scenario that does not
    validate is the user's error, one line and exit 2, not a refused run. The schema is
    checked for each; the engine (layout, memory) is built once, for the first."""
    from simulator.api import load_scenario
    from simulator.errors import InputError
    from simulator.inputs.scenario import load_scenario_file

    given = [m for m in mapped if not m.run.pools and m.scenario is not None]
    for m in given:
        load_scenario_file(m.scenario)
    if given:
        try:
            load_scenario(given[0].scenario)
        except ValueError as exc:
            raise InputError(f"{given[0].run.where}: the scenario given for it cannot run: "
                             f"{exc}") from None


def measured_text(result: dict[str, Any]) -> str:
    """Per group and metric: runs, refused, n, median and p90 |error|, median signed error;
    then the refusals by reason and the declared defaults with their counts."""
    rows = []
    blocks = [*result["groups"].items(), ("overall", result["overall"]),
              ("overall, layout recorded and not contradicted", result["overall_layout_recorded"])]
    for name, block in blocks:
        head = [name, str(block["runs"]), str(block["simulated"]), str(block["refused"])]
        if not block["metrics"]:
            rows.append([*head, "-", "", "", "", ""])
        for i, (metric, st) in enumerate(block["metrics"].items()):
            lead = head if i == 0 else ["", "", "", ""]
            rows.append([*lead, metric, str(st["n"]), f"{st['median_abs_error']:.1%}",
                         f"{st['p90_abs_error']:.1%}", f"{st['median_signed_error']:+.1%}"])
    lines = [table(["group (GPU engine mode)", "runs", "simulated", "refused", "metric", "n",
                    "median |err|", "p90 |err|", "median err"], rows)]
    if result["refused"]:
        lines += ["", table(["refused because", "runs"],
                            [[k, str(v)] for k, v in result["refused"].items()])]
    if result["defaults"]:
        lines += ["", table(["declared default (not recorded in the file)", "runs"],
                            [[k, str(v)] for k, v in result["defaults"].items()])]
    from simulator.measured.ordering import ordering_lines

    lines += ["", *ordering_lines(result.get("ordering", {}))]
    lines.append(f"\n{result['method']}: {result['overall']['runs']} runs in "
                 f"{result['seconds']:.1f} s; --json lists every run's predicted vs measured")
    return "\n".join(lines)
