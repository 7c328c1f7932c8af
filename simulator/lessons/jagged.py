"""Lesson jagged: find the largest jump between neighbouring points and say what changed."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from simulator.lessons.core import Findings, col
from simulator.report.sweep_report import step_breakdown
from simulator.sweep.table import Row, number

LOAD = "workload.arrival.concurrency"
METRICS = (("ttft_s.p50", "TTFT p50", 1e3, "ms"),
           ("output_tokens_per_s_per_gpu", "output tokens/s per GPU", 1.0, ""),
           ("tpot_s.p50", "TPOT p50", 1e3, "ms"))
PARTS = (("compute_s", "compute"), ("memory_s", "HBM"), ("communication_s", "communication"),
         ("overhead_s", "fixed kernel cost"), ("host_s", "host"))


def largest_jump(rows: list[Row]) -> tuple[int, str, float]:
    """(index i of the pair i, i+1; metric column; |log ratio| per log step of the axis)."""
    best = (0, METRICS[0][0], -1.0)
    for i in range(len(rows) - 1):
        step = math.log(col(rows[i + 1], LOAD) / col(rows[i], LOAD))
        for column, *_ in METRICS:
            a, b = number(rows[i], column), number(rows[i + 1], column)
            if a and b and a > 0 and b > 0 and step > 0:
                score = abs(math.log(b / a)) / step
                if score > best[2]:
                    best = (i, column, score)
    return best


def analyze(rows: list[Row], spec: Mapping[str, Any], out_dir: Path) -> Findings:
    rows = sorted(rows, key=lambda r: col(r, LOAD))
    if len(rows) < 2:
        return Findings(["One point only: nothing to compare."])
    i, column, score = largest_jump(rows)
    a, b = rows[i], rows[i + 1]
    _, label, scale, unit = next(m for m in METRICS if m[0] == column)
    va, vb = col(a, column), col(b, column)
    lines = [
        f"The largest jump: from concurrency {col(a, LOAD):.0f} to {col(b, LOAD):.0f} "
        f"({col(b, LOAD) / col(a, LOAD) - 1:.0%} more users), {label} goes from "
        f"{va * scale:.3g} to {vb * scale:.3g}{(' ' + unit) if unit else ''} ({vb / va:.2f}×), "
        f"{score:.1f}× the elasticity of a smooth curve."]
    why = []
    pa, pb = number(a, "preemptions"), number(b, "preemptions")
    if pa is not None and pb is not None and pb > pa:
        why.append(f"preemptions rise from {pa:.0f} to {pb:.0f}: the KV cache "
                   f"no longer holds every running request, so some wait or are recomputed")
    qa, qb = number(a, "queue_s.p50"), number(b, "queue_s.p50")
    if qa is not None and qb is not None and qb > 2 * qa + 1e-3:
        why.append(f"the median queue wait grows from {qa * 1e3:.0f} to {qb * 1e3:.0f} ms")
    ba = step_breakdown(out_dir / "points" / f"{a['point_id']}.yaml")
    bb = step_breakdown(out_dir / "points" / f"{b['point_id']}.yaml")
    if ba and bb:
        key, name = max(PARTS, key=lambda kv: abs(bb.get(kv[0], 0.0) - ba.get(kv[0], 0.0)))
        why.append(f"of the mean step, the {name} part changes most "
                   f"({ba.get(key, 0.0) * 1e3:.2f} → {bb.get(key, 0.0) * 1e3:.2f} ms of "
                   f"{ba['step_time_s'] * 1e3:.2f} → {bb['step_time_s'] * 1e3:.2f} ms)")
    if why:
        lines.append("Why: " + "; ".join(why) + ".")
    else:
        lines.append("No single cause stands out in the breakdown: the jump comes from how "
                     "requests line up in the batch (see the latency plot).")
    return Findings(lines, [a, b])
