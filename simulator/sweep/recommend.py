"""`frontier recommend`: the best config of a finished sweep under an SLO, and why the others
lost.

A point meets the SLO when its run completed, dropped no request, and each named latency
percentile is within its target. Then, among those points:

- `--rate R`: copies = ceil(R / the config's capacity); the cheapest total (USD per hour when
  every GPU has a price, else the fewest GPUs) wins;
- `--gpus N`: copies = floor(N / the point's GPUs); the most requests/s in N GPUs wins;

where a config's capacity is the highest rate its runs meet the SLO at, searched
(sweep/capacity.py), or without the search the rate the point's finite run achieved (which
counts its ramp and drain, so it under-states the capacity);
- neither: the most requests/s per GPU wins.

Ties go to the faster per-user speed (output tokens/s per user, p50), then to the point id.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from simulator.errors import InputError
from simulator.sweep import quality_gate
from simulator.sweep.capacity import Capacity
from simulator.sweep.cost import (
    gpu_label,
    mean_price_per_gpu_hour,
    price_per_gpu_hour,
    serving_costs,
)
from simulator.sweep.slo import slo_failures
from simulator.sweep.store import point_scenario
from simulator.sweep.table import Row, number, value_label
from simulator.validation.accuracy import Accuracy

PER_USER = "output_tokens_per_s_per_user.p50"


@dataclass
class Candidate:
    row: Row
    gpu: str
    gpus: int  # per copy of the config
    requests_per_s: float
    copies: int
    usd_per_hour: float | None
    score: tuple[float, ...] = ()
    capacity: Capacity | None = None  # searched; None: the run's achieved rate

    @property
    def total_gpus(self) -> int:
        return self.copies * self.gpus

    @property
    def per_user(self) -> float:
        return number(self.row, PER_USER) or 0.0

    def costs(self, load: float | None) -> dict[str, float]:
        """USD per hour, per request and per million tokens (input, output, blended) while
        serving `load` req/s (None: what its copies sustain), lengths from the point's run."""
        if self.usd_per_hour is None:
            return {}
        rps = number(self.row, "requests_per_s") or 0.0
        tok_in = (number(self.row, "input_tokens_per_s") or 0.0) / rps if rps > 0 else 0.0
        tok_out = (number(self.row, "output_tokens_per_s") or 0.0) / rps if rps > 0 else 0.0
        served = load if load is not None else self.copies * self.requests_per_s
        return serving_costs(self.usd_per_hour, served, tok_in, tok_out)


@dataclass
class Recommendation:
    mode: str  # rate | gpus | per_gpu
    targets: dict[str, float]
    ranked: list[Candidate]
    failing: list[tuple[Row, list[str]]]
    priced: bool
    unpriced_gpus: list[str] = field(default_factory=list)
    load: float | None = None
    max_quality_drop_pct: float | None = None
    searched: bool = False  # capacities by search (else the runs' achieved rates)
    screened: int = 0  # points the sweep's screen ruled out and this ranking did not judge
    pessimistic: bool = False  # capacities judged on the GPUs' pessimistic profiles

    @property
    def winner(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None


def recommend(rows: Sequence[Row], targets: Mapping[str, float], *, sweep_dir: Path | None = None,
              gpus: int | None = None, rate: float | None = None,
              prices: Mapping[str, float] | None = None,
              gpu_of: Mapping[str, str] | None = None,
              max_quality_drop_pct: float | None = None,
              capacities: Mapping[str, Capacity] | None = None,
              pessimistic: bool = False) -> Recommendation:
    """Rank the rows that meet the SLO (module docstring). `gpu_of` maps point ids to GPU
    profile names when no sweep folder is given. Under `max_quality_drop_pct` a row must also
    have a published quality drop within it (unknown quality never passes). With
    `capacities` (point id -> searched capacity) a point's config is judged at its capacity,
    not at the load the sweep offered it, and points of one config count once."""
    if gpus is not None and rate is not None:
        raise InputError("give --gpus or --rate, not both")
    prices = prices or {}
    cands: list[Candidate] = []
    failing: list[tuple[Row, list[str]]] = []
    configs: set[str] = set()
    for row in rows:
        cap = (capacities or {}).get(str(row.get("point_id", "")))
        if cap is not None and cap.config in configs:
            continue  # another load of a config already judged at its capacity
        if cap is not None:
            configs.add(cap.config)
        row, why, rps, judged = _judge(row, cap, targets, max_quality_drop_pct)
        per_copy = int(number(row, "num_gpus") or 0)
        if not why and (rps <= 0 or per_copy <= 0):
            why = ["served no request"]
        if why:
            if judged:
                failing.append((row, why))
            continue
        pid = str(row.get("point_id", ""))
        gpu = (gpu_of or {}).get(pid, "")
        scenario = point_scenario(sweep_dir, pid) if not gpu and sweep_dir is not None else None
        if scenario:
            gpu = gpu_label(scenario)
        if rate is not None:
            copies = max(1, math.ceil(rate / rps - 1e-9))
        elif gpus is not None:
            copies = gpus // per_copy
            if copies < 1:
                failing.append((row, [f"needs {per_copy} GPUs, more than --gpus {gpus}"]))
                continue
        else:
            copies = 1
        if scenario:
            price = mean_price_per_gpu_hour(scenario, prices)
        else:
            price = price_per_gpu_hour(gpu, prices) if gpu else None
        usd = None if price is None else price * copies * per_copy
        cands.append(Candidate(row, gpu, per_copy, rps, copies, usd, capacity=cap))
    priced = bool(cands) and all(c.usd_per_hour is not None for c in cands)
    unpriced = sorted({c.gpu or "?" for c in cands if c.usd_per_hour is None})
    for c in cands:
        tie = (-c.per_user,)
        if rate is not None:
            cost = c.usd_per_hour if priced and c.usd_per_hour is not None else c.total_gpus
            c.score = (cost, *tie)
        elif gpus is not None:
            c.score = (-c.copies * c.requests_per_s, c.total_gpus, *tie)
        else:
            c.score = (-c.requests_per_s / c.gpus, *tie)
    cands.sort(key=lambda c: (c.score, str(c.row.get("point_id", ""))))
    mode = "rate" if rate is not None else "gpus" if gpus is not None else "per_gpu"
    load = rate if rate is not None else float(gpus) if gpus is not None else None
    screened = sum(r.get("point_status") == "screened"
                   and str(r.get("point_id", "")) not in (capacities or {}) for r in rows)
    return Recommendation(mode, dict(targets), cands, failing, priced, unpriced, load,
                          max_quality_drop_pct, searched=capacities is not None,
                          screened=screened, pessimistic=pessimistic)


def _judge(row: Row, cap: Capacity | None, targets: Mapping[str, float],
           max_quality_drop_pct: float | None) -> tuple[Row, list[str], float, bool]:
    """(the row a ranking reads, why it misses, its requests/s per copy, whether it was
    judged at all). At a searched capacity the row is the capacity run's (so a screened point
    reads the same as a simulated one); else the sweep's run at its offered load."""
    if cap is not None:
        row = {**row, **cap.at_capacity}
        why = [] if cap.rate_per_s > 0 else [cap.describe()]
        rps = cap.rate_per_s
    elif row.get("point_status", "ok") == "ok":
        why = slo_failures(row, targets)
        rps = number(row, "requests_per_s") or 0.0
    else:
        return row, ["not simulated"], 0.0, False
    why += quality_gate.row_failures(row.get("quality.basis"), number(row, "quality.delta_pct"),
                                     max_quality_drop_pct)
    return row, why, rps, True


def why_lost(c: Candidate, w: Candidate, rec: Recommendation) -> str:
    if rec.mode == "rate":
        setup = f"{c.copies} × {c.gpus} GPUs"
        if rec.priced and c.usd_per_hour is not None and w.usd_per_hour is not None:
            if c.usd_per_hour > w.usd_per_hour:
                return f"costs ${c.usd_per_hour:,.2f}/h ({setup}) vs ${w.usd_per_hour:,.2f}/h"
        elif c.total_gpus > w.total_gpus:
            return f"needs {c.total_gpus} GPUs ({setup}) vs {w.total_gpus}"
    elif rec.mode == "gpus":
        a, b = c.copies * c.requests_per_s, w.copies * w.requests_per_s
        if a < b:
            return f"serves {a:.3g} req/s in {rec.load:g} GPUs vs {b:.3g}"
        if c.total_gpus > w.total_gpus:
            return f"same load but uses {c.total_gpus} GPUs vs {w.total_gpus}"
    else:
        a, b = c.requests_per_s / c.gpus, w.requests_per_s / w.gpus
        if a < b:
            return f"{a:.3g} req/s per GPU vs {b:.3g}"
    return f"tie on the goal; slower per user ({c.per_user:.1f} vs {w.per_user:.1f} tok/s)"


def short_names(axes: Sequence[str]) -> dict[str, str]:
    """Each key path by its last component, or more of it where two would read the same."""
    names = {}
    for a in axes:
        parts = a.split(".")
        n = 1
        while n < len(parts) and sum(x.split(".")[-n:] == parts[-n:] for x in axes) > 1:
            n += 1
        names[a] = ".".join(parts[-n:])
    return names


def describe(row: Row, axes: Sequence[str]) -> str:
    """'tensor_parallel=4, replicas=2, weights=fp8' (the swept values of a row)."""
    names = short_names(axes)
    return ", ".join(f"{names[a]}={value_label(row.get(a))}" for a in axes) or str(
        row.get("point_id"))


def _binding_metric(c: Candidate, targets: Mapping[str, float]) -> str:
    """'ttft' or 'tpot': what limits the candidate (what its capacity missed, else the target
    with the least slack at the sweep's load); throughput limits read as TPOT (step time)."""
    if c.capacity is not None and c.capacity.why_missed:
        why = c.capacity.why_missed
        return "ttft" if why.startswith("ttft") and "tpot" not in why else "tpot"
    slack = {col: 1 - (number(c.row, col) or 0.0) / limit for col, limit in targets.items()}
    worst = min(slack, key=lambda k: slack[k]) if slack else "tpot"
    return "ttft" if worst.startswith("ttft") else "tpot"


def margin_notes(rec: Recommendation, accuracy: Accuracy) -> list[str]:
    """Where the answer's margin is within the simulator's measured error: the winner's
    headroom over the asked rate, and a runner-up's gap on the goal."""
    w = rec.winner
    if w is None:
        return []
    metric = _binding_metric(w, rec.targets)
    err = accuracy.metrics.get(metric)
    if err is None:
        return []
    notes = []
    if rec.mode == "rate" and rec.load:
        headroom = w.copies * w.requests_per_s / rec.load - 1
        if headroom < err.median_abs:
            notes.append(f"margin: {headroom:.0%} headroom over {rec.load:g} req/s, within the "
                         f"{metric.upper()} median error ({err.median_abs:.0%}, what limits "
                         "it): measure before committing")
    if len(rec.ranked) > 1:
        r = rec.ranked[1]
        goal_w, goal_r = abs(w.score[0]), abs(r.score[0])
        gap = abs(goal_r - goal_w) / goal_w if goal_w else math.inf
        if 0 < gap < err.median_abs:  # a tie on the goal is broken by per-user speed
            notes.append(f"margin: the runner-up is {gap:.0%} from the winner on the goal, "
                         f"within the {metric.upper()} median error ({err.median_abs:.0%}): "
                         "the order of the two is not certain")
    return notes


def format_recommendation(rec: Recommendation, axes: Sequence[str], sweep_dir: Path | None,
                          runner_ups: int = 5, accuracy: Accuracy | None = None) -> list[str]:
    if rec.searched:  # a config is judged at its capacity: the swept load names nothing
        axes = [a for a in axes if not a.startswith("workload.arrival.")] or list(axes)
    slo = ", ".join(f"{k} <= {v:g} s" for k, v in rec.targets.items()) or "(none)"
    if rec.mode == "rate":
        goal = f"cheapest config serving {rec.load:g} req/s"
    elif rec.mode == "gpus":
        goal = f"most requests/s within {rec.load:g} GPUs"
    else:
        goal = "most requests/s per GPU"
    lines = [f"goal: {goal}, within SLO {slo}"]
    if rec.max_quality_drop_pct is not None:
        unknown = sum(quality_gate.UNKNOWN_REASON in why for _, why in rec.failing)
        lines.append(f"quality: published drop <= {rec.max_quality_drop_pct:g} %; {unknown} "
                     "points excluded because their quality is unknown (nothing published "
                     "for their model and formats)")
    n_ok = len(rec.ranked)
    if rec.searched:
        lines.append(f"{n_ok} of {n_ok + len(rec.failing)} configs meet it at some load; each "
                     "judged at its capacity, the highest rate whose runs meet the SLO, found "
                     "by search (estimate bracket, then simulation to 5 %)")
    else:
        lines.append(f"{n_ok} of {n_ok + len(rec.failing)} simulated points meet it")
    if rec.pessimistic:
        lines.append("confidence: each config judged on its GPU's pessimistic profile (every "
                     "efficiency scaled down by the profile's stated spread)")
    if rec.screened:
        lines.append(f"{rec.screened} points were screened out by the sweep's estimate "
                     "(dominated in tokens/s per GPU x per user, which says nothing of price, "
                     "or certain to miss its SLO) and are not ranked here; --capacity judges "
                     "them too")
    if rec.mode == "rate" and not rec.priced and rec.ranked:
        lines.append(
            f"cost: no GPU price known for {', '.join(rec.unpriced_gpus)} (the profile has "
            "none), so configs are ranked by GPU count; pass --gpu-price GPU=USD_PER_HOUR or "
            "set FRONTIER_GPU_PRICES"
        )
    w = rec.winner
    if w is None:
        reasons: Counter[str] = Counter()
        for _, why in rec.failing:
            reasons.update(r.split(" ")[0] for r in why)
        lines.append("no config meets the SLO; most common misses: "
                     + ", ".join(f"{k} ({n})" for k, n in reasons.most_common(4)))
        lines.extend(_closest_failures(rec, axes))
        return lines
    lines.append("")
    lines.append(f"recommended: {describe(w.row, axes)}")
    lines.append("  " + _facts(w, rec))
    if sweep_dir is not None:
        point_file = sweep_dir / "points" / f"{w.row['point_id']}.yaml"
        lines.append(f"  scenario: frontier simulate {point_file}")
    if accuracy is not None:
        lines.append("  " + accuracy.line())
        lines.extend("  " + n for n in margin_notes(rec, accuracy))
    if len(rec.ranked) > 1:
        lines.append("")
        lines.append("runner-ups (and why each lost):")
        for i, c in enumerate(rec.ranked[1 : runner_ups + 1], start=2):
            lines.append(f"  {i}. {describe(c.row, axes)}")
            lines.append(f"     {why_lost(c, w, rec)}; {_facts(c, rec)}")
    lines.extend(_closest_failures(rec, axes))
    return lines


def _facts(c: Candidate, rec: Recommendation) -> str:
    r = c.row
    parts = [f"{c.copies} × {c.gpus} GPU{'s' if c.gpus != 1 else ''}" if c.copies > 1
             else f"{c.gpus} GPU{'s' if c.gpus != 1 else ''}",
             f"capacity {c.capacity.describe()} per copy" if c.capacity is not None
             else f"{c.requests_per_s:.3g} req/s per copy (the run's achieved rate)"]
    if rec.mode == "gpus":
        parts.append(f"{c.copies * c.requests_per_s:.3g} req/s in all")
    costs = c.costs(rec.load if rec.mode == "rate" else None)
    if costs:
        parts.append(f"${costs['usd_per_hour']:,.2f}/h")
    if "usd_per_request" in costs:
        parts.append(f"${costs['usd_per_request']:.3g} per request")
    if "usd_per_million_output_tokens" in costs and "usd_per_million_input_tokens" in costs:
        parts.append(f"per million tokens ${costs['usd_per_million_input_tokens']:.3g} input "
                     f"or ${costs['usd_per_million_output_tokens']:.3g} output (all cost to "
                     f"one side), ${costs['usd_per_million_tokens_blended']:.3g} blended")
    at = "" if c.capacity is None else " at capacity"
    for col, label in (("ttft_s.p99", "TTFT p99"), ("tpot_s.p99", "TPOT p99")):
        v = number(r, col)
        if v is not None:
            parts.append(f"{label} {v:.3g} s{at}")
    parts.append(f"{c.per_user:.1f} tok/s per user{at}")
    delta = number(r, "quality.delta_pct")
    basis = r.get("quality.basis")
    if basis:
        parts.append("quality unknown" if delta is None else f"quality {delta:+.2f} % ({basis})")
    return ", ".join(parts)


def _closest_failures(rec: Recommendation, axes: Sequence[str], k: int = 3) -> list[str]:
    """The highest-load points that miss the SLO, with the target they miss."""
    if not rec.failing:
        return []
    best = sorted(rec.failing, key=lambda rw: -(number(rw[0], "requests_per_s") or 0.0))[:k]
    lines = ["", f"missed the SLO ({len(rec.failing)} points; the busiest shown):"]
    for row, why in best:
        lines.append(f"  {describe(row, axes)}: {'; '.join(why)}")
    return lines
