"""Plotly figures of a sweep: the frontier, the frontier split by one key, latency against load,
and where the step time goes for chosen points."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from simulator.sweep.frontier import Axis, pareto_mask
from simulator.sweep.table import Row, number, value_label

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#bcbd22", "#7f7f7f")
LOAD_KEYS = ("workload.arrival.concurrency", "workload.arrival.rate_per_s")
COLOR_PREFERENCE = ("deployment.tensor_parallel", "deployment.precision.weights",
                    "deployment.attention_data_parallel", "deployment.replicas",
                    "deployment.precision.kv_cache", "hardware.gpu", "model")
BREAKDOWN_PARTS = (("compute_s", "compute"), ("memory_s", "memory (HBM)"),
                   ("communication_s", "communication"), ("overhead_s", "kernel overhead"),
                   ("host_s", "host (CPU)"))
MAX_GROUPS = 8


def hover(row: Mapping[str, Any], axes: Sequence[str], extra: Sequence[Axis]) -> str:
    """The config of a point and its headline metrics, for the hover box."""
    lines = [f"<b>{row.get('point_id', '')}</b>"]
    lines += [f"{a} = {value_label(row.get(a))}" for a in axes]
    shown = set()
    for ax in extra:
        if ax.column not in shown:
            shown.add(ax.column)
            lines.append(f"{ax.label}: {value_label(row.get(ax.column))}")
    for col, label in (("ttft_s.p99", "TTFT p99 s"), ("tpot_s.p99", "TPOT p99 s"),
                       ("requests_per_s", "req/s"), ("num_gpus", "GPUs")):
        if col not in shown and row.get(col) is not None:
            lines.append(f"{label}: {value_label(row.get(col))}")
    return "<br>".join(lines)


def ok_rows(rows: Sequence[Row], *axes: Axis) -> list[Row]:
    return [r for r in rows if r.get("point_status", "ok") == "ok"
            and all(number(r, a.column) is not None for a in axes)]


def _layout(fig: go.Figure, x: Axis, y: Axis, title: str) -> None:
    fig.update_layout(
        title=title, template="plotly_white", height=520, hovermode="closest",
        xaxis_title=f"{x.label} ({x.direction})", yaxis_title=f"{y.label} ({y.direction})",
        legend={"orientation": "v"},
    )


def frontier_figure(rows: Sequence[Row], axes: Sequence[str], x: Axis, y: Axis) -> go.Figure:
    data = ok_rows(rows, x, y)
    xs = [number(r, x.column) for r in data]
    ys = [number(r, y.column) for r in data]
    mask = pareto_mask(xs, ys, (x.maximize, y.maximize))
    fig = go.Figure()
    others = [i for i, m in enumerate(mask) if not m]
    front = sorted((i for i, m in enumerate(mask) if m), key=lambda i: xs[i] or 0.0)
    fig.add_trace(go.Scatter(
        x=[xs[i] for i in others], y=[ys[i] for i in others], mode="markers",
        name="dominated", marker={"color": "#b0b0b0", "size": 7},
        hovertext=[hover(data[i], axes, (x, y)) for i in others], hoverinfo="text",
    ))
    fig.add_trace(go.Scatter(
        x=[xs[i] for i in front], y=[ys[i] for i in front], mode="lines+markers",
        name="frontier", line={"color": PALETTE[0], "width": 2},
        marker={"size": 10, "color": PALETTE[0]},
        hovertext=[hover(data[i], axes, (x, y)) for i in front], hoverinfo="text",
    ))
    _layout(fig, x, y, f"Frontier: {len(front)} of {len(data)} points are not beaten on both axes")
    return fig


def choose_color_key(rows: Sequence[Row], axes: Sequence[str]) -> str | None:
    """A swept key with 2..10 distinct values, preferring TP and the weight format."""
    def distinct(key: str) -> int:
        return len({repr(r.get(key)) for r in rows})

    candidates = [a for a in axes if 2 <= distinct(a) <= len(PALETTE) and a not in LOAD_KEYS]
    for pref in COLOR_PREFERENCE:
        if pref in candidates:
            return pref
    return candidates[0] if candidates else None


def split_figure(rows: Sequence[Row], axes: Sequence[str], key: str, x: Axis,
                 y: Axis) -> go.Figure:
    """One colour per value of `key`, each with its own frontier line."""
    data = ok_rows(rows, x, y)
    groups: dict[str, list[Row]] = {}
    for r in data:
        groups.setdefault(value_label(r.get(key)), []).append(r)
    fig = go.Figure()
    for n, (value, members) in enumerate(sorted(groups.items(), key=lambda kv: _sort_key(kv[0]))):
        color = PALETTE[n % len(PALETTE)]
        xs = [number(r, x.column) for r in members]
        ys = [number(r, y.column) for r in members]
        mask = pareto_mask(xs, ys, (x.maximize, y.maximize))
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="markers", name=f"{key} = {value}", legendgroup=value,
            marker={"color": color, "size": 8, "opacity": 0.55},
            hovertext=[hover(r, axes, (x, y)) for r in members], hoverinfo="text",
        ))
        front = sorted((i for i, m in enumerate(mask) if m), key=lambda i: xs[i] or 0.0)
        fig.add_trace(go.Scatter(
            x=[xs[i] for i in front], y=[ys[i] for i in front], mode="lines",
            name=f"frontier of {value}", legendgroup=value, showlegend=False,
            line={"color": color, "width": 2}, hoverinfo="skip",
        ))
    _layout(fig, x, y, f"Frontier split by {key}")
    return fig


def _sort_key(text: str) -> tuple[int, float, str]:
    try:
        return (0, float(text), "")
    except ValueError:
        return (1, 0.0, text)


def latency_figure(rows: Sequence[Row], axes: Sequence[str],
                   rank_by: Axis) -> go.Figure:
    """TTFT and TPOT percentiles against the achieved request rate, one line per config."""
    load_key = next((k for k in LOAD_KEYS if k in axes), None)
    config_keys = [a for a in axes if a != load_key]
    data = [r for r in rows if r.get("point_status", "ok") == "ok"
            and number(r, "requests_per_s") is not None]
    groups: dict[str, list[Row]] = {}
    for r in data:
        label = ", ".join(f"{k.split('.')[-1]}={value_label(r.get(k))}"
                          for k in config_keys) or "all"
        groups.setdefault(label, []).append(r)

    def best(members: list[Row]) -> float:
        vals = [number(r, rank_by.column) for r in members]
        vals_f = [v if rank_by.maximize else -v for v in vals if v is not None]
        return max(vals_f) if vals_f else float("-inf")

    chosen = sorted(groups.items(), key=lambda kv: best(kv[1]), reverse=True)[:MAX_GROUPS]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT (s)", "TPOT (s)"))
    dashes = {"p50": "dot", "p90": "dash", "p99": "solid"}
    for n, (label, members) in enumerate(chosen):
        members.sort(key=lambda r: number(r, "requests_per_s") or 0.0)
        color = PALETTE[n % len(PALETTE)]
        xs = [number(r, "requests_per_s") for r in members]
        for col, metric in ((1, "ttft_s"), (2, "tpot_s")):
            for pct, dash in dashes.items():
                fig.add_trace(go.Scatter(
                    x=xs, y=[number(r, f"{metric}.{pct}") for r in members],
                    mode="lines+markers", name=f"{label} {pct}", legendgroup=label,
                    showlegend=(col == 1 and pct == "p99"),
                    line={"color": color, "dash": dash}, marker={"size": 5},
                    hovertext=[f"{label}<br>{metric} {pct}<br>" + hover(r, axes, ())
                               for r in members],
                    hoverinfo="text",
                ), row=1, col=col)
    fig.update_xaxes(title_text="achieved requests/s")
    fig.update_yaxes(type="log")
    note = f" (best {MAX_GROUPS} of {len(groups)} configs)" if len(groups) > MAX_GROUPS else ""
    fig.update_layout(template="plotly_white", height=520,
                      title=f"Latency against load: p50 dotted, p90 dashed, p99 solid{note}")
    return fig


def breakdown_figure(items: Sequence[tuple[str, Mapping[str, float]]]) -> go.Figure:
    """Mean time of one engine step by kind, for each chosen point (stacked bars, ms)."""
    labels = [label for label, _ in items]
    fig = go.Figure()
    for n, (col, name) in enumerate(BREAKDOWN_PARTS):
        fig.add_trace(go.Bar(
            y=labels, x=[1e3 * parts.get(col, 0.0) for _, parts in items], name=name,
            orientation="h", marker={"color": PALETTE[n % len(PALETTE)]},
            hovertemplate=f"{name}: %{{x:.3f}} ms<extra></extra>",
        ))
    fig.update_layout(barmode="stack", template="plotly_white",
                      height=max(300, 70 * len(items) + 150),
                      xaxis_title="mean time per engine step (ms)",
                      yaxis_title="point (its swept values)",
                      title="Where the step time goes (frontier points, rerun with a time series)")
    fig.update_yaxes(automargin=True)
    return fig


def metric_figure(rows: Sequence[Row], x: str, y: str, group: str, *, title: str,
                  x_label: str, y_label: str, log_x: bool = True,
                  reference_y: float | None = None, scale: float = 1.0) -> go.Figure:
    """Column `y` (times `scale`, e.g. 1e3 for ms) against column `x`, one line per value of
    column `group` (e.g. a speed-up against the load, per method; "" for one line); a dashed
    horizontal line at `reference_y` if given."""
    groups: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        xv, yv = number(r, x), number(r, y)
        if xv is not None and yv is not None:
            label = value_label(r.get(group)) if group else y_label  # "": one series
            groups.setdefault(label, []).append((xv, yv * scale))
    fig = go.Figure()
    for n, (label, pts) in enumerate(sorted(groups.items(), key=lambda kv: _sort_key(kv[0]))):
        pts.sort()
        fig.add_trace(go.Scatter(
            x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers", name=label,
            line={"color": PALETTE[n % len(PALETTE)], "width": 2}, marker={"size": 7},
            hovertemplate=f"{label}<br>{x_label} %{{x}}<br>{y_label} %{{y:.3g}}<extra></extra>",
        ))
    if reference_y is not None:
        fig.add_hline(y=reference_y, line={"color": "#7f7f7f", "dash": "dash"})
    fig.update_layout(title=title, template="plotly_white", height=460,
                      xaxis_title=x_label, yaxis_title=y_label)
    if log_x:
        fig.update_xaxes(type="log")
    return fig
