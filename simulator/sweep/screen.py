"""`frontier sweep --screen`: estimate every point in closed form, drop the points that are
certainly dominated or certainly miss the SLO, simulate the rest.

"Certainly" is the estimate's measured error band (`screen_bands.yaml`: the range of
simulated / estimated over the shipped sweeps and scenarios, widened by a margin): a point A is
dropped as dominated only when some point B is better on both frontier axes even with B at
the pessimistic end of its band and A at the optimistic end of its own. Dominance is
transitive and the bands bound the simulation, so every point on the simulated frontier
survives and the frontier of the simulated points equals the frontier of the whole grid.
A point is dropped for the SLO only when even its optimistic p99 misses a target; the screen
then keeps the frontier of the points that meet the SLO (a dominator must certainly meet it
too). Points whose class has no measured band, whose estimate failed, or whose requests the
engine would refuse are never dropped. Every dropped point is stored with its reason.
"""

from __future__ import annotations

import bisect
import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from simulator.errors import InputError
from simulator.sweep.frontier import Axis
from simulator.sweep.runners import Task
from simulator.sweep.store import Record, make_record

BANDS_PATH = Path(__file__).with_name("screen_bands.yaml")
STATUS = "screened"  # point_status of a point the screen dropped

# results.csv column -> the Estimate field that predicts it
PREDICTED = {
    "output_tokens_per_s_per_gpu": "run_output_tokens_per_s_per_gpu",
    "output_tokens_per_s_per_user.p50": "output_tokens_per_s_per_user_p50",
    "ttft_s.p99": "ttft_p99_s",
    "tpot_s.p99": "tpot_p99_s",
    "tpot_s.p50": "tpot_p50_s",
}


@dataclass(frozen=True, slots=True)
class Band:
    """simulated / estimated lies within [lo, hi] for this class and metric."""

    lo: float
    hi: float


SHORT_RUN = 500  # requests: fewer, and ramp-up and drain weigh on every metric


def point_class(scenario: Mapping[str, Any], stable: bool = True) -> str:
    """The kind of deployment and load a band is measured for, e.g. `aggregated/closed`, with
    `/overloaded` when the estimate puts the load above capacity (a run that never settles)
    and `/short` for runs of fewer than SHORT_RUN requests."""
    dep = scenario.get("deployment") or {}
    arrival = ((scenario.get("workload") or {}).get("arrival") or {}).get("kind")
    load = "closed" if arrival in ("closed_loop", "offline") else "open"
    if dep.get("kind") == "disaggregated":
        kind = "disaggregated"
    elif dep.get("speculative") is not None:
        kind = "speculative"
    elif int(dep.get("pipeline_parallel", 1)) > 1:
        kind = "pipeline"
    elif int(dep.get("attention_data_parallel", 1)) > 1:
        kind = "attention_dp"
    else:
        kind = "aggregated"
    n = int((scenario.get("workload") or {}).get("num_requests", SHORT_RUN))
    return (f"{kind}/{load}" + ("" if stable else "/overloaded")
            + ("/short" if n < SHORT_RUN else ""))


# Open-loop load buckets (offered rate / the estimate's capacity, stable runs of SHORT_RUN
# requests or more): below the knee the fluid model is within a few percent of the simulation
# (the batch hardly queues), so a bucket's band is far narrower than the whole class's.
LOAD_BUCKETS = ((0.5, "light"), (0.8, "moderate"), (1.0 + 1e-9, "knee"))


def band_classes(scenario: Mapping[str, Any], stable: bool = True,
                 load: float | None = None) -> list[str]:
    """The classes whose band may judge a point, most specific first: the class with its load
    bucket (when the load is known and the run is open-loop, stable and not short) and
    `/fixed` when all requests are alike, the bucket alone, then the class itself, whose band
    covers every load and workload."""
    cls = point_class(scenario, stable)
    if load is None or not stable or not cls.endswith("/open") or not math.isfinite(load):
        return [cls]
    for top, name in LOAD_BUCKETS:
        if load < top:
            bucket = f"{cls}/{name}"
            return [f"{bucket}/fixed", bucket, cls] if fixed_lengths(scenario) else [bucket, cls]
    return [cls]


def fixed_lengths(scenario: Mapping[str, Any]) -> bool:
    """Every request has the same prompt and output length: the fluid model's mean request is
    every request, so the estimate misses no spread of lengths."""
    w = scenario.get("workload") or {}
    specs = [w.get(k) for k in ("input_tokens", "output_tokens")]
    return all(isinstance(s, Mapping) and s and s.get("kind", "fixed") == "fixed" for s in specs)


@functools.lru_cache(maxsize=4)
def load_bands(path: Path = BANDS_PATH) -> dict[str, dict[str, Band]]:
    """class -> metric column -> band."""
    raw = yaml.safe_load(path.read_text())
    out: dict[str, dict[str, Band]] = {}
    for cls, metrics in (raw.get("classes") or {}).items():
        out[str(cls)] = {str(m): Band(float(b[0]), float(b[1])) for m, b in metrics.items()}
    return out


# ---- worker side: one estimate per point ---------------------------------------------


def _engine_key(scenario: Mapping[str, Any]) -> str:
    """Points that differ only in load share one engine (and its memoized step costs)."""
    trimmed = {k: v for k, v in scenario.items() if k not in ("name", "slo", "workload")}
    w = dict(scenario.get("workload") or {})
    w.pop("arrival", None)
    w.pop("num_requests", None)
    w.pop("seed", None)
    trimmed["workload_lengths"] = w
    return json.dumps(trimmed, sort_keys=True)


_ENGINES: dict[str, Any] = {}


def estimate_point(task: Task) -> Record:
    """The estimate of one point as a record (status `estimated`, or `estimate_failed` with the
    error: such a point is simulated, so the engine's own refusal is what the sweep stores)."""
    from simulator.closed_form.scenario import estimate
    from simulator.inputs.scenario import load_scenario_file
    from simulator.serving.engine_build import build_engine
    from simulator.workload.stream import build_stream

    try:
        scenario, _ = load_scenario_file(task.scenario)
        key = _engine_key(task.scenario) + (f"|{task.key}" if task.profiles else "")
        engine = _ENGINES.get(key)
        if engine is None:
            if len(_ENGINES) > 256:
                _ENGINES.clear()
            engine = _ENGINES[key] = build_engine(scenario, None, None, task.profiles)
        stream, _ = build_stream(scenario, None, task.skip_bad_rows,
                                 engine.max_model_len or None)
        est = estimate(scenario, engine, stream)
    except Exception as exc:  # refused or crashed: the simulation will say which
        return make_record(task.key, task.values, "estimate_failed",
                           error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    values = {col: float(getattr(est, field)) for col, field in PREDICTED.items()}
    # Stable: the run serves what it is offered, so rate / capacity is the offered load.
    load = est.rate_per_s / est.capacity_per_s if est.capacity_per_s > 0 else None
    result = {"estimate": values, "refused": est.requests_refused, "stable": est.stable,
              "load": load}
    return make_record(task.key, task.values, "estimated", result=result)


# ---- parent side: what to drop -------------------------------------------------------


@dataclass(frozen=True)
class ScreenPlan:
    dropped: dict[str, str]  # point key -> reason
    estimated: int  # points with an estimate
    unbanded: int  # points of a class without a measured band (never dropped)
    slo_targets: dict[str, float]  # the targets used (empty: dominance on the axes only)


def _signed(value: float, band: Band, maximize: bool) -> tuple[float, float]:
    """(pessimistic, optimistic) of a metric, oriented so that larger is better."""
    a, b = value * band.lo, value * band.hi
    if maximize:
        return min(a, b), max(a, b)
    return -max(a, b), -min(a, b)


# Tail metrics: their error grows with queueing near the knee in ways one load bucket's sample
# does not bound (TTFT p99 up to 8x the estimate at 0.8-1.0 of capacity, twice what the
# bucket's sample saw), so they are judged by the class's band over every load.
TAIL_METRICS = frozenset({"ttft_s.p99", "tpot_s.p99"})


def _judging_bands(bands: Mapping[str, Mapping[str, Band]], classes: Sequence[str],
                   needed: Sequence[str]) -> dict[str, Band] | None:
    """Metric -> the band that judges it: the most specific of `classes` with a band for it
    (a tail metric: the last, widest class only); None when a needed metric has no band."""
    out: dict[str, Band] = {}
    for metric in needed:
        pool = classes[-1:] if metric in TAIL_METRICS else classes
        band = next((bands[c][metric] for c in pool if metric in bands.get(c, {})), None)
        if band is None:
            return None
        out[metric] = band
    return out


def plan_screen(points: Sequence[tuple[str, Mapping[str, Any]]], estimates: Mapping[str, Record],
                x: Axis, y: Axis, slo_targets: Mapping[str, float],
                bands: Mapping[str, Mapping[str, Band]] | None = None) -> ScreenPlan:
    """Which points to drop, and why: `points` are (key, scenario) in grid order."""
    bands = load_bands() if bands is None else bands
    for axis in (x, y):
        if axis.column not in PREDICTED:
            raise InputError(f"--screen: the frontier axis {axis.column} is not estimated; "
                             f"screen on {', '.join(sorted(PREDICTED))}")
    targets = {c: v for c, v in slo_targets.items() if c in PREDICTED}
    dropped: dict[str, str] = {}
    # (pessimistic x, pessimistic y) of each possible dominator; (optimistic x, y) of each
    # candidate.
    dominators: list[tuple[float, float]] = []
    candidates: list[tuple[str, float, float]] = []
    unbanded = estimated = 0
    for key, scenario in points:
        rec = estimates.get(key)
        res = rec.get("result") if rec is not None else None
        if rec is None or rec["point_status"] != "estimated" or res is None:
            continue
        estimated += 1
        if res.get("refused"):
            continue  # the run drops requests: its metrics cover the rest only
        cls_bands = _judging_bands(bands, band_classes(
            scenario, bool(res.get("stable", True)), res.get("load")), (x.column, y.column,
                                                                         *targets))
        if cls_bands is None:
            unbanded += 1
            continue
        est = res["estimate"]
        if not all(math.isfinite(est[c]) and est[c] > 0 for c in (x.column, y.column)):
            continue
        miss = [f"{c} certainly above {limit:g} s (estimate {est[c]:.3g} s)"
                for c, limit in targets.items()
                if math.isfinite(est[c]) and est[c] * min(cls_bands[c].lo, cls_bands[c].hi)
                > limit]
        if miss:
            dropped[key] = "misses the SLO: " + miss[0]
            continue
        px, ox = _signed(est[x.column], cls_bands[x.column], x.maximize)
        py, oy = _signed(est[y.column], cls_bands[y.column], y.maximize)
        meets = all(math.isfinite(est[c]) and est[c] * max(cls_bands[c].lo, cls_bands[c].hi)
                    <= limit for c, limit in targets.items())
        if res.get("stable") and meets:
            dominators.append((px, py))
        candidates.append((key, ox, oy))
    # A candidate is dominated when a dominator's pessimistic x and y both beat its optimistic
    # ones: sort dominators by x, keep the best y among those with a larger x.
    dominators.sort()
    xs = [d[0] for d in dominators]
    best_y_from = [-math.inf] * (len(dominators) + 1)
    for i in range(len(dominators) - 1, -1, -1):
        best_y_from[i] = max(best_y_from[i + 1], dominators[i][1])
    for key, ox, oy in candidates:
        i = bisect.bisect_right(xs, ox)
        if best_y_from[i] > oy:
            dropped[key] = (f"certainly dominated on {y.label} and {x.label} (beyond the "
                            f"estimate's error band)")
    return ScreenPlan(dropped, estimated, unbanded, dict(targets))


def screened_record(key: str, values: dict[str, Any], reason: str,
                    estimate: Mapping[str, Any] | None) -> Record:
    """The stored record of a point the screen ruled out: its reason and its estimate."""
    return make_record(key, values, STATUS, reason=reason, result=dict(estimate or {}))
