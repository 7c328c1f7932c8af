"""Running a lesson: its sweep file, thinned on request, through the sweep pipeline, then a page
whose sentences are filled in from the run's own rows.
"""

from __future__ import annotations

import copy
import html
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from simulator.calibration.applied import Applied
from simulator.errors import InputError
from simulator.inputs.scenario import apply_overrides
from simulator.inputs.shipped import scenarios_dir
from simulator.inputs.yamlfile import load_yaml_mapping
from simulator.report.page import Section, facts_table, render_page
from simulator.report.sweep_figures import breakdown_figure, frontier_figure, split_figure
from simulator.report.sweep_report import load_sweep_dir, spread, step_breakdown
from simulator.safeio import write_atomic
from simulator.sweep.cost import gpu_prices
from simulator.sweep.frontier import DEFAULT_X, DEFAULT_Y
from simulator.sweep.pipeline import run_sweep
from simulator.sweep.table import Row, number, value_label

USER_COLUMN = DEFAULT_X.column  # output tokens/s per user, p50
GPU_COLUMN = DEFAULT_Y.column  # output tokens/s per GPU
QUICK_REQUESTS = 48  # --quick: requests per point (the curves keep their shape, noise grows)
# The breakdown reruns a point with its step time series, which costs each step op by op: at
# most this many requests (or two per concurrent slot), enough for a stable mean step.
BREAKDOWN_REQUESTS = 32


@dataclass(frozen=True)
class Findings:
    """What a lesson's analysis found: headline sentences and the points worth a breakdown."""

    headlines: list[str]
    breakdown_points: list[Row] = field(default_factory=list)
    extra: list[Section] = field(default_factory=list)
    # The rows the sentences quote (beside the breakdown points) and the figures the analysis
    # computed itself (an interpolation, a step model's share, a block count), by name: the
    # page's data, shown under "Numbers behind the text" and written to numbers.json, from
    # which every number of a sentence must come (tests/test_lessons.py checks it).
    cited: list[Row] = field(default_factory=list)
    figures: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Lesson:
    name: str
    summary: str  # one line for `frontier lesson`
    color_by: str  # the swept key whose frontiers the page compares
    analyze: Callable[[list[Row], Mapping[str, Any], Path], Findings]  # rows, spec, out dir
    quick_keep: int = 3  # values kept per swept axis under --quick (ends and middle)
    quick_keep_by: Mapping[str, int] = field(default_factory=dict)  # per axis (zip: any key)
    quick_requests: int = QUICK_REQUESTS
    rerun: tuple[str, ...] = ("hardware.gpu=b200",)  # the --set the page suggests
    facet_by: str | None = None  # one "Frontier by color_by" figure per value of this key
    # extra columns computed from each result row (e.g. a label that colours the frontier)
    derive: Callable[[Row], dict[str, Any]] | None = None
    label_axes: tuple[str, ...] = ()  # the swept keys that name a breakdown bar (default: all)


def lesson_file(name: str) -> Path:
    return scenarios_dir() / "lessons" / f"{name}.yaml"


def ok_rows(rows: Sequence[Row]) -> list[Row]:
    return [r for r in rows if r.get("point_status") == "ok"
            and (number(r, "output_tokens_per_s_per_gpu") or 0.0) > 0.0]


def quick_spec(data: Mapping[str, Any], keep: int, requests: int,
               keep_by: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The same lesson on a reduced grid: each swept list thinned to `keep` values (or its own
    count in `keep_by`), fewer requests per point."""
    keep_by = keep_by or {}
    out = copy.deepcopy(dict(data))
    sweep = out.get("sweep") or {}
    for key, values in list(sweep.items()):
        if key == "zip":
            groups = values if isinstance(values, list) else [values]
            for g in groups:
                n = len(next(iter(g.values())))
                k = next((keep_by[p] for p in g if p in keep_by), keep)
                idx = spread(list(range(n)), k)
                for k in g:
                    g[k] = [g[k][i] for i in idx]
        elif isinstance(values, list):
            sweep[key] = spread(values, keep_by.get(key, keep))
    wl = out.setdefault("workload", {})
    wl["num_requests"] = min(int(wl.get("num_requests", requests)), requests)
    return out


def lesson_spec(lesson: Lesson, overrides: Sequence[str], quick: bool) -> dict[str, Any]:
    path = lesson_file(lesson.name)
    data = load_yaml_mapping(path, "lesson", "a sweep file")
    swept = set((data.get("sweep") or {}).keys())
    for group in (data.get("sweep") or {}).get("zip", []) or []:
        swept.update(group)
    for item in overrides:
        key = item.partition("=")[0].strip()
        if key in swept:
            raise InputError(f"--set {item!r}: {key} is what lesson {lesson.name} sweeps; "
                             f"set another key (e.g. hardware.gpu or model)")
        if key in ("sweep", "constraints") or key.startswith(("sweep.", "constraints.")):
            raise InputError(f"--set {item!r}: a lesson's grid is fixed; set scenario keys")
    data = apply_overrides(data, overrides)
    if not quick:
        return data
    return quick_spec(data, lesson.quick_keep, lesson.quick_requests, lesson.quick_keep_by)


def run_lesson(lesson: Lesson, out_dir: Path, overrides: Sequence[str] = (), *,
               quick: bool = False, workers: int | None = None,
               progress: IO[str] | None = None,
               calibration: Applied | None = None) -> tuple[list[str], Path]:
    """Sweep the lesson into `out_dir`, write `out_dir/report.html`; return its headlines.
    `calibration`: an overlay's host costs and GPU profiles, given to every point's run."""
    spec = lesson_spec(lesson, overrides, quick)
    stream = progress if progress is not None else sys.stderr
    run_sweep(spec, out_dir, workers=workers, fresh=True, prices=gpu_prices(),
              progress_stream=stream, calibration=calibration)
    _, rows, manifest = load_sweep_dir(out_dir)
    axes = list(manifest["axes"])
    if lesson.derive is not None:
        rows = [{**r, **lesson.derive(r)} for r in rows]
    good = ok_rows(rows)
    if not good:
        raise InputError(f"lesson {lesson.name}: no point simulated; see {out_dir}/results.csv")
    found = lesson.analyze(good, spec, out_dir)
    rerun = " ".join(["frontier lesson", lesson.name,
                      *(f"--set {o}" for o in (overrides or lesson.rerun))])
    ran = " ".join(["frontier lesson", lesson.name, *(f"--set {o}" for o in overrides),
                    *(["--quick"] if quick else [])])
    sections = [Section("What ran", "", html_body="".join(
        f"<p>{html.escape(line)}</p>" for line in setup_lines(spec, ran)))]
    sections.append(Section("What this run shows", "", html_body="".join(
        f"<p>{html.escape(line)}</p>" for line in found.headlines)))
    sections.append(Section(
        "Frontier", "Output tokens/s per GPU against output tokens/s per user (p50), the "
        "convention of the field: up is cheaper, right is faster for each user.",
        frontier_figure(rows, axes, DEFAULT_X, DEFAULT_Y)))
    if lesson.color_by in axes or any(r.get(lesson.color_by) is not None for r in good):
        facet = lesson.facet_by
        if facet is not None and facet not in axes and all(r.get(facet) is None for r in good):
            facet = None
        for where, members in facets(rows, facet):
            sections.append(Section(
                f"Frontier by {lesson.color_by}{where}", "Each value with its own frontier line.",
                split_figure(members, axes, lesson.color_by, DEFAULT_X, DEFAULT_Y)))
    sections.extend(found.extra)
    sections.append(_numbers_section(found, lesson, axes))
    write_atomic(out_dir / NUMBERS_FILE, json.dumps(numbers_record(found), indent=1))
    items = []
    for i, r in enumerate(found.breakdown_points, 1):
        stream.write(f"lesson: step breakdown {i}/{len(found.breakdown_points)}\n")
        stream.flush()
        point = out_dir / "points" / f"{r['point_id']}.yaml"
        if point.is_file() and (parts := step_breakdown(breakdown_scenario(point))):
            label = point_label(r, lesson.label_axes or axes, lesson.color_by, lesson.facet_by)
            items.append((label, parts))
    if items:
        sections.append(Section(
            "Why: the step-time breakdown", "Mean time of one engine step of the points the "
            "text names, by what bounds it (compute, HBM, communication, fixed kernel cost, "
            f"host), from a rerun of up to {BREAKDOWN_REQUESTS} requests (two per concurrent "
            "slot where that is more).", breakdown_figure(items)))
    again = out_dir.parent / f"{out_dir.name}-{_slug(overrides or lesson.rerun)}"
    sections.append(Section("Run it again", f"On other hardware or another model: {rerun}"
                            f" --out {again} (a new folder: this page stays)"))
    page = out_dir / "report.html"
    write_atomic(page, render_page(f"Lesson: {lesson.name}", lesson.summary, sections))
    return found.headlines, page


NUMBERS_FILE = "numbers.json"


def cited_rows(found: Findings) -> list[Row]:
    """The rows the page's sentences quote, once each, in order."""
    seen: dict[str, Row] = {}
    for r in [*found.cited, *found.breakdown_points]:
        seen.setdefault(str(r.get("point_id")), r)
    return list(seen.values())


def numbers_record(found: Findings) -> dict[str, Any]:
    """What numbers.json holds: the point ids of the quoted rows and the computed figures."""
    return {"cited_point_ids": [str(r.get("point_id")) for r in cited_rows(found)],
            "figures": found.figures}


def _numbers_section(found: Findings, lesson: Lesson, axes: Sequence[str]) -> Section:
    """The rows the text quotes (their key metrics) and the figures it computed."""
    metrics = (("TTFT p50 (ms)", "ttft_s.p50", 1e3), ("TPOT p50 (ms)", "tpot_s.p50", 1e3),
               ("tokens/s per user (p50)", USER_COLUMN, 1.0),
               ("tokens/s per GPU", GPU_COLUMN, 1.0))
    head = "".join(f"<th>{html.escape(h)}</th>" for h in ("point", *(m[0] for m in metrics)))
    body = []
    for r in cited_rows(found):
        label = point_label(r, lesson.label_axes or axes, lesson.color_by, lesson.facet_by)
        cells = [html.escape(label)]
        for _, column, scale in metrics:
            v = number(r, column)
            cells.append("" if v is None else f"{v * scale:.4g}")
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    table = f"<table><tr>{head}</tr>{''.join(body)}</table>" if body else ""
    figures = facts_table([(k, f"{v:.6g}") for k, v in found.figures.items()])
    return Section("Numbers behind the text", "The points the sentences quote (every column in "
                   "results.csv) and the figures the analysis computed from them (in "
                   f"{NUMBERS_FILE}).", html_body=table + (figures if found.figures else ""))


def _slug(overrides: Sequence[str]) -> str:
    """'hardware.gpu=b200' -> 'b200': a folder name from the values an override sets."""
    values = [o.partition("=")[2].strip() for o in overrides]
    return "-".join("".join(c if c.isalnum() or c in ".-" else "_" for c in v)
                    for v in values if v) or "again"


def _swept(spec: Mapping[str, Any]) -> dict[str, list[Any]]:
    sweep = dict(spec.get("sweep") or {})
    out = {k: v for k, v in sweep.items() if k != "zip" and isinstance(v, list)}
    for group in sweep.get("zip") or []:
        out.update(group)
    return out


def _value(spec: Mapping[str, Any], path: str, swept: Mapping[str, list[Any]]) -> str:
    """A key's value as the page states it: swept values listed, else the base value."""
    if path in swept:
        return "swept over " + ", ".join(value_label(v) for v in swept[path])
    node: Any = spec
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    if node is not None:
        return value_label(node)
    from simulator.inputs.deployment import AggregatedDeployment

    field = AggregatedDeployment.model_fields.get(path.rsplit(".", 1)[-1])
    default = getattr(field, "default", None) if path.startswith("deployment.") else None
    return f"{value_label(default)} (default)" if isinstance(default, str) else "default"


def setup_lines(spec: Mapping[str, Any], command: str) -> list[str]:
    """What a lesson ran, from its own spec: model, GPUs, engine, formats, workload, SLO and
    the command that reproduces the page."""
    swept = _swept(spec)
    wl = spec.get("workload") or {}

    def lengths(key: str) -> str:
        if f"workload.{key}" in swept:
            return _value(spec, f"workload.{key}", swept)
        d = wl.get(key) or {}
        return str(d.get("value") if d.get("kind") == "fixed" else value_label(d))

    formats = "/".join(_value(spec, f"deployment.precision.{k}", swept)
                       for k in ("weights", "activations", "kv_cache"))
    slo = spec.get("slo") or {}
    lines = [
        f"Model {_value(spec, 'model', swept)} on {_value(spec, 'hardware.gpu', swept)}, "
        f"engine style {_value(spec, 'deployment.engine', swept)}, formats (weights/"
        f"activations/KV) {formats}.",
        f"Workload: {_value(spec, 'workload.arrival.kind', swept)} arrivals, "
        f"{lengths('input_tokens')} tokens in and {lengths('output_tokens')} out, "
        f"{wl.get('num_requests', 'default')} requests per point; SLO: "
        + (", ".join(f"{k} <= {v}" for k, v in slo.items()) or "none") + ".",
        "Swept: " + ("; ".join(f"{k} = {', '.join(value_label(x) for x in v)}"
                               for k, v in swept.items()) or "nothing") + ".",
        f"Command: {command}",
    ]
    return lines


def breakdown_scenario(point: Path) -> dict[str, Any]:
    """The point's scenario with its request count capped for the time-series rerun."""
    data = load_yaml_mapping(point, "point", "a scenario")
    wl = data.get("workload") or {}
    slots = int((wl.get("arrival") or {}).get("concurrency") or 0)
    cap = max(BREAKDOWN_REQUESTS, 2 * slots)
    if int(wl.get("num_requests", cap)) > cap:
        wl["num_requests"] = cap
    return data


def point_label(r: Row, axes: Sequence[str], *derived: str | None) -> str:
    """Short name of a point: the lesson's derived columns (its colour, its facet) and its
    swept values (mappings left out, they make unreadable labels)."""
    parts = [str(r[k]) for k in derived if k and k not in axes and r.get(k) is not None]
    parts += [f"{a.split('.')[-1]}={r.get(a)}" for a in axes
              if not str(r.get(a)).startswith("{") and r.get(a) is not None]
    return ", ".join(parts)


def facets(rows: Sequence[Row], key: str | None) -> list[tuple[str, list[Row]]]:
    """(" on key=value", its rows) per value of `key` in first-seen order; one group if None."""
    if key is None:
        return [("", list(rows))]
    groups: dict[str, list[Row]] = {}
    for r in rows:
        groups.setdefault(str(r.get(key)), []).append(r)
    return [(f" on {key.split('.')[-1]}={v}", members) for v, members in groups.items()]


def col(r: Row, column: str) -> float:
    v = number(r, column)
    if v is None:
        raise InputError(f"lesson: column {column} is missing from the results")
    return v
