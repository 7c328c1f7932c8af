"""Lesson jagged: find the largest jump between neighbouring points and say what changed."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from simulator.lessons.core import Findings, col
from simulator.report.page import Section
from simulator.report.sweep_figures import metric_figure
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


def num(x: float) -> str:
    """A figure as a reader writes it: 7,196 not 7.2e+03; 2.4 or 0.0123 for small ones."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.3g}"


def kv_cause(a: Row, b: Row, spec: Mapping[str, Any],
             figures: dict[str, float] | None = None) -> str | None:
    """The KV-cache arithmetic when the larger load holds more requests than the cache fits:
    capacity tokens over each request's tokens rounded up to whole blocks (the block size and
    the rounded tokens go into `figures`)."""
    fits, tokens = number(b, "kv_chain.max_batch_that_fits"), number(b, "kv_capacity_tokens")
    seq = number(b, "kv_chain.mean_sequence_tokens")
    if fits is None or tokens is None or seq is None or col(b, LOAD) <= fits:
        return None
    block = int(((spec.get("deployment") or {}).get("scheduler") or {}).get("block_size", 16))
    per = math.ceil(seq / block) * block
    if figures is not None:
        figures.update({"KV block size (tokens)": block,
                        "a request's tokens in whole blocks": per})
    return (f"the KV cache holds {num(tokens)} tokens, and a request of {num(seq)} tokens takes "
            f"{per // block} blocks of {block} ({num(per)} tokens): {num(tokens)} / {num(per)} = "
            f"{fits:.0f} requests fit, so of {col(b, LOAD):.0f} users "
            f"{col(b, LOAD) - fits:.0f} wait in the queue for a running request to finish "
            f"(at {col(a, LOAD):.0f} users, {max(0.0, col(a, LOAD) - fits):.0f} did)")


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
        f"{num(va * scale)} to {num(vb * scale)}{(' ' + unit) if unit else ''} "
        f"({vb / va:.2f}×), {score:.1f}× the elasticity of a smooth curve."]
    figures = {"jump: elasticity against a smooth curve's": score}
    why = [c for c in [kv_cause(a, b, spec, figures)] if c]
    pa, pb = number(a, "preemptions"), number(b, "preemptions")
    if pa is not None and pb is not None and pb > pa:
        why.append(f"preemptions rise from {pa:.0f} to {pb:.0f}: the KV cache "
                   f"no longer holds every running request, so some wait or are recomputed")
    qa, qb = number(a, "queue_s.p50"), number(b, "queue_s.p50")
    if qa is not None and qb is not None and qb > 2 * qa + 1e-3:
        why.append(f"the median queue wait grows from {num(qa * 1e3)} to {num(qb * 1e3)} ms")
    ba = step_breakdown(out_dir / "points" / f"{a['point_id']}.yaml")
    bb = step_breakdown(out_dir / "points" / f"{b['point_id']}.yaml")
    if ba and bb:
        sa, sb = ba["step_time_s"] * 1e3, bb["step_time_s"] * 1e3
        figures.update({"mean engine step before the jump (ms)": sa,
                        "mean engine step after the jump (ms)": sb})
        key, name = max(PARTS, key=lambda kv: abs(bb.get(kv[0], 0.0) - ba.get(kv[0], 0.0)))
        if abs(sb - sa) <= 0.01 * sa:
            why.append(f"the mean engine step is the same at both loads ({sa:.1f} ms): the "
                       "running batch did not grow, the extra users only waited")
        else:
            figures.update({f"{name} part before (ms)": ba.get(key, 0.0) * 1e3,
                            f"{name} part after (ms)": bb.get(key, 0.0) * 1e3})
            why.append(f"of the mean step ({sa:.1f} → {sb:.1f} ms), the {name} part changes "
                       f"most ({ba.get(key, 0.0) * 1e3:.1f} → {bb.get(key, 0.0) * 1e3:.1f} ms)")
    if why:
        lines.append("Why: " + "; ".join(why) + ".")
    else:
        lines.append("No single cause stands out in the breakdown: the jump comes from how "
                     "requests line up in the batch (see the latency plot).")
    plot = Section(
        f"The jump in {label}", f"{label} against the number of concurrent users: the jump the "
        "text explains is between the two points it names.",
        metric_figure(rows, LOAD, column, "", title=f"{label} against concurrency",
                      x_label="concurrent users (closed loop)",
                      y_label=f"{label}{f' ({unit})' if unit else ''}", log_x=False,
                      scale=scale))
    return Findings(lines, [a, b], [plot], figures=figures)
