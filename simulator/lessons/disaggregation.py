"""Lesson disaggregation: prefill and decode pools against aggregated replicas on the same
GPUs, for long and for short prompts; the xPyD split that suits each mix, and where a split
does not pay."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simulator.lessons.core import Findings, col
from simulator.report.page import Section
from simulator.report.sweep_figures import metric_figure
from simulator.sweep.table import Row, number

LOAD = "workload.arrival.concurrency"
LAYOUT = "layout"  # derived: "aggregated ×4" or the xPyD ratio
TRAFFIC = "traffic"  # derived: "3000-5000 in → 200 out"
AGG = "aggregated"


def _tokens(spec: Any) -> str:
    if not isinstance(spec, Mapping):
        return str(spec)
    if spec.get("kind") == "fixed":
        return str(spec.get("value"))
    if spec.get("kind") == "uniform":
        return f"{spec.get('min')}-{spec.get('max')}"
    return str(spec.get("kind"))


def derive(r: Row) -> dict[str, Any]:
    ratio = r.get("disaggregation.ratio")
    dep = r.get("deployment")
    replicas = dep.get("replicas") if isinstance(dep, Mapping) else None
    layout = str(ratio) if ratio else f"{AGG} ×{replicas or 1}"
    traffic = (f"{_tokens(r.get('workload.input_tokens'))} in → "
               f"{_tokens(r.get('workload.output_tokens'))} out")
    return {LAYOUT: layout, TRAFFIC: traffic}


def good_per_gpu(r: Row) -> float:
    """Requests per second per GPU that met every SLO."""
    return col(r, "goodput_requests_per_s") / col(r, "num_gpus")


def _mean_input(r: Row) -> float:
    spec = r.get("workload.input_tokens")
    if isinstance(spec, Mapping) and spec.get("kind") == "uniform":
        return (float(spec["min"]) + float(spec["max"])) / 2
    if isinstance(spec, Mapping) and spec.get("kind") == "fixed":
        return float(spec["value"])
    return 0.0


def best_by_layout(rows: Sequence[Row]) -> dict[str, Row]:
    """Each layout's point with the most good requests per GPU (over the loads)."""
    out: dict[str, Row] = {}
    for r in rows:
        if number(r, "goodput_requests_per_s") is None:
            continue
        cur = out.get(str(r[LAYOUT]))
        if cur is None or good_per_gpu(r) > good_per_gpu(cur):
            out[str(r[LAYOUT])] = r
    return out


def _at(rows: Sequence[Row], layout: str, load: float) -> Row | None:
    return next((r for r in rows if r[LAYOUT] == layout and col(r, LOAD) == load), None)


def _traffic_lines(rows: Sequence[Row], tpot_slo_s: float | None
                   ) -> tuple[list[str], list[Row], list[Row]]:
    """The sentences of one traffic mix, the points worth a breakdown, and the rows quoted."""
    best = best_by_layout(rows)
    agg = next((r for k, r in best.items() if k.startswith(AGG)), None)
    splits = {k: r for k, r in best.items() if not k.startswith(AGG)}
    if agg is None or not splits:
        return [], [], []
    name, split = max(splits.items(), key=lambda kv: good_per_gpu(kv[1]))
    traffic = str(agg[TRAFFIC])
    g_agg, g_split = good_per_gpu(agg), good_per_gpu(split)
    lines = []
    head = (f"{traffic.capitalize()}: the best split, {name}, carries {g_split:.2f} good "
            f"requests/s per GPU (at concurrency {col(split, LOAD):.0f}) against {g_agg:.2f} "
            f"for {str(agg[LAYOUT]).split('×')[-1]} aggregated replicas on the same GPUs (at "
            f"{col(agg, LOAD):.0f})")
    if g_split > g_agg:
        # Throughput at equal latency: the split's point at the aggregated best's load.
        same = _at(rows, name, col(agg, LOAD))
        text = head + f", {g_split / g_agg:.2f}×."
        if same is not None:
            text += (
                f" At concurrency {col(agg, LOAD):.0f}, {name} gives "
                f"{col(same, 'output_tokens_per_s_per_gpu'):.0f} output tokens/s per GPU "
                f"against {col(agg, 'output_tokens_per_s_per_gpu'):.0f} at a TPOT p99 of "
                f"{col(same, 'tpot_s.p99') * 1e3:.1f} ms against "
                f"{col(agg, 'tpot_s.p99') * 1e3:.1f} ms: no prefill chunk stretches a decode "
                f"step any more. The price is the first token: TTFT p99 "
                f"{col(same, 'ttft_s.p99'):.2f} s against {col(agg, 'ttft_s.p99'):.2f} s "
                f"(a prefill queue and a KV transfer of "
                f"{col(same, 'disaggregation.kv_transfer_s.p50') * 1e3:.0f} ms).")
        lines.append(text)
    else:
        busy = number(split, "disaggregation.prefill.busy_fraction")
        text = head + (f": here disaggregation does not pay ({g_agg / g_split:.2f}× for the "
                       f"aggregated replicas). Their TPOT p99 at that point is "
                       f"{col(agg, 'tpot_s.p99') * 1e3:.1f} ms")
        if tpot_slo_s is not None:
            text += f", inside the {tpot_slo_s * 1e3:.0f} ms SLO"
        text += (": the prefill chunks beside the decode steps do not stretch them enough to "
                 "matter, so nothing is won by moving them away")
        if busy is not None:
            text += (f", while the prefill pool of {name} sits busy only {100 * busy:.0f} % of "
                     "the time on GPUs that could be decoding")
        text += (", and every request pays a KV transfer "
                 f"({col(split, 'disaggregation.kv_transfer_s.p50') * 1e3:.1f} ms p50).")
        lines.append(text)
    others = sorted(splits.items(), key=lambda kv: -good_per_gpu(kv[1]))[1:]
    why = []
    for other, r in others:
        pool = r.get("disaggregation.bottleneck_pool")
        why.append(f"{other} {good_per_gpu(r):.2f}" + (f" (its {pool} pool saturates first)"
                                                       if pool else ""))
    if why:
        lines.append(f"The split must match the mix: for {traffic}, {name} is best; "
                     + ", ".join(why) + " good requests/s per GPU.")
    points = [agg, split]
    same = _at(rows, name, col(agg, LOAD))
    if same is not None and same is not split:
        points = [agg, same]
    return lines, points, [*best.values(), *points]


def analyze(rows: list[Row], spec: Mapping[str, Any], out_dir: Path) -> Findings:
    by_traffic: dict[str, list[Row]] = {}
    for r in sorted(rows, key=lambda r: -_mean_input(r)):
        by_traffic.setdefault(str(r[TRAFFIC]), []).append(r)
    lines: list[str] = []
    points: list[Row] = []
    cited: list[Row] = []
    slo = spec.get("slo") or {}
    tpot_slo = float(slo["tpot_p99_s"]) if slo.get("tpot_p99_s") is not None else None
    for group in by_traffic.values():
        text, pts, quoted = _traffic_lines(group, tpot_slo)
        lines.extend(text)
        points.extend(pts)
        cited.extend(quoted)
    if not lines:
        lines.append("No SLO or no aggregated baseline in this run: nothing to compare.")
        return Findings(lines, points)
    figures = {f"{r[TRAFFIC]}, {r[LAYOUT]} at {col(r, LOAD):.0f}: good requests/s per GPU":
               good_per_gpu(r) for r in cited}
    if tpot_slo is not None:
        figures["TPOT p99 SLO (s)"] = tpot_slo
    extra = []
    for traffic, group in by_traffic.items():
        good = [{**r, "good": good_per_gpu(r)} for r in group
                if number(r, "goodput_requests_per_s") is not None]
        extra.append(Section(
            f"Good requests per GPU: {traffic}", "Requests per second per GPU that met both "
            "SLOs, against the requests in flight, per layout: the peak of each line is what "
            "that layout can serve within its SLOs.",
            metric_figure(good, LOAD, "good", LAYOUT, title=f"Goodput per GPU, {traffic}",
                          x_label="concurrency (requests in flight)",
                          y_label="good requests/s per GPU")))
    return Findings(lines, points, extra, cited=cited, figures=figures)
