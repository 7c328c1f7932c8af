"""`frontier calibrate FILE... --out CALIBRATION.yaml`: fit the engine styles' host costs
(cpu_step_us, cpu_per_seq_us, request_latency_us; with `--fit comm` the all-reduce per-peer
latency, with `--fit moe` the FP8 MoE path's fixed latency) and, with `--fit host,gpu`, the GPU
profiles' GEMM streaming fractions to measured runs through the closed-form estimate, report
the held-out errors of a grouped k-fold cross-validation before and after, and write the
overlay that `simulate --calibration` and `estimate --calibration` apply."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import numpy as np

from simulator.calibration.crossval import ErrorStats
from simulator.errors import InputError
from simulator.units import table

if TYPE_CHECKING:
    from simulator.calibration.crossval import CrossValidation
    from simulator.calibration.fit import FitResult
    from simulator.measured.calibrate_runs import RunProblem


def _pct(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.1%}"


def _signed(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:+.1%}"


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False),
              help="Write the calibration overlay (YAML) here.")
@click.option("--format", "fmt", type=click.Choice(["silicon", "vllm", "aiperf", "sglang"]),
              default=None, help="The files' format (default: told from extension and keys).")
@click.option("--scenario", "scenario", type=click.Path(dir_okay=False), default=None,
              help="Scenario YAML giving model, hardware and deployment for files that do "
              "not record them (vllm, aiperf, sglang).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override a scenario key of every run (after mapping).")
@click.option("--fit", "fit_kinds", default="host,latency", show_default=True,
              metavar="KINDS",
              help="What to fit, comma-separated. host: each engine style's cpu_step_us and "
              "cpu_per_seq_us. latency: each engine style's request_latency_us (a delay per "
              "request on the way to the engine that holds no queue; TTFT sees it). burst: "
              "each engine style's closed_loop_burst_rounds, the rounds of a closed loop whose "
              "TTFT its start-up burst's queue sets (1-20; TTFT sees it). gpu: per "
              "GPU profile, the streaming fraction (gemm_classes.<class>.hbm_fraction) of "
              "each GEMM kernel class that at least 20 runs of 3 configurations run through, "
              "within [0.2, 0.95] of HBM peak; decode TPOT sees it. comm: each engine style's "
              "allreduce_latency_per_peer_us, what each GPU beyond two adds to a small "
              "all-reduce's latency with its kernels (0-10 us); decode TPOT sees it. moe: "
              "each engine style's moe_fp8_block_fixed_us, the fixed time per MoE layer its "
              "FP8 expert path adds to the GPU profile's grouped block (0-200 us); decode "
              "TPOT sees it. Host "
              "costs, latencies and burst rounds are fitted first, on every run; the others "
              "then fit only what they leave on TPOT. Example: --fit host,gpu.")
@click.option("--folds", type=click.IntRange(min=2), default=5, show_default=True,
              help="Cross-validation folds (grouped by configuration).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the fold assignment and of --sample.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Processes estimating runs during the fit (default: the CPU count).")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Use only the first N runs.")
@click.option("--sample", type=click.IntRange(min=1), default=None,
              help="Use N runs drawn at random (with --seed).")
@click.option("--max-concurrency", type=click.IntRange(min=1), default=None,
              help="Use only the closed-loop runs with at most N requests in flight (where "
              "little queue forms, so a fitted request latency does not absorb queueing the "
              "model misses).")
@click.option("--confirm", type=click.IntRange(min=0), default=30, show_default=True,
              help="Then score N of the runs used (drawn with --seed) with the simulation, on "
              "the shipped values and under the overlay: the fit iterates on the closed-form "
              "estimate, this says whether the simulation agrees. 0: skip.")
def calibrate(files: tuple[str, ...], out: str, fmt: str | None, scenario: str | None,
              sets: tuple[str, ...], fit_kinds: str, folds: int, seed: int,
              workers: int | None, limit: int | None, sample: int | None,
              max_concurrency: int | None, confirm: int) -> None:
    """Fit engine-style values (host costs, request latency, all-reduce per-peer latency) and
    GPU streaming factors, as --fit names them, to measured runs in FILES; write --out."""
    from simulator.calibration.build import build_overlay, make_header
    from simulator.calibration.overlay import write_overlay
    from simulator.cli.validate_measured import read_and_map
    from simulator.measured.calibrate_runs import build_problem
    from simulator.progress import Progress

    kinds = _fit_kinds(fit_kinds)
    target = Path(out)
    if not target.parent.is_dir():
        raise InputError(f"--out {out}: folder {target.parent} does not exist")
    start = time.perf_counter()
    paths = [Path(f) for f in files]
    read, runs, mapped = read_and_map(paths, fmt, scenario, sets, limit, sample, seed,
                                      max_concurrency)
    if not mapped:
        raise InputError(f"calibrate --max-concurrency {max_concurrency}: no closed-loop run "
                         f"of the {read} read has that few requests in flight")
    prep = Progress(len(mapped), label="calibrate: preparing", unit="runs")
    problem = build_problem(mapped, prep, kinds)
    prep.close()
    if not problem.params:
        raise InputError(f"calibrate --fit {fit_kinds}: nothing to fit: no engine style or GPU "
                         f"kernel class is run by enough of the runs used")
    fit_start = time.perf_counter()
    result, cv = _fit(problem, folds, seed, workers or os.cpu_count() or 1)
    fit_s = time.perf_counter() - fit_start
    rows_per_file = {str(p): 0 for p in paths}
    for m in problem.used:
        rows_per_file[m.run.source] = rows_per_file.get(m.run.source, 0) + 1
    header = make_header(list(rows_per_file.items()), problem.sources)
    overlay = build_overlay(result, header, problem.sources, cv)
    try:
        write_overlay(target, overlay)
    except OSError as exc:
        raise InputError(f"--out {out}: cannot write ({exc.strerror or exc})") from None

    lines = _report(read, len(runs), problem, result, cv, seed)
    if confirm:
        lines += _confirm(problem.used, str(target), confirm, seed, workers or os.cpu_count() or 1)
    lines.append(f"\nwrote {out} ({len(overlay.values)} values) in "
                 f"{time.perf_counter() - start:.1f} s (fit and cross-validation {fit_s:.1f} s)")
    click.echo("\n".join(lines))


def _confirm(used: list[Any], overlay: str, n: int, seed: int, workers: int) -> list[str]:
    """Median |error| of each metric over `n` of the runs used, simulated on the shipped values
    and under the overlay just written (in sample: the fit saw these runs)."""
    import random

    from simulator.cli.calibration_flag import calibration_applied
    from simulator.measured.scoring import error_stats, score_under
    from simulator.progress import Progress

    chosen = random.Random(seed).sample(used, min(n, len(used)))
    applied = calibration_applied(overlay)
    progress = Progress(2 * len(chosen), label="calibrate: confirming by simulation",
                        unit="runs")
    before = score_under(chosen, None, "simulate", workers, progress)
    after = score_under(chosen, applied, "simulate", workers, progress)
    progress.close()
    rows = []
    for metric in ("ttft.mean", "tpot.mean"):
        pairs = [(b["errors"][metric], a["errors"][metric]) for b, a in zip(before, after,
                                                                           strict=True)
                 if b["status"] == a["status"] == "scored" and metric in b["errors"]
                 and metric in a["errors"]]
        if not pairs:
            continue
        st_b, st_a = error_stats([b for b, _ in pairs]), error_stats([a for _, a in pairs])
        rows.append([metric, str(len(pairs)), _pct(st_b["median_abs_error"]),
                     _pct(st_a["median_abs_error"]), _signed(st_b["median_signed_error"]),
                     _signed(st_a["median_signed_error"])])
    return ["", f"confirmed by simulation on {len(chosen)} of the runs used (seed {seed}; in "
            "sample: the fit saw them): shipped values before, the overlay after",
            table(["metric", "n", "median |err| before", "after", "median err before",
                   "after"], rows)]


def _fit(problem: RunProblem, folds: int, seed: int,
         workers: int) -> tuple[FitResult, CrossValidation | None]:
    """The staged fit on every run, and its cross-validation where the runs span two
    configurations or more; estimates run on `workers` processes."""
    from simulator.calibration.crossval import cross_validate
    from simulator.calibration.stages import fit_stages
    from simulator.progress import Progress

    obs = problem.observations
    stages = problem.stages()

    def fitter(rows: np.ndarray) -> FitResult:
        return fit_stages(stages, obs, problem.predict, rows)

    configs = len(set(obs.configs))
    cv = None
    problem.runs.start_workers(workers)
    try:
        if configs >= 2:
            cv_progress = Progress(min(folds, configs), label="calibrate: cross-validating",
                                   unit="folds")
            cv = cross_validate(problem.params, obs, problem.predict, k=folds, seed=seed,
                                progress=cv_progress, fitter=fitter)
            cv_progress.close()
        print("calibrate: fitting on every run", file=sys.stderr, flush=True)
        return fitter(np.arange(len(obs))), cv
    finally:
        problem.runs.stop_workers()


def _fit_kinds(text: str) -> tuple[str, ...]:
    """The --fit list, in FIT_KINDS order; an unknown or empty one is one line, exit 2."""
    from simulator.measured.calibrate_runs import FIT_KINDS

    kinds = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in kinds if k not in FIT_KINDS]
    if bad or not kinds:
        raise InputError(f"--fit {text!r}: choose from {', '.join(FIT_KINDS)}, comma-separated "
                         f"(e.g. host,gpu)")
    return tuple(k for k in FIT_KINDS if k in kinds)


def _report(read: int, used: int, problem: RunProblem, result: FitResult,
            cv: CrossValidation | None, seed: int) -> list[str]:
    """The printed report: runs used and refused, the errors before and after (held out when
    the runs span two configurations or more, else in-sample and said so), the parameters."""
    obs = problem.observations
    refused = sum(problem.refused.values())
    lines = [f"runs read {read}, used {used}, scored {len(problem.used)}, refused "
             f"{refused}; {len(obs)} observations (mean TTFT and mean TPOT)"
             + (f", {problem.dropped_observations} dropped (no finite estimate at the shipped "
                "values)" if problem.dropped_observations else "")]
    if problem.refused:
        lines += ["", table(["refused because", "runs"],
                            [[k, str(v)] for k, v in problem.refused.most_common()])]
    header = ["group (GPU engine mode)", "metric", "n", "median |err| before", "after",
              "p90 |err| before", "after", "median err before", "after"]
    if cv is not None:
        rows = [_error_row("overall" if s.group is None else " ".join(s.group), s.metric,
                           s.before, s.after) for s in cv.summaries]
        lines += ["", f"held-out errors, {cv.k}-fold cross-validation grouped by configuration "
                  f"(seed {seed}): before = shipped values, after = fitted on the other folds",
                  table(header, rows)]
        lines += _ordering_lines(problem, cv)
    else:
        before = np.expm1(result.log_error_before)
        after = np.expm1(result.log_error_after)
        metrics = np.array(obs.metrics)
        rows = [_error_row("overall", m, ErrorStats.of(before[metrics == m]),
                           ErrorStats.of(after[metrics == m])) for m in sorted(set(obs.metrics))]
        lines += ["", "in-sample errors (the runs are of one configuration, so nothing can be "
                  "held out: these are the runs the values were fitted to, not a prediction)",
                  table(header, rows)]
    fitted = [[p.name, f"{p.value:.4g}", f"{p.prior:.4g}",
               "-" if p.std_error is None else f"{p.std_error:.2g}", str(p.rows),
               "at bound" if p.at_bound else ""]
              for p in result.parameters if p.identified]
    if fitted:
        lines += ["", table(["parameter fitted (host us, GPU fraction)", "value", "prior",
                             "std error", "rows", ""], fitted)]
    missing = result.not_identified()
    if missing:
        lines += ["", table(["not identified (left at prior)", "prior", "why"],
                            [[p.name, f"{p.prior:.4g}", p.reason or "?"] for p in missing])]
    return lines


def _ordering_lines(problem: RunProblem, cv: CrossValidation) -> list[str]:
    """Config pairs ordered as measured (measured/ordering.py), before and after, held out."""
    from simulator.measured.calibrate_runs import ordering_points
    from simulator.measured.ordering import pair_ordering

    before = pair_ordering(ordering_points(problem, cv.before))
    after = pair_ordering(ordering_points(problem, cv.after))
    rows = [[metric, str(b["groups"]), str(b["pairs"]), f"{b['ordered']:.1%}",
             f"{after[metric]['ordered']:.1%}", str(b["groups_at_target"]),
             str(after[metric]["groups_at_target"])]
            for metric, b in before.items() if b["pairs"]]
    if not rows:
        return []
    return ["", table(["config pairs ordered as measured (held out)", "groups", "pairs",
                       "before", "after", "groups at 90 % before", "after"], rows)]


def _error_row(name: str, metric: str, b: ErrorStats, a: ErrorStats) -> list[str]:
    return [name, metric.replace("_s", ".mean"), str(b.count + b.failed), _pct(b.median_abs),
            _pct(a.median_abs), _pct(b.p90_abs), _pct(a.p90_abs), _signed(b.median_signed),
            _signed(a.median_signed)]
