"""Lesson traffic: there is no best config, only a best config for a traffic shape and an SLO.
One model on one GPU budget, each layout swept over the load under four shipped traffic shapes;
the winner of each (traffic, SLO tier) pair is the point that meets the tier with the most
output tokens/s per GPU."""

from __future__ import annotations

import functools
import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.inputs.yamlfile import load_yaml_mapping
from simulator.lessons.core import Findings, col, lesson_file
from simulator.report.page import Section
from simulator.sweep.table import Row, number, value_label

LOAD = "workload.arrival.concurrency"
LAYOUT = "layout"  # derived: "TP4 ×2"
TRAFFIC = "traffic"  # derived: the shape's name, from its place in the lesson's zip list
INPUTS = "workload.input_tokens"
GOAL = "output_tokens_per_s_per_gpu"
# The lesson file's traffic shapes, in its zip order (scenarios/lessons/traffic.yaml).
TRAFFIC_NAMES = ("chat", "code completion", "summarization", "reasoning")


@dataclass(frozen=True)
class Tier:
    name: str
    ttft_p99_s: float
    tpot_p99_s: float

    def meets(self, r: Row) -> bool:
        ttft, tpot = number(r, "ttft_s.p99"), number(r, "tpot_s.p99")
        return ttft is not None and tpot is not None and (
            ttft <= self.ttft_p99_s and tpot <= self.tpot_p99_s)

    def describe(self) -> str:
        return (f"{self.name} (TTFT p99 ≤ {self.ttft_p99_s:g} s, TPOT p99 ≤ "
                f"{self.tpot_p99_s * 1e3:g} ms)")


# The second tier: a user who reads a finished answer rather than watching it stream (a batch
# or background job) tolerates ten seconds to the first token and a tenth of a second a token.
RELAXED = Tier("relaxed", 10.0, 0.1)


def tiers(spec: Mapping[str, Any]) -> list[Tier]:
    """The lesson's SLO (the interactive tier) and the relaxed one."""
    slo = spec.get("slo") or {}
    out = []
    if slo.get("ttft_p99_s") is not None and slo.get("tpot_p99_s") is not None:
        out.append(Tier("interactive", float(slo["ttft_p99_s"]), float(slo["tpot_p99_s"])))
    return [*out, RELAXED]


@functools.cache
def _names() -> dict[str, str]:
    """Each traffic shape of the lesson file (its input lengths, as a label) -> its name."""
    spec = load_yaml_mapping(lesson_file("traffic"), "lesson", "a sweep file")
    shapes: list[Any] = next((g[INPUTS] for g in (spec.get("sweep") or {}).get("zip", [])
                              if INPUTS in g), [])
    return {value_label(s): TRAFFIC_NAMES[i] if i < len(TRAFFIC_NAMES) else value_label(s)
            for i, s in enumerate(shapes)}


def derive(r: Row) -> dict[str, Any]:
    """A row's layout ("TP4 ×2") and traffic name."""
    tp, rep = number(r, "deployment.tensor_parallel"), number(r, "deployment.replicas")
    shape = value_label(r.get(INPUTS))
    return {LAYOUT: f"TP{tp or 1:.0f} ×{rep or 1:.0f}", TRAFFIC: _names().get(shape, shape)}


def winner(rows: Sequence[Row], tier: Tier) -> Row | None:
    """The point meeting `tier` with the most output tokens/s per GPU (None: none meets it)."""
    ok = [r for r in rows if tier.meets(r) and number(r, GOAL) is not None]
    return max(ok, key=lambda r: col(r, GOAL)) if ok else None


def _point(r: Row) -> str:
    return (f"{r[LAYOUT]} at {col(r, LOAD):.0f} in flight, {col(r, GOAL):.0f} output tokens/s "
            f"per GPU (TTFT p99 {col(r, 'ttft_s.p99'):.2f} s, TPOT p99 "
            f"{col(r, 'tpot_s.p99') * 1e3:.1f} ms)")


def _other_winners(rows: Sequence[Row], tier: Tier, won: Row) -> list[Row | None]:
    """Each other layout's best point meeting the tier (None where none meets it)."""
    return [winner([r for r in rows if r[LAYOUT] == lay], tier)
            for lay in sorted({str(r[LAYOUT]) for r in rows} - {str(won[LAYOUT])})]


def _best_of_other_layouts(others: Sequence[Row | None]) -> str:
    parts = [f"{r[LAYOUT]} {col(r, GOAL):.0f}" for r in others if r is not None]
    return f" (best of the others: {', '.join(parts)})" if parts else " (no other layout meets it)"


def analyze_with(spec: Mapping[str, Any], rows: list[Row]) -> Findings:
    by_traffic: dict[str, list[Row]] = {}
    order = {name: i for i, name in enumerate(TRAFFIC_NAMES)}
    for r in sorted(rows, key=lambda r: order.get(str(r[TRAFFIC]), len(order))):
        by_traffic.setdefault(str(r[TRAFFIC]), []).append(r)
    lines: list[str] = []
    won: dict[tuple[str, str], Row] = {}
    cited: list[Row] = []
    figures: dict[str, float] = {}
    for tier in tiers(spec):
        figures[f"{tier.name}: TTFT p99 bound (s)"] = tier.ttft_p99_s
        figures[f"{tier.name}: TPOT p99 bound (s)"] = tier.tpot_p99_s
    for traffic, group in by_traffic.items():
        said = []
        for tier in tiers(spec):
            w = winner(group, tier)
            if w is None:
                said.append(f"{tier.describe()}: no point meets it")
                continue
            won[(traffic, tier.name)] = w
            others = _other_winners(group, tier, w)
            cited += [w, *(o for o in others if o is not None)]
            said.append(f"{tier.describe()}: {_point(w)}{_best_of_other_layouts(others)}")
        lines.append(f"{traffic.capitalize()} — " + "; ".join(said) + ".")
    gpus = f"{col(rows[0], 'num_gpus'):.0f}" if rows else "the"
    lines += _summary(won, list(by_traffic), [t.name for t in tiers(spec)], gpus)
    interactive = [w for (_, tn), w in won.items() if tn != RELAXED.name]
    extra = [Section("Winners by traffic and SLO", "The point of each pair that meets the "
                     "tier with the most output tokens/s per GPU, over the layouts and loads "
                     "swept.", html_body=_table(won, list(by_traffic), spec))]
    return Findings(lines, interactive, extra, cited=cited, figures=figures)


def _summary(won: Mapping[tuple[str, str], Row], traffics: Sequence[str],
             tier_names: Sequence[str], gpus: str) -> list[str]:
    """Whether the winner changes, and with what: the traffic, the SLO tier, or neither, read
    off the pairs that have a winner; pairs with none are said."""
    missing = [f"{t} {tn}" for t in traffics for tn in tier_names if (t, tn) not in won]
    by_traffic = any(len({str(won[(t, tn)][LAYOUT]) for t in traffics if (t, tn) in won}) > 1
                     for tn in tier_names)
    by_tier = any(len({str(won[(t, tn)][LAYOUT]) for tn in tier_names if (t, tn) in won}) > 1
                  for t in traffics)
    layouts = {str(w[LAYOUT]) for w in won.values()}
    out = []
    if len(layouts) > 1:
        what = " and ".join(x for x, on in (("the traffic", by_traffic), ("the SLO tier", by_tier))
                            if on) or "the pair"
        pairs = ", ".join(f"{t} {tn} → {w[LAYOUT]}" for (t, tn), w in won.items())
        out.append(f"The winner changes with {what} ({pairs}): no one layout of these {gpus} "
                   f"GPUs is best for every workload, so the sweep that picks one must run your "
                   f"traffic under your SLO.")
    elif layouts:
        out.append(f"Here one layout, {layouts.pop()}, wins every pair that has a winner on "
                   f"this grid: the loads swept are coarse, so a finer grid may still split them.")
    if missing:
        out.append(f"No point meets the tier for {', '.join(missing)}: no layout swept serves "
                   f"that pair at any load.")
    return out


def _table(won: Mapping[tuple[str, str], Row], traffics: Sequence[str],
           spec: Mapping[str, Any]) -> str:
    """The winners already found, one row a traffic, one column a tier."""
    head = "".join(f"<th>{html.escape(t.describe())}</th>" for t in tiers(spec))
    body = []
    for traffic in traffics:
        cells = []
        for tier in tiers(spec):
            w = won.get((traffic, tier.name))
            cells.append("<td>" + (html.escape(_point(w)) if w is not None else "none") + "</td>")
        body.append(f"<tr><th>{html.escape(traffic)}</th>{''.join(cells)}</tr>")
    return (f'<table class="facts"><tr><th>traffic</th>{head}</tr>{"".join(body)}</table>')


def analyze(rows: list[Row], spec: Mapping[str, Any], out_dir: Path) -> Findings:
    return analyze_with(spec, rows)
