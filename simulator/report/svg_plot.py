"""A sweep's frontier as a small static SVG (no browser, no plotting engine): points coloured
by one swept key, each group's Pareto line, axis titles with units. For pages that cannot run
JavaScript, such as the README's picture (`frontier report DIR --svg FILE`)."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from simulator.report.sweep_figures import PALETTE, choose_color_key, ok_rows
from simulator.sweep.frontier import Axis, pareto_mask
from simulator.sweep.table import Row, number, value_label

WIDTH, HEIGHT = 720, 440
LEFT, RIGHT, TOP, BOTTOM = 78, 170, 40, 60  # margins: axis labels left, legend right


def _ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]."""
    span = hi - lo if hi > lo else max(abs(hi), 1.0)
    step = 10 ** math.floor(math.log10(span / count))
    for mult in (1, 2, 5, 10):
        if span / (step * mult) <= count:
            step *= mult
            break
    start = math.floor(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 2)]


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 10 or v == 0 else f"{v:.3g}"


def frontier_svg(rows: Sequence[Row], axes: Sequence[str], x: Axis, y: Axis,
                 title: str) -> str:
    """The SVG text of the frontier plot of a sweep's rows."""
    good = ok_rows(rows, x, y)
    key = choose_color_key(good, axes)
    groups: dict[str, list[Row]] = {}
    for r in good:
        groups.setdefault(value_label(r.get(key)) if key else "all points", []).append(r)
    xs = [number(r, x.column) or 0.0 for r in good]
    ys = [number(r, y.column) or 0.0 for r in good]
    xt = _ticks(min(xs, default=0.0), max(xs, default=1.0))
    yt = _ticks(0.0, max(ys, default=1.0))
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(v: float) -> float:
        return LEFT + (v - xt[0]) / (xt[-1] - xt[0]) * pw

    def py(v: float) -> float:
        return TOP + ph - (v - yt[0]) / (yt[-1] - yt[0]) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{LEFT}" y="22" font-size="14" font-weight="bold">'
           f'{html.escape(title)}</text>']
    for v in xt:
        out.append(f'<line x1="{px(v):.1f}" y1="{TOP}" x2="{px(v):.1f}" y2="{TOP + ph}" '
                   f'stroke="#eee"/><text x="{px(v):.1f}" y="{TOP + ph + 16}" '
                   f'text-anchor="middle">{_fmt(v)}</text>')
    for v in yt:
        out.append(f'<line x1="{LEFT}" y1="{py(v):.1f}" x2="{LEFT + pw}" y2="{py(v):.1f}" '
                   f'stroke="#eee"/><text x="{LEFT - 6}" y="{py(v) + 4:.1f}" '
                   f'text-anchor="end">{_fmt(v)}</text>')
    out.append(f'<text x="{LEFT + pw / 2:.1f}" y="{HEIGHT - 18}" text-anchor="middle">'
               f'{html.escape(f"{x.label} ({x.direction})")}</text>')
    out.append(f'<text transform="translate(18,{TOP + ph / 2:.1f}) rotate(-90)" '
               f'text-anchor="middle">{html.escape(f"{y.label} ({y.direction})")}</text>')
    for n, (label, members) in enumerate(sorted(groups.items())):
        color = PALETTE[n % len(PALETTE)]
        pts = [(number(r, x.column) or 0.0, number(r, y.column) or 0.0) for r in members]
        mask = pareto_mask([p[0] for p in pts], [p[1] for p in pts], (x.maximize, y.maximize))
        front = sorted(p for p, m in zip(pts, mask, strict=True) if m)
        if len(front) > 1:
            path = " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in front)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" '
                       f'stroke-width="2"/>')
        for (a, b), m in zip(pts, mask, strict=True):
            out.append(f'<circle cx="{px(a):.1f}" cy="{py(b):.1f}" r="4" fill="{color}" '
                       f'fill-opacity="{0.9 if m else 0.3}"/>')
        ly = TOP + 16 + n * 18
        out.append(f'<circle cx="{WIDTH - RIGHT + 20}" cy="{ly - 4}" r="5" fill="{color}"/>'
                   f'<text x="{WIDTH - RIGHT + 30}" y="{ly}">'
                   f'{html.escape((key.split(".")[-1] + " = ") if key else "")}'
                   f'{html.escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
