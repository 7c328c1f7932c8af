"""The sweep report's "Prefill/decode pools" section: for each traffic shape, every xPyD split
with its pools' load, the best split, and which pool saturates first in the others."""

from __future__ import annotations

import html
from collections.abc import Sequence

from simulator.report.page import Section
from simulator.sweep.table import Row, number

RATIO_AXES = ("deployment.prefill.replicas", "deployment.decode.replicas")


def _score(row: Row) -> tuple[float, str]:
    """Good requests per GPU when the scenario has an SLO, else output tokens/s per GPU."""
    gpus = number(row, "num_gpus") or 0.0
    good = number(row, "goodput_requests_per_s")
    if good is not None and gpus > 0:
        return good / gpus, "good req/s per GPU"
    return number(row, "output_tokens_per_s_per_gpu") or 0.0, "output tok/s per GPU"


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return html.escape(str(value))


def best_ratio_lines(rows: Sequence[Row], axes: Sequence[str]) -> list[tuple[str, Row, list[Row]]]:
    """(traffic label, best row, all rows) per combination of the axes other than the ratio."""
    others = [a for a in axes if a not in RATIO_AXES]
    groups: dict[str, list[Row]] = {}
    for r in rows:
        if r.get("point_status") != "ok" or not r.get("disaggregation.ratio"):
            continue
        label = ", ".join(f"{a.split('.')[-1]}={r.get(a)}" for a in others) or "all points"
        groups.setdefault(label, []).append(r)
    return [(label, max(g, key=lambda r: _score(r)[0]), g) for label, g in groups.items()]


def pool_section(rows: Sequence[Row], axes: Sequence[str]) -> Section | None:
    """None when no point is a disaggregated deployment."""
    groups = best_ratio_lines(rows, axes)
    if not groups:
        return None
    head = ["ratio", "score", "TTFT p99 (s)", "TPOT p99 (ms)", "prefill load", "decode load",
            "saturates first"]
    parts = []
    for label, best, group in groups:
        score, unit = _score(best)
        parts.append(
            f"<p><b>{html.escape(label)}</b>: best {html.escape(str(best['disaggregation.ratio']))}"
            f" ({score:.3g} {unit}); {html.escape(str(best.get('disaggregation.hint', '')))}</p>"
        )
        body = []
        for r in sorted(group, key=lambda r: -_score(r)[0]):
            tpot = number(r, "tpot_s.p99")
            cells = [
                r.get("disaggregation.ratio"),
                _score(r)[0],
                number(r, "ttft_s.p99"),
                None if tpot is None else tpot * 1e3,
                number(r, "disaggregation.prefill_load"),
                number(r, "disaggregation.decode_load"),
                r.get("disaggregation.bottleneck_pool"),
            ]
            body.append("<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in cells) + "</tr>")
        header = "".join(f"<th>{h}</th>" for h in head)
        parts.append(f'<table class="facts"><tr>{header}</tr>{"".join(body)}</table>')
    return Section(
        "Prefill/decode pools",
        "Each xPyD split for one traffic shape, best first. A pool's load is its busy share "
        "(prefill) or batch-slot/KV occupancy (decode), or its latency p99 over the SLO it "
        "controls (TTFT for prefill, TPOT for decode); above 1 the pool is past its limit. The "
        "pool with the higher load saturates first and sets the split to move towards.",
        html_body="".join(parts),
    )
