"""The report's format facet: each number-format combination (per GPU when the GPU is swept)
with its own frontier and its published quality delta, so speed and quality sit side by side."""

from __future__ import annotations

import html
from collections.abc import Sequence

from simulator.report.page import Section
from simulator.report.sweep_figures import split_figure
from simulator.sweep.frontier import Axis
from simulator.sweep.table import Row, number

FACET = "format (quality)"


def _quality(row: Row) -> str:
    delta = number(row, "quality.delta_pct")
    if delta is None:
        return "quality unknown"
    return f"quality {delta:+.2f} % ({row.get('quality.basis')})"


def facet_label(row: Row, by_gpu: bool) -> str:
    gpu = f"{row.get('hardware.gpu')} " if by_gpu else ""
    return f"{gpu}{row.get('quality.formats')}, {_quality(row)}"


def format_section(rows: Sequence[Row], axes: Sequence[str], x: Axis, y: Axis) -> Section | None:
    """None when the sweep does not vary any number format."""
    if not any(a.startswith("deployment.precision") or ".precision." in a for a in axes):
        return None
    by_gpu = "hardware.gpu" in axes
    ok = [r for r in rows if r.get("point_status") == "ok" and r.get("quality.formats")]
    if not ok:
        return None
    labelled = [{**r, FACET: facet_label(r, by_gpu)} for r in ok]
    groups: dict[str, list[Row]] = {}
    for r in labelled:
        groups.setdefault(str(r[FACET]), []).append(r)
    head = ["GPU / formats (weights/activations/KV)", f"best {y.label}", f"best {x.label}",
            "quality delta (%)", "basis", "benchmark", "source"]
    body = []
    for label, members in sorted(groups.items()):
        best_y = max((number(r, y.column) or 0.0 for r in members), default=0.0)
        best_x = max((number(r, x.column) or 0.0 for r in members), default=0.0)
        first = members[0]
        delta = number(first, "quality.delta_pct")
        cells = [label.split(", quality")[0], f"{best_y:.4g}", f"{best_x:.4g}",
                 "unknown" if delta is None else f"{delta:+.3f}", first.get("quality.basis"),
                 first.get("quality.benchmark"), first.get("quality.source")]
        body.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    table = f'<table class="facts"><tr>{header}</tr>{"".join(body)}</table>'
    return Section(
        "Speed and quality by format",
        "Each number-format combination with its own frontier (the legend carries its published "
        "quality delta against the model's checkpoint), and below, the best of each with the "
        "figure's source. `unknown` means nothing is published for that model and format; a "
        "family basis borrows a sibling model's figure.",
        split_figure(labelled, [*axes, FACET], FACET, x, y),
        html_body=table,
    )
