"""Lesson stack: the techniques that push the frontier multiply. One model on the same number of
GPUs, one technique added per stage (FP8, FP4 on B200, speculative decoding, P/D), each
stage's frontier read at a fixed speed per user and at a fixed throughput per GPU, so each
step's factor and the compound one are numbers of this run; a step that does not multiply
everywhere (speculation at large batch, a P/D split) is said to."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simulator.lessons.core import Findings, col
from simulator.sweep.frontier import (
    SpeedPoint,
    pareto_front,
    speed_at_throughput,
    throughput_at_speed,
)
from simulator.sweep.table import Row, number

LOAD = "workload.arrival.concurrency"
STAGE = "stack"  # derived: "3 B200 NVFP4"
USER = "output_tokens_per_s_per_user.p50"
GPU = "output_tokens_per_s_per_gpu"
# A step's gain "shrinks" when at the heaviest load it keeps less than this share of its gain at
# the lightest (a reading threshold of the page, not a physical figure).
SHRINK = 0.85


def _pool(dep: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pool whose settings name the stage: the decode pool of a P/D deployment."""
    decode = dep.get("decode")
    return decode if isinstance(decode, Mapping) else dep


def stage_label(r: Row) -> str:
    dep = r.get("deployment")
    dep = dep if isinstance(dep, Mapping) else {}
    pool = _pool(dep)
    prec = pool.get("precision") or {}
    weights = str(prec.get("weights", "bf16")).upper() if isinstance(prec, Mapping) else "?"
    parts = [str(r.get("hardware.gpu", "?")).split("-")[0].upper(), weights]
    spec = pool.get("speculative")
    if isinstance(spec, Mapping) and spec.get("method"):
        parts.append(f"+ {str(spec['method']).upper().replace('EAGLE3', 'EAGLE-3')}")
    if dep.get("kind") == "disaggregated":
        pre = dep.get("prefill") or {}
        n_p = pre.get("replicas", 1) if isinstance(pre, Mapping) else 1
        parts.append(f"+ P/D {n_p}P{pool.get('replicas', 1)}D")
    return " ".join(parts)


def derive(r: Row) -> dict[str, Any]:
    return {STAGE: stage_label(r)}


def _stages(rows: Sequence[Row]) -> dict[str, list[Row]]:
    """Rows by stage, in the lesson's order (the order of the first appearance of each)."""
    out: dict[str, list[Row]] = {}
    for r in rows:
        out.setdefault(str(r[STAGE]), []).append(r)
    return out


def _points(rows: Sequence[Row]) -> list[SpeedPoint]:
    return [(col(r, USER), col(r, GPU)) for r in rows
            if number(r, USER) is not None and number(r, GPU) is not None]


def _factors(values: Sequence[float | None]) -> list[str]:
    """'×1.66 (×1.66 in all)' for each stage after the first with a value."""
    out = []
    base = values[0]
    for prev, cur in itertools.pairwise(values):
        if prev is None or cur is None or base is None:
            out.append("unreached")
        else:
            out.append(f"×{cur / prev:.2f} (×{cur / base:.2f} in all)")
    return out


def _value(name: str, v: float | None, at_least: bool, unit: str) -> str:
    if v is None:
        return f"{name}: unreached"
    return f"{name}: {'≥' if at_least else ''}{v:.0f} {unit}"


def analyze(rows: list[Row], spec: Mapping[str, Any], out_dir: Path) -> Findings:
    stages = _stages(rows)
    names = list(stages)
    if len(names) < 2:
        return Findings(["Only one stage simulated; see results.csv."])
    base = sorted(stages[names[0]], key=lambda r: col(r, LOAD))
    # The fixed speed: the baseline's per-user speed at its middle load; the fixed throughput:
    # half the baseline's best per GPU. Both lie on the baseline's frontier, so every later
    # stage is compared where the baseline itself runs.
    mid = base[len(base) // 2]
    speed = col(mid, USER)
    best = max(col(r, GPU) for r in base)
    target = best / 2
    stage_points = [_points(stages[n]) for n in names]
    at_speed = [throughput_at_speed(p, speed) for p in stage_points]
    at_tput = [speed_at_throughput(p, target) for p in stage_points]
    # A stage whose every point is faster than the speed (or carries more than the
    # throughput) is read at its extreme point: it would do at least that at more load.
    # (On the frontier, whose ends are where the interpolation clamps.)
    fronts = [pareto_front(p) for p in stage_points]
    floor_s = [bool(f) and f[0][0] > speed for f in fronts]
    floor_t = [bool(f) and f[-1][1] > target for f in fronts]
    lines = [
        f"At {speed:.0f} output tokens/s per user (the baseline, {names[0]}, at "
        f"{col(mid, LOAD):.0f} requests in flight), each stage serves "
        + "; ".join(_value(n, v, at_least, "tokens/s per GPU")
                    for n, v, at_least in zip(names, at_speed, floor_s, strict=True))
        + ". Step by step: " + ", ".join(
            f"{n} {f}" for n, f in zip(names[1:], _factors(at_speed), strict=True)) + ".",
        f"At {target:.0f} output tokens/s per GPU (half the baseline's best), each stage gives "
        "every user " + "; ".join(
            _value(n, v, at_least, "tokens/s")
            for n, v, at_least in zip(names, at_tput, floor_t, strict=True))
        + ". Step by step: " + ", ".join(
            f"{n} {f}" for n, f in zip(names[1:], _factors(at_tput), strict=True)) + ".",
    ]
    if any(floor_s) or any(floor_t):
        lines.append("A value marked ≥ is read at an end of the stage's swept range (at its "
                     "heaviest load its users still run faster than the speed mark, or at its "
                     "lightest it still carries more than the throughput mark): the stage does "
                     "at least that at the mark, so the factors beside it compare swept "
                     "extremes, not the mark.")
    lines += _where_it_does_not_multiply(stages, names)
    points = [min(stages[n], key=lambda r: abs(col(r, LOAD) - col(mid, LOAD))) for n in names]
    figures = {"speed mark (tokens/s per user)": speed,
               "throughput mark (tokens/s per GPU)": target}
    for n, v, u in zip(names, at_speed, at_tput, strict=True):
        if v is not None:
            figures[f"{n}: tokens/s per GPU at the speed mark"] = v
        if u is not None:
            figures[f"{n}: tokens/s per user at the throughput mark"] = u
    # Quoted too: the baseline's best, and every stage at the lightest and heaviest load.
    loads = sorted({col(r, LOAD) for r in rows})
    ends = [r for r in rows if col(r, LOAD) in (loads[0], loads[-1])]
    cited = [mid, max(base, key=lambda r: col(r, GPU)), *ends]
    return Findings(lines, points, cited=cited, figures=figures)


def _where_it_does_not_multiply(stages: Mapping[str, Sequence[Row]],
                                names: Sequence[str]) -> list[str]:
    """Each step's per-GPU factor at the lowest and the highest load the stages share: one
    that falls below 1 (a split that gives up GPUs to prefill) or shrinks with the load
    (speculation as the batch grows) is said so, with the numbers; the others hold."""
    out, held = [], []
    for prev, cur in itertools.pairwise(names):
        a = {col(r, LOAD): r for r in stages[prev]}
        b = {col(r, LOAD): r for r in stages[cur]}
        loads = sorted(set(a) & set(b))
        if len(loads) < 2:
            continue
        lo, hi = loads[0], loads[-1]
        f_lo = col(b[lo], GPU) / col(a[lo], GPU)
        f_hi = col(b[hi], GPU) / col(a[hi], GPU)
        u_hi = col(b[hi], USER) / col(a[hi], USER)
        if f_hi < 1 or f_lo < 1:
            worse_at = hi if f_hi < 1 else lo
            out.append(
                f"{cur} does not multiply throughput everywhere: at {worse_at:.0f} in flight it "
                f"serves ×{min(f_lo, f_hi):.2f} the tokens/s per GPU of {prev} (×{f_lo:.2f} at "
                f"{lo:.0f}, ×{f_hi:.2f} at {hi:.0f}) while each user reads ×{u_hi:.2f} as fast "
                f"at {hi:.0f}: it trades throughput for speed per user there.")
        elif f_hi < SHRINK * f_lo:
            out.append(
                f"{cur}'s gain shrinks with the load: ×{f_lo:.2f} tokens/s per GPU over "
                f"{prev} at {lo:.0f} in flight, ×{f_hi:.2f} at {hi:.0f}.")
        else:
            held.append(f"{cur} ×{f_lo:.2f} at {lo:.0f} in flight, ×{f_hi:.2f} at {hi:.0f}")
    if held:
        out.append("These steps hold from the lightest to the heaviest load swept (tokens/s "
                   "per GPU over the stage before): " + "; ".join(held) + ".")
    return out
