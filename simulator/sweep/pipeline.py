"""`frontier sweep`: expand the grid, run the points into the store, then write the tables.

    DIR/store.jsonl        durable record of every finished point (append-only, see store.py)
    DIR/points/<key>.yaml  the full scenario of every point (`frontier simulate` reruns it)
    DIR/results.csv        one row per point (table.py), written atomically at the end
    DIR/frontier.csv       the Pareto-optimal rows (frontier.py)
    DIR/sweep.json         what the other commands need: axes, drop counts, frontier axes

(`frontier sweep` then has the report layer draw DIR/report.html from these files.)
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from simulator.calibration.applied import Applied, GpuValue
from simulator.calibration.host_costs import calibrated
from simulator.errors import InputError
from simulator.hardware.profile import Hardware
from simulator.progress import Progress
from simulator.safeio import OutputError, make_folder, refuse_link, write_atomic
from simulator.sweep import screen as screen_mod
from simulator.sweep.frontier import DEFAULT_X, DEFAULT_Y, Axis, frontier_rows
from simulator.sweep.grid import Expansion, Point, SweepSpec, expand, load_sweep, point_key
from simulator.sweep.precheck import refused_value
from simulator.sweep.runners import (
    Evaluate,
    Task,
    evaluate_point,
    require_ray,
    run_local,
    run_ray,
)
from simulator.sweep.slo import slo_failures, slo_from_scenario
from simulator.sweep.store import (
    LOCK_NAME,
    STORE_NAME,
    Record,
    ResultStore,
    StoreExistsError,
    SweepBusyError,
)
from simulator.sweep.table import Row, build_rows, columns_of, write_csv

MANIFEST = "sweep.json"
# Every file and folder a sweep writes in its --out (report.html by the report layer).
OUTPUT_NAMES = (LOCK_NAME, STORE_NAME, "results.csv", "frontier.csv", MANIFEST, "report.html",
                "points")
_Dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@dataclass
class SweepOutcome:
    out_dir: Path
    grid_size: int
    runnable: int
    resumed: int  # points found finished in the store and skipped
    ran: int
    ok: int
    crashed: int
    refused: int = 0  # run, but refused by the engine (counted in `dropped`)
    dropped: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    frontier: list[Row] = field(default_factory=list)
    x: Axis = DEFAULT_X
    y: Axis = DEFAULT_Y
    written: list[str] = field(default_factory=list)
    store_notes: list[str] = field(default_factory=list)
    screened: Counter[str] = field(default_factory=Counter)  # --screen: reason -> points
    screen_s: float = 0.0  # wall time of the screen (estimates and the plan)
    frontier_slo: dict[str, float] = field(default_factory=dict)  # frontier within this SLO
    simulated_total: int = 0  # points of the grid simulated, this run and stored ones
    crashed_total: int = 0  # points of the grid whose record is a crash, this run and stored
    missing: int = 0  # points of the grid without any record (none, unless a bug lost one)

    def failure_line(self) -> str | None:
        """Why the sweep produced nothing (every point refused or crashed), else None."""
        if self.simulated_total or self.screened:
            return None
        return (f"no point of the sweep simulated ({self.refused} refused by the engine, "
                f"{self.crashed} crashed, {self.grid_size - self.runnable} dropped before "
                f"running); the reasons are above and in {self.out_dir / 'results.csv'}")

    def incomplete_line(self) -> str | None:
        """Why the sweep is not complete (points crashed or have no row), else None."""
        if not (self.crashed_total or self.missing):
            return None
        missing = f", {self.missing} without a row" if self.missing else ""
        return (f"{self.crashed_total} point(s) crashed{missing} (see point_error in "
                f"{self.out_dir / 'results.csv'}); rerun with --resume to retry them")

    def screen_lines(self) -> list[str]:
        if not self.screened and not self.screen_s:
            return []
        n = sum(self.screened.values())
        lines = [f"screen: {n} of {self.runnable} points screened out by the closed-form "
                 f"estimate in {self.screen_s:.1f} s (frontier estimate), never simulated"]
        for reason, k in self.screened.most_common():
            lines.append(f"{k} point{'s' if k != 1 else ''} screened out: {reason}")
        return lines

    def summary_lines(self) -> list[str]:
        before = self.grid_size - self.runnable
        lines = [
            f"grid: {self.grid_size} points; {before} dropped before running, "
            f"{self.runnable} to run"
            + (f" ({self.resumed} already in the store, skipped)" if self.resumed else "")
        ]
        lines.extend(self.store_notes)
        lines.extend(self.screen_lines())
        for reason, n in self.dropped.most_common():
            lines.append(f"{n} point{'s' if n != 1 else ''} dropped: {reason}")
            if reason in self.examples:
                lines.append(f"  e.g. {self.examples[reason]}")
        refused = f", {self.refused} refused by the engine (counted above)" if self.refused else ""
        retry = " (see point_error in results.csv; --resume retries them)" if self.crashed else ""
        lines.append(f"{self.ran} points run now: {self.ok} simulated{refused}, "
                     f"{self.crashed} crashed{retry}")
        within = ""
        if self.frontier_slo:
            within = ", among points within the SLO " + ", ".join(
                f"{k} <= {v:g} s" for k, v in self.frontier_slo.items())
        lines.append(f"frontier: {len(self.frontier)} points ({self.y.label} against "
                     f"{self.x.label}{within})")
        lines.append("wrote " + ", ".join(self.written))
        return lines


def write_point_files(points_dir: Path, points: list[Point]) -> None:
    """points/<key>.yaml for every point not yet written (the content never changes); a link
    in the place of the folder or of a point file is refused, never written through."""
    refuse_link(points_dir)
    make_folder(points_dir)
    for p in points:
        path = points_dir / f"{p.key}.yaml"
        refuse_link(path)
        if not path.is_file() or path.stat().st_size == 0:
            text = yaml.dump(p.scenario, Dumper=_Dumper, sort_keys=False)
            write_atomic(path, f"# sweep point {p.key}: frontier simulate {path.name}\n{text}",
                         durable=False)  # renamed into place whole; rewritten if found empty


def _merge_drops(expansion: Expansion, points: list[Point],
                 records: Mapping[str, Record]) -> tuple[Counter[str], dict[str, str]]:
    dropped = Counter(expansion.dropped)
    examples = dict(expansion.examples)
    for p in points:
        rec = records.get(p.key)
        if rec is not None and rec["point_status"] == "dropped":
            reason = rec.get("reason") or "refused by the engine"
            dropped[reason] += 1
            if reason not in examples and rec.get("error"):
                examples[reason] = str(rec["error"])
    return dropped, examples


def run_sweep(
    source: str | Path | Mapping[str, Any] | SweepSpec,
    out_dir: str | Path,
    *,
    backend: str = "local",
    workers: int | None = None,
    resume: bool = False,
    fresh: bool = False,
    ray_address: str | None = None,
    prices: Mapping[str, float] | None = None,
    x: Axis = DEFAULT_X,
    y: Axis = DEFAULT_Y,
    progress_stream: IO[str] | None = None,
    evaluate: Evaluate = evaluate_point,
    skip_bad_rows: bool = False,
    screen: bool = False,
    screen_slo: bool = True,
    screen_only: bool = False,
    calibration: Applied | None = None,
) -> SweepOutcome:
    """Run a sweep file into `out_dir` and write its outputs (module docstring). `screen`:
    estimate every point first and simulate only those the estimate cannot rule out
    (sweep/screen.py); `screen_slo` lets it rule out points that certainly miss the sweep's
    SLO (the frontier is then the one among points within the SLO); `screen_only` (for the
    benchmark) stops after the screen. `calibration` (an overlay's, calibration/applied.py):
    its host costs go to every point's engine that sets no overhead of its own, its calibrated
    GPU profiles stand in for the shipped ones in every run."""
    if not str(out_dir).strip():  # Path("") is the current folder: never meant
        raise InputError("--out '': give a folder for the sweep's outputs")
    if backend not in ("local", "ray"):
        raise InputError(f"--backend {backend!r}: choose local or ray")
    require_ray(backend)
    spec = source if isinstance(source, SweepSpec) else load_sweep(source)
    expansion = expand(spec)
    if not expansion.points:
        reasons = "; ".join(f"{n} {r}" for r, n in expansion.dropped.most_common(3))
        raise InputError(f"{spec.source}: no point left to run of {expansion.total} ({reasons})")
    refused = refused_value(spec, expansion.points)
    if refused is not None:
        raise InputError(refused)
    if calibration is not None:
        expansion.points = [_calibrated(p, calibration) for p in expansion.points]
    out = Path(out_dir)
    workers = workers or _cpu_count()
    try:
        opts = _Screen(screen, screen_slo, screen_only)
        profiles = dict(calibration.profiles) if calibration and calibration.profiles else None
        return _run_into(out, spec, expansion, backend, workers, resume, fresh, ray_address,
                         prices or {}, x, y, progress_stream, evaluate, skip_bad_rows, opts,
                         profiles, calibration.gpu_values if calibration else ())
    except (SweepBusyError, StoreExistsError):
        raise
    except OutputError as exc:  # a full disk, a read-only folder: the stored points stay
        if exc.link:
            raise
        raise InputError(
            f"{out}: cannot write the sweep ({exc.reason}: {exc.path}); every point "
            f"finished so far is kept in {STORE_NAME}: fix that and rerun with --resume"
        ) from None
    except OSError as exc:
        what = exc.strerror or type(exc).__name__
        where = f" {exc.filename}" if exc.filename else ""
        raise InputError(
            f"{out}: cannot write the sweep ({what}{':' if where else ''}{where}); every point "
            f"finished so far is kept in {STORE_NAME}: fix that and rerun with --resume"
        ) from None


def _calibrated(point: Point, calibration: Applied) -> Point:
    """The point with a calibration's host costs in its scenario; its key changes with them
    and with the GPU values the overlay sets (which live beside the scenario, in the task), so
    a store never mixes calibrated and uncalibrated results of one point."""
    scenario = calibrated(point.scenario, calibration.host_costs)
    gpu = [list(v) for v in calibration.gpu_values]
    key = point_key({**scenario, "calibrated_gpu_values": gpu} if gpu else scenario)
    return Point(key, point.values, scenario)


@dataclass(frozen=True)
class _Screen:
    on: bool = False
    slo: bool = True
    only: bool = False


def _run_into(out: Path, spec: SweepSpec, expansion: Expansion, backend: str, workers: int,
              resume: bool, fresh: bool, ray_address: str | None, prices: Mapping[str, float],
              x: Axis, y: Axis, progress_stream: IO[str] | None, evaluate: Evaluate,
              skip_bad_rows: bool, opts: _Screen = _Screen(),
              profiles: Mapping[str, Hardware] | None = None,
              gpu_values: Sequence[GpuValue] = ()) -> SweepOutcome:
    """Run the points still to do into `out` under its lock, then write the outputs
    (`profiles`: calibrated GPU profiles every run uses in place of the shipped ones, made
    from `gpu_values`, which sweep.json records for the commands that rerun its points)."""
    make_folder(out)
    for name in OUTPUT_NAMES:  # refused before any point runs, not after the last one
        refuse_link(out / name)
    with ResultStore(out / STORE_NAME, resume=resume, fresh=fresh) as store:
        if not fresh:
            check_same_sweep(out, spec)
        write_atomic(out / MANIFEST,
                     json.dumps(manifest_of(spec, expansion, None, gpu_values), indent=2) + "\n")
        notes = []
        if store.torn_bytes:
            notes.append(f"store: ignored a torn last line ({store.torn_bytes} bytes) from an "
                         f"interrupted run")
        if store.bad_lines:
            notes.append(f"store: skipped {store.bad_lines} unreadable line(s)")
        stored = store.records()
        # A point screened out before is run when this sweep does not screen.
        finished = {k for k in store.finished()
                    if opts.on or stored[k]["point_status"] != screen_mod.STATUS}
        todo = [p for p in expansion.points if p.key not in finished]
        write_point_files(out / "points", expansion.points)
        tasks = [Task(p.key, p.values, p.scenario, skip_bad_rows, profiles) for p in todo]
        targets = slo_from_scenario(spec.base) if opts.on and opts.slo else {}
        screen_s = 0.0
        if opts.on:
            t0 = time.perf_counter()
            tasks = _screen(store, tasks, workers, x, y, targets)
            screen_s = time.perf_counter() - t0
            if opts.only:
                tasks = []
        progress = Progress(len(tasks), progress_stream)
        counts: Counter[str] = Counter()

        def on_record(rec: Record) -> None:
            store.append(rec)
            counts[rec["point_status"]] += 1
            progress.step()

        try:
            if backend == "ray":
                run_ray(tasks, workers, on_record, ray_address, evaluate)
            else:
                run_local(tasks, workers, on_record, evaluate)
        finally:
            progress.close()
        records = store.records()
        outcome = SweepOutcome(out, expansion.total, len(expansion.points),
                               len(expansion.points) - len(todo), len(tasks), counts["ok"],
                               counts["error"], counts["dropped"], x=x, y=y, store_notes=notes,
                               screen_s=screen_s, frontier_slo=targets)
        finalize(out, spec, expansion, records, prices, outcome, gpu_values)  # under the lock
    return outcome


def finalize(out: Path, spec: SweepSpec, expansion: Expansion, records: Mapping[str, Record],
             prices: Mapping[str, float], outcome: SweepOutcome,
             gpu_values: Sequence[GpuValue] = ()) -> None:
    """Compact the store into results.csv and frontier.csv (atomically); the report layer,
    above this one, draws report.html from them (`frontier sweep` asks it to)."""
    points = expansion.points
    rows = build_rows(points, records, prices)
    columns = columns_of(rows, spec.axes)
    write_csv(out / "results.csv", rows, columns)
    eligible = rows
    if outcome.frontier_slo:  # the screen ruled out SLO misses: the frontier within the SLO
        eligible = [r for r in rows if not slo_failures(r, outcome.frontier_slo)]
    front = frontier_rows(eligible, outcome.x, outcome.y)
    write_csv(out / "frontier.csv", front, columns)
    outcome.frontier = front
    outcome.simulated_total = sum(r.get("point_status") == "ok" for r in rows)
    outcome.crashed_total = sum(r.get("point_status") == "error" for r in rows)
    outcome.missing = len(points) - len(rows)
    outcome.dropped, outcome.examples = _merge_drops(expansion, points, records)
    outcome.screened = Counter(str(r.get("reason")) for r in records.values()
                               if r["point_status"] == screen_mod.STATUS)
    manifest = manifest_of(spec, expansion, outcome, gpu_values)
    write_atomic(out / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    outcome.written = [str(out / "results.csv"), str(out / "frontier.csv")]
    outcome.written.append(f"{out / 'points'}/ ({len(points)} scenarios)")


def manifest_of(spec: SweepSpec, expansion: Expansion, outcome: SweepOutcome | None = None,
                gpu_values: Sequence[GpuValue] = ()) -> dict[str, Any]:
    """sweep.json: what the other commands need. Written when a sweep starts (so a later
    --resume knows which sweep file the folder holds) and again, whole, when it ends; with
    a calibration's GPU values, `calibrated_gpu_values` ([GPU, key, value, shipped], ...)
    so recommend's capacity search reruns its points on the same profiles."""
    x = outcome.x if outcome else DEFAULT_X
    y = outcome.y if outcome else DEFAULT_Y
    dropped = outcome.dropped if outcome else expansion.dropped
    return {
        "source": spec.source,
        "source_path": _source_path(spec),
        "axes": spec.axes,
        "grid_size": expansion.total,
        "points": len(expansion.points),
        "dropped": dict(dropped),
        "drop_examples": outcome.examples if outcome else dict(expansion.examples),
        "screened": dict(outcome.screened) if outcome else {},
        "frontier_within_slo": dict(outcome.frontier_slo) if outcome else {},
        "x": {"column": x.column, "maximize": x.maximize, "label": x.label},
        "y": {"column": y.column, "maximize": y.maximize, "label": y.label},
        **({"calibrated_gpu_values": [list(v) for v in gpu_values]} if gpu_values else {}),
    }


def _source_path(spec: SweepSpec) -> str | None:
    """The sweep file's absolute path (None for a sweep given as a mapping)."""
    return str(Path(spec.source).resolve()) if spec.base_dir is not None else None


def check_same_sweep(out: Path, spec: SweepSpec) -> None:
    """Refuse to run one sweep file into a folder that holds another's points: its results.csv
    would be replaced by the new grid's and the old points mixed into the store."""
    try:
        held = json.loads((out / MANIFEST).read_text()).get("source_path")
    except (OSError, ValueError, AttributeError, RecursionError):
        return  # no manifest yet (or not ours): nothing to compare
    new = _source_path(spec)
    if isinstance(held, str) and new is not None and held != new:
        raise InputError(f"{out}: holds the sweep of {held}; running {new} into it would mix "
                         f"two sweeps (choose another --out, or --fresh to discard the old one)")


def _screen(store: ResultStore, tasks: list[Task], workers: int, x: Axis, y: Axis,
            targets: Mapping[str, float]) -> list[Task]:
    """Estimate every task, store the points the screen rules out, return the rest."""
    estimates: dict[str, Record] = {}

    def keep(rec: Record) -> None:
        estimates[rec["key"]] = rec

    if workers > 1 and len(tasks) > 1:
        run_local(tasks, workers, keep, screen_mod.estimate_point)
    else:
        for t in tasks:
            keep(screen_mod.estimate_point(t))
    plan = screen_mod.plan_screen([(t.key, t.scenario) for t in tasks], estimates, x, y,
                                  targets)
    store.append_many(
        screen_mod.screened_record(t.key, t.values, plan.dropped[t.key],
                                   (estimates[t.key].get("result") or {}).get("estimate"))
        for t in tasks if t.key in plan.dropped)
    return [t for t in tasks if t.key not in plan.dropped]


def _cpu_count() -> int:
    import os

    return os.cpu_count() or 1
