"""Score many mapped runs (in worker processes when asked) and summarise the errors per
(GPU, engine, mode) group and overall: runs simulated and refused, and per metric the median
and p90 of |error| and the median signed error."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from simulator.measured.ordering import pair_ordering, points_of
from simulator.measured.predict import score
from simulator.measured.scenario import Mapped, layout_in_doubt
from simulator.progress import Progress

if TYPE_CHECKING:
    from simulator.calibration.applied import Applied, GpuValue


def score_all(mapped: Sequence[Mapped], method: str, workers: int = 1,
              progress: Progress | None = None,
              gpu_values: Sequence[GpuValue] = (),
              steady: bool = True) -> list[dict[str, Any]]:
    """Each run's record, in input order; `workers` > 1 spreads them over processes; every
    run on the calibrated profiles `gpu_values` describe (a calibration's); `steady`: long
    closed loops stop once their rounds repeat (measured/steady.py), else run whole."""
    items = [(m, method, tuple(gpu_values), steady) for m in mapped]
    out: list[dict[str, Any]] = []
    results: Iterable[dict[str, Any]]
    pool = ProcessPoolExecutor(workers) if workers > 1 and len(items) > 1 else None
    try:
        results = pool.map(score, items, chunksize=4) if pool is not None else map(score, items)
        for rec in results:
            out.append(rec)
            if progress is not None:
                progress.step()
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return out


def calibrated_runs(mapped: Sequence[Mapped], host_costs: Mapping[str, Mapping[str, float]]
                    ) -> list[Mapped]:
    """The runs with a calibration's host costs in each scenario that sets none of its own
    (calibration/host_costs.py, the rule simulate and sweep apply)."""
    from simulator.calibration.host_costs import calibrated

    def one(m: Mapped) -> Mapped:
        if m.scenario is None or not host_costs:
            return m
        try:
            return replace(m, scenario=calibrated(m.scenario, host_costs))
        except ValueError:  # a scenario the schema refuses: scoring lists it as refused
            return m

    return [one(m) for m in mapped]


def score_under(mapped: Sequence[Mapped], applied: Applied | None, method: str,
                workers: int = 1, progress: Progress | None = None,
                steady: bool = True) -> list[dict[str, Any]]:
    """score_all of the runs as a calibration overlay (`applied`, calibration/applied.py)
    gives them: its host costs in each scenario, its GPU profiles in each run; None: the
    shipped values. The one rule `validate --calibration` and `calibrate --confirm` share."""
    if applied is None:
        return score_all(mapped, method, workers, progress, steady=steady)
    return score_all(calibrated_runs(mapped, applied.host_costs), method, workers, progress,
                     applied.gpu_values, steady)


def error_stats(errors: Sequence[float]) -> dict[str, float]:
    """n, median and p90 of |error| (nearest rank), and the median signed error."""
    a = sorted(abs(e) for e in errors)
    p90 = a[min(len(a) - 1, round(0.9 * (len(a) - 1)))]
    return {"n": len(a), "median_abs_error": statistics.median(a), "p90_abs_error": p90,
            "median_signed_error": statistics.median(errors)}


def _block(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    scored = [r for r in records if r["status"] == "scored"]
    metrics: dict[str, list[float]] = {}
    for r in scored:
        for k, e in r["errors"].items():
            metrics.setdefault(k, []).append(e)
    return {
        "runs": len(records),
        "simulated": len(scored),
        "refused": len(records) - len(scored),
        "metrics": {k: error_stats(v) for k, v in sorted(metrics.items(), key=_metric_order)},
    }


def _metric_order(item: tuple[str, Any]) -> tuple[int, str]:
    head = item[0].split(".")[0]
    order = ("ttft", "tpot", "itl", "e2e")
    return (order.index(head) if head in order else len(order), item[0])


def summarise(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Groups (GPU, engine, mode), overall, refusals by reason, and declared defaults."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(f"{r['gpu']} {r['engine']} {r['mode']}", []).append(r)
    recorded = [r for r in records if not layout_in_doubt(r["defaults"])]
    return {
        "groups": {g: _block(rs) for g, rs in sorted(groups.items())},
        "overall": _block(records),
        # The runs whose layout the file records in full: without the P/D rows that lack
        # worker counts (their per-worker load is a guess, so their errors are the guess's).
        "overall_layout_recorded": _block(recorded),
        # Config pairs ordered as measured, within (model, GPU, engine, mode, lengths), over
        # the layout-recorded runs (measured/ordering.py).
        "ordering": pair_ordering(points_of(recorded)),
        "refused": dict(Counter(r["reason"] for r in records
                                if r["status"] == "refused").most_common()),
        "defaults": dict(Counter(d for r in records for d in r["defaults"]).most_common()),
    }
