"""`frontier sweep | recommend | export | report | bench-sweep`: the sweep commands.

Listed in the main group's COMMANDS (simulator/cli/app.py). Bad input
raises InputError (one line on stderr, exit 2, as everywhere in the CLI).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from simulator.cli.calibration_flag import (
    calibration_applied,
    calibration_line,
    calibration_option,
)
from simulator.cli.common import FiniteFloat
from simulator.errors import InputError

_AXIS_HELP = ("Frontier axis: a name (throughput_per_gpu, speed_per_user, ttft_p99, tpot_p99, "
              "cost, energy, requests_per_s) or a results.csv column, optionally :min or :max.")
_PRICE_HELP = ("USD per GPU-hour, e.g. h100-sxm=2.5 (repeatable); also read from "
               "FRONTIER_GPU_PRICES='h100-sxm=2.5,b200=5'. Without one, cost stays empty.")
_SLO_HELP = "Latency target, e.g. ttft_p99_s=2 or tpot_p99_s=0.05 (repeatable)."


def _axes(x: str | None, y: str | None) -> dict[str, Any]:
    from simulator.sweep.frontier import DEFAULT_X, DEFAULT_Y, parse_axis

    return {"x": parse_axis(x) if x else DEFAULT_X, "y": parse_axis(y) if y else DEFAULT_Y}


@click.command()
@click.argument("sweep_file", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Output folder (results.csv, frontier.csv, report.html, points/).")
@click.option("--backend", type=click.Choice(["local", "ray"]), default="local",
              show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Worker processes (local) or CPUs of a local Ray instance [default: all CPUs].")
@click.option("--resume", is_flag=True, help="Continue a sweep in DIR: skip finished points.")
@click.option("--fresh", is_flag=True, help="Discard the store already in DIR and start over.")
@click.option("--ray-address", default=None,
              help="Ray cluster address [default: RAY_ADDRESS, else a local instance].")
@click.option("--gpu-price", "gpu_price", multiple=True, metavar="GPU=USD", help=_PRICE_HELP)
@click.option("--x", "x_axis", default=None, help=_AXIS_HELP + " [default: speed_per_user]")
@click.option("--y", "y_axis", default=None, help=_AXIS_HELP + " [default: throughput_per_gpu]")
@click.option("--color-by", default=None, help="Swept key that colours the split frontier plot.")
@click.option("--no-report", is_flag=True, help="Skip report.html.")
@click.option("--skip-bad-rows", is_flag=True,
              help="Drop (and count in each point's warnings) trace rows that are bad or pass "
                   "the context window, instead of refusing the point.")
@click.option("--screen", is_flag=True,
              help="Estimate every point in closed form first and simulate only those the "
                   "estimate cannot rule out: certainly dominated on the frontier axes, or "
                   "(with the sweep's slo:) certainly missing the SLO, which then makes the "
                   "frontier the one within the SLO. Screened points are counted with reasons.")
@click.option("--screen-ignore-slo", is_flag=True,
              help="With --screen: rule out dominated points only, keep the plain frontier.")
@calibration_option
def sweep(sweep_file: str, out_dir: str, backend: str, workers: int | None, resume: bool,
          fresh: bool, ray_address: str | None, gpu_price: tuple[str, ...], x_axis: str | None,
          y_axis: str | None, color_by: str | None, no_report: bool, skip_bad_rows: bool,
          screen: bool, screen_ignore_slo: bool, calibration: str | None) -> None:
    """Simulate every point of SWEEP_FILE's grid and find the frontier."""
    from simulator.sweep.cost import gpu_prices
    from simulator.sweep.pipeline import run_sweep

    applied = calibration_applied(calibration) if calibration is not None else None
    if calibration is not None:
        click.echo(calibration_line(calibration))
    if resume and fresh:
        raise InputError("--resume and --fresh exclude each other")
    if screen_ignore_slo and not screen:
        raise InputError("--screen-ignore-slo needs --screen")
    outcome = run_sweep(
        sweep_file, out_dir, backend=backend, workers=workers, resume=resume, fresh=fresh,
        ray_address=ray_address, prices=gpu_prices(gpu_price), skip_bad_rows=skip_bad_rows,
        screen=screen, screen_slo=not screen_ignore_slo, calibration=applied,
        **_axes(x_axis, y_axis),
    )
    if not no_report:
        from simulator.report import write_sweep_report

        page = Path(out_dir) / "report.html"
        write_sweep_report(Path(out_dir), page, x=outcome.x, y=outcome.y, color_by=color_by)
        outcome.written.insert(-1, str(page))
    for line in outcome.summary_lines():
        click.echo(line)
    failed = outcome.failure_line() or outcome.incomplete_line()
    if failed is not None:  # the outputs are written; the exit status says what is lacking
        click.echo(f"frontier: {failed}", err=True)
        raise SystemExit(1)


def _sweep_rows(sweep_dir: str, prices: dict[str, float]) -> tuple[Path, list[str],
                                                                     list[dict[str, Any]]]:
    """Rows and swept axes of a sweep folder, the cost column repriced with `prices`."""
    from simulator.report.sweep_report import load_sweep_dir
    from simulator.sweep.cost import mean_price_per_gpu_hour, usd_per_million_output_tokens
    from simulator.sweep.store import point_scenario
    from simulator.sweep.table import COST_COLUMN, number

    path = Path(sweep_dir)
    _, rows, manifest = load_sweep_dir(path)
    if prices:
        for r in rows:
            if r.get("point_status") != "ok":
                continue
            sc = point_scenario(path, str(r.get("point_id"))) or {}
            r[COST_COLUMN] = usd_per_million_output_tokens(
                number(r, "num_gpus") or 0.0, mean_price_per_gpu_hour(sc, prices),
                number(r, "output_tokens_per_s") or 0.0)
    return path, list(manifest["axes"]), rows


def _targets(path: Path, rows: list[dict[str, Any]], slo: tuple[str, ...]) -> dict[str, float]:
    from simulator.sweep.slo import parse_slo, slo_from_scenario
    from simulator.sweep.store import point_scenario

    if slo:
        return parse_slo(slo)
    first = next((r for r in rows if r.get("point_status") == "ok"), None)
    return slo_from_scenario(point_scenario(path, str(first["point_id"])) if first else None)


_CAPACITY_HELP = (
    "Judge each config at its capacity, the highest arrival rate whose runs meet the SLO, "
    "found by search (the estimate brackets it, simulations settle it to 5 %), instead of at "
    "the load the sweep offered it. [default: on with --rate or --gpus]")


def _calibrated_gpu_values(path: Path) -> Any:
    """The calibrated GPU values the sweep in `path` ran on (none for a plain sweep)."""
    import json

    from simulator.calibration.applied import profiles_of
    from simulator.errors import one_line
    from simulator.sweep.capacity import recorded_gpu_values
    from simulator.sweep.pipeline import MANIFEST

    manifest = path / MANIFEST
    if not manifest.is_file():  # as the report reads the folder: no manifest, no calibration
        return ()
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{manifest}: cannot read the sweep's manifest ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{manifest}: not a sweep manifest (a JSON object)")
    values = recorded_gpu_values(data, str(manifest))
    try:  # checked here, once, so a bad value names the manifest, not a worker's profile
        profiles_of(values)
    except InputError as exc:
        raise InputError(one_line(f"{manifest}: calibrated_gpu_values: {exc}")) from None
    return values


def _capacities(path: Path, rows: list[dict[str, Any]], targets: dict[str, float],
                search: bool | None, sized: bool, confidence: str = "nominal") -> Any:
    """Point id -> searched capacity, or None when the search is off."""
    from simulator.progress import Progress
    from simulator.sweep.capacity import sweep_capacities

    if confidence == "pessimistic" and search is False:
        raise InputError("--confidence pessimistic judges capacities by search: drop "
                         "--no-capacity")
    if not (sized or confidence == "pessimistic" if search is None else search) or not targets:
        return None
    import os

    from simulator.sweep.capacity import sweep_configs

    gpu_values = _calibrated_gpu_values(path)
    if gpu_values:
        click.echo("calibrated: capacities searched on the sweep's calibrated GPU profiles ("
                   + "; ".join(f"{g} {k} {s:.4g} -> {v:.4g}" for g, k, v, s in gpu_values)
                   + ")", err=True)
    progress = Progress(len(sweep_configs(rows, path)[1]), label="capacity", unit="configs")
    caps = sweep_capacities(rows, path, targets, on_done=progress.step,
                            pessimistic=confidence == "pessimistic", workers=os.cpu_count() or 1,
                            gpu_values=gpu_values)
    progress.close()
    return caps


def _capacity_option(f: Any) -> Any:
    f = click.option("--confidence", type=click.Choice(["nominal", "pessimistic"]),
                     default="nominal", show_default=True,
                     help="pessimistic: judge each SLO on the GPU profile's pessimistic edge "
                          "(every efficiency scaled down by its stated spread; implies "
                          "--capacity).")(f)
    return click.option("--capacity/--no-capacity", "capacity", default=None,
                        help=_CAPACITY_HELP)(f)


@click.command()
@click.argument("sweep_dir", type=click.Path(file_okay=False, exists=True))
@click.option("--slo", multiple=True, metavar="NAME=SECONDS", help=_SLO_HELP +
              " [default: the sweep scenario's slo:]")
@click.option("--gpus", type=click.IntRange(min=1), default=None,
              help="GPUs available: the most load within them.")
@click.option("--rate", type=FiniteFloat(min=0, min_open=True), default=None,
              help="Requests/s to serve: the cheapest config that does.")
@click.option("--gpu-price", "gpu_price", multiple=True, metavar="GPU=USD", help=_PRICE_HELP)
@click.option("--runner-ups", type=click.IntRange(min=0), default=5, show_default=True)
@click.option("--max-quality-drop-pct", "max_quality_drop_pct",
              type=FiniteFloat(min=0), default=None, metavar="PCT",
              help="Only configs whose published quality drop is at most PCT % (configs whose "
                   "quality is unknown are excluded, and counted).")
@click.option("--json", "as_json", is_flag=True, help="Print the ranking as JSON.")
@_capacity_option
def recommend(sweep_dir: str, slo: tuple[str, ...], gpus: int | None, rate: float | None,
              gpu_price: tuple[str, ...], runner_ups: int, max_quality_drop_pct: float | None,
              as_json: bool, capacity: bool | None, confidence: str) -> None:
    """The best config of a finished sweep under an SLO, and why the runner-ups lost."""
    from simulator.sweep.cost import gpu_prices
    from simulator.sweep.quality_gate import UNKNOWN_REASON
    from simulator.sweep.recommend import format_recommendation, margin_notes, why_lost
    from simulator.sweep.recommend import recommend as rank
    from simulator.validation.accuracy import load_accuracy

    prices = gpu_prices(gpu_price)
    path, axes, rows = _sweep_rows(sweep_dir, prices)
    targets = _targets(path, rows, slo)
    if not targets:
        raise InputError("recommend: give at least one --slo (e.g. --slo ttft_p99_s=2); the "
                         "sweep's scenario has no slo: either")
    caps = _capacities(path, rows, targets, capacity, rate is not None or gpus is not None,
                       confidence)
    rec = rank(rows, targets, sweep_dir=path, gpus=gpus, rate=rate, prices=prices,
               max_quality_drop_pct=max_quality_drop_pct, capacities=caps,
               pessimistic=confidence == "pessimistic")
    accuracy = load_accuracy()
    if as_json:
        w = rec.winner
        data = {
            "goal": rec.mode, "load": rec.load, "slo": rec.targets, "priced": rec.priced,
            "ranked": [{"point_id": c.row.get("point_id"),
                        "values": {a: c.row.get(a) for a in axes},
                        "copies": c.copies, "gpus_per_copy": c.gpus,
                        "requests_per_s_per_copy": c.requests_per_s,
                        "capacity": None if c.capacity is None else c.capacity.to_dict(),
                        "usd_per_hour": c.usd_per_hour,
                        "costs": c.costs(rec.load if rec.mode == "rate" else None),
                        "quality_delta_pct": c.row.get("quality.delta_pct"),
                        "quality_basis": c.row.get("quality.basis"),
                        "why_lost": None if w is None or c is w else why_lost(c, w, rec)}
                       for c in rec.ranked[: runner_ups + 1]],
            "failing": len(rec.failing),
            "max_quality_drop_pct": max_quality_drop_pct,
            "excluded_quality_unknown": sum(
                UNKNOWN_REASON in why for _, why in rec.failing),
            "confidence": confidence,
            "accuracy": accuracy.line(),
            "margin_notes": margin_notes(rec, accuracy),
        }
        click.echo(json.dumps(data, indent=2))
        return
    for line in format_recommendation(rec, axes, path, runner_ups, accuracy):
        click.echo(line)


@click.command("export")
@click.argument("sweep_dir", type=click.Path(file_okay=False, exists=True))
@click.option("--top", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--engine", type=click.Choice(["vllm", "sglang", "trtllm"]), default="vllm",
              show_default=True)
@click.option("--slo", multiple=True, metavar="NAME=SECONDS",
              help=_SLO_HELP + " Ranks like recommend; without one (and no slo: in the "
                               "scenario) the frontier points by throughput per GPU.")
@click.option("--gpus", type=click.IntRange(min=1), default=None)
@click.option("--rate", type=FiniteFloat(min=0, min_open=True), default=None)
@click.option("--gpu-price", "gpu_price", multiple=True, metavar="GPU=USD", help=_PRICE_HELP)
@click.option("--out", "out_file", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write a shell script instead of printing.")
@_capacity_option
def export_cmd(sweep_dir: str, top: int, engine: str, slo: tuple[str, ...], gpus: int | None,
               rate: float | None, gpu_price: tuple[str, ...], out_file: str | None,
               capacity: bool | None, confidence: str) -> None:
    """The K best configs as engine launch commands plus matching `vllm bench serve` loads."""
    from simulator.sweep.cost import gpu_prices
    from simulator.sweep.export_script import export_script
    from simulator.sweep.frontier import DEFAULT_Y, frontier_rows
    from simulator.sweep.recommend import recommend as rank
    from simulator.sweep.table import number

    prices = gpu_prices(gpu_price)
    path, axes, rows = _sweep_rows(sweep_dir, prices)
    targets = _targets(path, rows, slo)
    copies: dict[str, int] = {}
    if targets:
        caps = _capacities(path, rows, targets, capacity, rate is not None or gpus is not None,
                           confidence)
        rec = rank(rows, targets, sweep_dir=path, gpus=gpus, rate=rate, prices=prices,
                   capacities=caps)
        chosen = [c.row for c in rec.ranked[:top]]
        copies = {str(c.row["point_id"]): c.copies for c in rec.ranked[:top]}
        how = "ranked like `frontier recommend` within SLO " + ", ".join(
            f"{k} <= {v:g} s" for k, v in targets.items())
    else:
        front = frontier_rows(rows)
        front.sort(key=lambda r: -(number(r, DEFAULT_Y.column) or 0.0))
        chosen = front[:top]
        how = "frontier points by output tokens/s per GPU"
    if not chosen:
        why = "no point meets the SLO" if targets else "no successful point"
        raise InputError(f"{sweep_dir}: no config to export ({why})")
    text = export_script(path, chosen, axes, engine, how, copies, rate)
    if out_file is not None:
        from simulator.safeio import refuse_same_file, write_output

        refuse_same_file(out_file, [], "--out")
        write_output(out_file, text, executable=True)
        click.echo(f"wrote {out_file}")
    else:
        click.echo(text, nl=False)


@click.command()
@click.argument("target")
@click.option("--out", "out_file", type=click.Path(dir_okay=False, writable=True), default=None,
              help="HTML file [default: SWEEP_DIR/report.html, or SCENARIO.html in the current "
                   "folder: a shipped scenario's folder is never written unless named here].")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE",
              help="Scenario overrides (single-scenario reports).")
@click.option("--x", "x_axis", default=None, help=_AXIS_HELP)
@click.option("--y", "y_axis", default=None, help=_AXIS_HELP)
@click.option("--color-by", default=None, help="Swept key that colours the split frontier plot.")
@click.option("--skip-bad-rows", is_flag=True,
              help="Single-scenario reports: drop and count bad trace rows instead of refusing.")
@click.option("--svg", "svg_file", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Sweep reports: also write the frontier plot as a static SVG here.")
def report(target: str, out_file: str | None, overrides: tuple[str, ...], x_axis: str | None,
           y_axis: str | None, color_by: str | None, skip_bad_rows: bool,
           svg_file: str | None) -> None:
    """HTML report (opens offline) of a sweep folder, or of one scenario's simulation (a
    SCENARIO.yaml or a shipped scenario's name)."""
    from simulator.inputs.shipped import resolve_scenario

    path = resolve_scenario(target)
    if not path.exists():
        raise InputError(f"report {target!r}: no such sweep folder, scenario file or shipped "
                         "scenario (see `frontier scenarios`)")
    if out_file is not None:  # an empty name, or the scenario itself, would be replaced
        from simulator.safeio import refuse_same_file

        refuse_same_file(out_file, [path], "--out")
    if path.is_dir():
        from simulator.report import write_sweep_report

        html = Path(out_file) if out_file else path / "report.html"
        write_sweep_report(path, html, color_by=color_by, **_axes(x_axis, y_axis))
        if svg_file is not None:
            _write_svg(path, Path(svg_file), _axes(x_axis, y_axis))
    else:
        if svg_file is not None:
            raise InputError("--svg draws a sweep's frontier: give a sweep folder")
        import yaml

        from simulator.report import write_scenario_report
        from simulator.yamlsafe import safe_load_bounded

        try:
            head = safe_load_bounded(path.read_text())
        except (OSError, UnicodeDecodeError, RecursionError, yaml.YAMLError):
            head = None
        if isinstance(head, dict) and "sweep" in head:
            raise InputError(f"{path} is a sweep file: run `frontier sweep {path} --out DIR`, "
                             "then `frontier report DIR`")
        html = Path(out_file) if out_file else Path.cwd() / f"{path.stem}.html"
        write_scenario_report(path, html, overrides, skip_bad_rows)
    click.echo(f"wrote {html}")


def _write_svg(sweep_dir: Path, svg: Path, axes: dict[str, Any]) -> None:
    from simulator.report.svg_plot import frontier_svg
    from simulator.report.sweep_report import load_sweep_dir
    from simulator.sweep.frontier import DEFAULT_X, DEFAULT_Y
    from simulator.sweep.store import write_atomic

    _, rows, manifest = load_sweep_dir(sweep_dir)
    name = Path(str(manifest.get("source", sweep_dir))).stem
    write_atomic(svg, frontier_svg(rows, list(manifest["axes"]), axes.get("x", DEFAULT_X),
                                   axes.get("y", DEFAULT_Y), f"Frontier: {name}"))
    click.echo(f"wrote {svg}")


@click.command("bench-capacity")
@click.option("--sweep", "sweep_name", default="sweeps/capacity-plan-llama-3.3-70b",
              show_default=True, help="A sweep file or shipped sweep name with an slo:.")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Search only the first N configs.")
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True)
def bench_capacity(sweep_name: str, limit: int | None, repeat: int, workers: int) -> None:
    """Benchmark capacity by search: configs searched per second, wall and CPU medians."""
    from simulator.bench.capacity import run_capacity_bench

    for line in run_capacity_bench(sweep_name, limit, repeat, workers):
        click.echo(line)
        sys.stdout.flush()


@click.command("bench-sweep")
@click.option("--points", type=click.IntRange(min=1), default=1000, show_default=True)
@click.option("--requests", "num_requests", type=click.IntRange(min=1), default=1000,
              show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--screen", is_flag=True,
              help="Run the grid with the closed-form screen, then without it: share "
                   "screened out, speed-up, and whether the frontiers agree.")
@click.option("--screen-only", is_flag=True,
              help="With --screen: time the screen alone (expansion, estimates, plan), "
                   "simulating nothing (e.g. --points 10000).")
def bench_sweep(points: int, num_requests: int, workers: int, screen: bool,
                screen_only: bool) -> None:
    """Benchmark a whole sweep: points simulated per second on N worker processes."""
    from simulator.bench.sweep import run_sweep_bench

    if screen_only and not screen:
        raise InputError("--screen-only needs --screen")
    if screen:
        from simulator.bench.screen import run_screen_bench

        lines = run_screen_bench(points, num_requests, workers, screen_only)
    else:
        lines = run_sweep_bench(points, num_requests, workers)
    for line in lines:
        click.echo(line)
        sys.stdout.flush()
