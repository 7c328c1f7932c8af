"""Score many mapped runs (in worker processes when asked) and summarise the errors per
(GPU, engine, mode) group and overall: runs simulated and refused, and per metric the median
and p90 of |error| and the median signed error."""

from __future__ import annotations

import hashlib
import json
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from simulator.measured.ordering import pair_ordering, points_of
from simulator.measured.predict import FAILED, record_head, score
from simulator.measured.scenario import Mapped, layout_in_doubt
from simulator.progress import Progress
from simulator.sweep.runners import run_items_local, run_items_ray
from simulator.sweep.store import Record, ResultStore, make_record

if TYPE_CHECKING:
    from simulator.calibration.applied import Applied, GpuValue


ScoreItem = tuple[Mapped, str, tuple[Any, ...], bool]  # what predict.score takes
Keyed = tuple[str, ScoreItem]


def score_all(mapped: Sequence[Mapped], method: str, workers: int = 1,
              progress: Progress | None = None,
              gpu_values: Sequence[GpuValue] = (),
              steady: bool = True, store: ResultStore | None = None,
              backend: str = "local", ray_address: str | None = None
              ) -> list[dict[str, Any]]:
    """Each run's record, in input order; `workers` > 1 spreads them over processes (the
    sweep's runners: local processes, or Ray tasks with `backend` "ray"); every run on the
    calibrated profiles `gpu_values` describe (a calibration's); `steady`: long closed loops
    stop once their rounds repeat (measured/steady.py), else run whole. With a `store`, each
    record is kept as it finishes, and runs it already holds (scored or refused, not failed)
    are taken from it instead of scored again: an interrupted scoring resumes."""
    items = [(m, method, tuple(gpu_values), steady) for m in mapped]
    keys = [run_key(item) for item in items]
    kept = {} if store is None else {
        k: r["result"] for k, r in store.records().items()
        if r["point_status"] != "error" and r["result"] is not None}
    results: dict[str, dict[str, Any]] = {k: kept[k] for k in keys if k in kept}
    if progress is not None:
        for _ in results:
            progress.step()
    todo = list({k: (k, item) for k, item in zip(keys, items, strict=True)
                 if k not in results}.values())

    def finished(done: tuple[str, dict[str, Any]]) -> None:
        key, rec = done
        results[key] = rec
        if store is not None:
            store.append(_stored(key, rec))
        if progress is not None:
            progress.step()

    if backend == "ray" and todo:
        run_items_ray(todo, workers, finished, ray_address, _score_keyed, _crashed)
    elif workers > 1 and len(todo) > 1:
        run_items_local(todo, workers, finished, _score_keyed, _crashed)
    else:
        for job in todo:
            finished(_score_keyed(job))
    return [results[k] for k in keys]


def run_key(item: ScoreItem) -> str:
    """What a stored record is found by: the run (its source, row and figures), its scenario
    and how it is scored (method, calibrated GPU values, early stop)."""
    m, method, gpu_values, steady = item
    r = m.run
    blob = json.dumps([r.run_id, r.source, r.row, dict(r.measured), m.scenario, method,
                       [repr(v) for v in gpu_values], steady], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _score_keyed(job: Keyed) -> tuple[str, dict[str, Any]]:
    return job[0], score(job[1])


def _crashed(job: Keyed, exc: BaseException) -> tuple[str, dict[str, Any]]:
    """The record of a run whose worker died or whose result could not come back: refused as
    failed (kept in a store as an error, so a resumed scoring tries it again)."""
    return job[0], {**record_head(job[1][0]), "status": "refused", "reason": FAILED,
                    "detail": f"{type(exc).__name__}: {exc}".splitlines()[0]}


def _stored(key: str, rec: dict[str, Any]) -> Record:
    """A scored run as the sweep store keeps a point: ok, dropped (refused by the model, which
    a rerun would refuse again) or error (failed: tried again on resume)."""
    if rec["status"] == "scored":
        return make_record(key, {"id": rec["id"]}, "ok", result=rec)
    status = "error" if rec.get("reason") == FAILED else "dropped"
    return make_record(key, {"id": rec["id"]}, status, result=rec, reason=rec.get("reason"),
                       error=rec.get("detail"))


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
                steady: bool = True, store: ResultStore | None = None,
                backend: str = "local", ray_address: str | None = None
                ) -> list[dict[str, Any]]:
    """score_all of the runs as a calibration overlay (`applied`, calibration/applied.py)
    gives them: its host costs in each scenario, its GPU profiles in each run; None: the
    shipped values. The one rule `validate --calibration` and `calibrate --confirm` share."""
    runs: Sequence[Mapped] = mapped
    gpu_values: Sequence[GpuValue] = ()
    if applied is not None:
        runs, gpu_values = calibrated_runs(mapped, applied.host_costs), applied.gpu_values
    return score_all(runs, method, workers, progress, gpu_values, steady, store, backend,
                     ray_address)


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
