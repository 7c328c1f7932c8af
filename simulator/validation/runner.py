"""Run every validation row, score signed errors, group statistics, and the regression guard."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from simulator.validation.catalog import likely_causes, shared_causes
from simulator.validation.ranking import Point, RankedPair, ranked_pairs, ranking_markdown
from simulator.validation.rows import Row, load_rows, metric_class, metric_value
from simulator.validation.slo_rate import RATIO_METRIC, predict_ratio, ratio_parts
from simulator.validation.speculative_rows import (
    SPEEDUP_METRIC,
    predict_speculative,
    speculative_setups,
    speedup_parts,
)
from simulator.validation.sweep_rows import SWEEP_METRIC, predict_sweep_ratio

BASELINE = Path(__file__).parent / "baseline.json"
REPORT = Path(__file__).parent / "REPORT.md"


@dataclass(frozen=True, slots=True)
class Scored:
    row: Row
    predicted: float
    low: float | None
    high: float | None
    parts: tuple[float, float] | None = None  # a ratio's predicted numerator, denominator

    @property
    def error(self) -> float:
        assert self.row.measured is not None
        return self.predicted / self.row.measured - 1.0

    @property
    def part_errors(self) -> tuple[float, float] | None:
        """Signed errors of the ratio's numerator and denominator, where both are known."""
        m = self.row.measured_parts
        if m is None or self.parts is None:
            return None
        return self.parts[0] / m[0] - 1.0, self.parts[1] / m[1] - 1.0

    @property
    def covered(self) -> bool | None:
        if self.low is None or self.high is None or self.row.measured is None:
            return None
        return self.low <= self.row.measured <= self.high


Cache = dict[str, list[dict[str, Any]]]


def predict(row: Row, band: bool = False, cache: Cache | None = None) -> Scored:
    """Score one row. Rows that share a setup (TTFT, TPOT and tokens/s of one published point)
    share one simulation through `cache`, keyed by the scenario without its name."""
    import simulator
    from simulator.validation.uncertainty import simulate_profiles

    if row.metric == RATIO_METRIC:
        parts = ratio_parts(row.id) if row.measured_parts is not None else None
        return Scored(row, predict_ratio(row.id), None, None, parts)
    if row.metric == SWEEP_METRIC:
        return Scored(row, predict_sweep_ratio(row.id), None, None)
    if not simulated_row(row):
        if row.metric == SPEEDUP_METRIC and row.measured_parts is not None:
            parts = speedup_parts(row.id, row.scenario())
            return Scored(row, parts[0] / parts[1], None, None, parts)
        return Scored(row, predict_speculative(row.id, row.metric, row.scenario()), None, None)
    setup = {k: v for k, v in row.scenario().items() if k != "name"}
    key = json.dumps(setup, sort_keys=True) + f"|band={band}"
    cache = {} if cache is None else cache
    if key not in cache:
        cache[key] = simulate_profiles(simulator.load_scenario(row.scenario()), band)
    values = [metric_value(r, row.metric) for r in cache[key]]
    if band:
        mid, a, b = values
        return Scored(row, mid, min(a, b), max(a, b))
    return Scored(row, values[0], None, None)


def simulated_row(row: Row) -> bool:
    """Whether a row is scored through one plain simulation of its scenario (not a goodput
    ratio, a concurrency sweep or a speculative setup with its own path)."""
    return row.metric not in (RATIO_METRIC, SWEEP_METRIC) and row.id not in speculative_setups()


def group_stats_errors(groups: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Rows, median and p90 |error| of each group of signed errors."""
    out: dict[str, dict[str, float]] = {}
    for g, errs in sorted(groups.items()):
        med, p90 = _stats(errs)
        out[g] = {"rows": len(errs), "median_abs_error": med, "p90_abs_error": p90}
    return out


def _stats(errors: list[float]) -> tuple[float, float]:
    a = sorted(abs(e) for e in errors)
    p90 = a[min(len(a) - 1, round(0.9 * (len(a) - 1)))]
    return statistics.median(a), p90


def group_stats(scored: Iterable[Scored]) -> dict[str, dict[str, dict[str, float]]]:
    """Median and p90 absolute error by what is measured (TTFT, TPOT, throughput, ratio), GPU,
    weight format, model family, exact metric key, and overall, over the rows that test the
    simulator; rows kept out of the headline (in-sample, insensitive, sampler checks: Row.check)
    count only under `checks` and overall by their kind."""
    scored = list(scored)
    keys: dict[str, Callable[[Scored], str]] = {
        "measures": lambda s: metric_class(s.row.metric),
        "gpu": lambda s: s.row.gpu,
        "format": lambda s: s.row.weights,
        "family": lambda s: s.row.family,
        "metric": lambda s: s.row.metric,
        "overall": lambda s: "all" if s.row.check is None else s.row.check,
        "checks": lambda s: str(s.row.check),
    }
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, key in keys.items():
        groups: dict[str, list[float]] = {}
        for s in scored:
            headline = s.row.check is None
            if (name == "checks" and headline) or (name not in ("checks", "overall")
                                                    and not headline):
                continue
            groups.setdefault(key(s), []).append(s.error)
        out[name] = group_stats_errors(groups)
    return out


def run_validation(subset: str | None = None, band: bool = False) -> dict[str, Any]:
    rows = [r for r in load_rows() if subset is None or r.subset == subset]
    cache: Cache = {}
    scored = [predict(r, band, cache) for r in rows if not r.pending and r.measured is not None]
    pending = [r for r in rows if r.pending]
    coverage = [s.covered for s in scored if s.covered is not None]
    return {
        "rows": [
            {
                "id": s.row.id,
                "subset": s.row.subset,
                "metric": s.row.metric,
                "measures": metric_class(s.row.metric),
                "unit": s.row.unit,
                "measured": s.row.measured,
                "predicted": s.predicted,
                "error": s.error,
                "low": s.low,
                "high": s.high,
                "check": s.row.check,
                "parts": _parts(s),
            }
            for s in scored
        ],
        "groups": _with_parts(group_stats(scored), scored) if scored else {},
        "band_coverage": sum(coverage) / len(coverage) if coverage else None,
        "ranking": [asdict(p) for p in ranked_pairs(rank_points(scored))],
        "pending": [{"id": r.id, "pending": r.pending} for r in pending],
    }


def _parts(s: Scored) -> dict[str, Any] | None:
    errors = s.part_errors
    if errors is None or s.parts is None or s.row.measured_parts is None:
        return None
    return {"unit": s.row.parts_unit, "measured": list(s.row.measured_parts),
            "predicted": list(s.parts), "errors": list(errors)}


def _with_parts(groups: dict[str, dict[str, dict[str, float]]], scored: Sequence[Scored]
                ) -> dict[str, dict[str, dict[str, float]]]:
    """The headline's per-measure table with `ratio parts`: the absolute numerators and
    denominators of the ratio rows that publish them, each scored as a quantity of its own."""
    errors = [e for s in scored if s.row.check is None and (pe := s.part_errors) is not None
              for e in pe]
    if errors:
        groups.setdefault("measures", {}).update(group_stats_errors({"ratio parts": errors}))
    return groups


def rank_points(scored: Iterable[Scored]) -> list[Point]:
    """The plainly simulated rows as configs grouped by model, GPU, metric and workload shape
    (ratios and speculative setups compare two runs each and are left out)."""
    out = []
    for s in scored:
        r = s.row
        if not simulated_row(r) or r.measured is None:
            continue
        shape = f"{r.fields['input_tokens']}/{r.fields['output_tokens']}"
        out.append(Point(f"{r.model} {r.gpu} {r.metric} {shape}", r.id, r.measured, s.predicted))
    return out


def load_baseline() -> dict[str, float]:
    if not BASELINE.exists():
        return {}
    data: dict[str, float] = json.loads(BASELINE.read_text())
    return data


def write_baseline(result: dict[str, Any]) -> None:
    BASELINE.write_text(
        json.dumps({r["id"]: r["predicted"] for r in result["rows"]}, indent=1, sort_keys=True)
        + "\n"
    )


def fmt_value(v: float, unit: str = "") -> str:
    """Latencies in milliseconds; whole numbers for rates; three significant digits for ratios
    (speed-ups, 0.16x)."""
    if unit == "s":
        return f"{v * 1e3:.3g} ms" if v < 1 else f"{v:.3g} s"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def band_text(row: dict[str, Any]) -> str:
    """`low-high` of a scored row's uncertainty band, empty without one."""
    if row["low"] is None:
        return ""
    return f"{fmt_value(row['low'], row['unit'])}-{fmt_value(row['high'], row['unit'])}"


# The fidelity issue's targets for every metric (issue 15): median |error| and p90 |error|.
TARGET_MEDIAN, TARGET_P90 = 0.10, 0.25


def metric_table(groups: dict[str, dict[str, float]]) -> list[str]:
    """Markdown rows: per measured quantity, rows, median and p90 |error| against the targets."""
    lines = [
        f"| measures | rows | median abs error | p90 abs error | target (median <= "
        f"{TARGET_MEDIAN:.0%}, p90 <= {TARGET_P90:.0%}) |",
        "|---|---:|---:|---:|---|",
    ]
    for g, st in groups.items():
        ok = st["median_abs_error"] <= TARGET_MEDIAN and st["p90_abs_error"] <= TARGET_P90
        lines.append(
            f"| {g} | {st['rows']} | {st['median_abs_error']:.1%} | {st['p90_abs_error']:.1%} | "
            f"{'met' if ok else 'missed'} |"
        )
    return lines


def parts_table(result: dict[str, Any]) -> list[str]:
    """Markdown: each ratio row that publishes its parts, with the parts' own errors."""
    rows = [r for r in result["rows"] if r.get("parts")]
    if not rows:
        return []
    lines = [
        "Ratios with their parts: a ratio can be right because its numerator and denominator "
        "are wrong alike, so where the source publishes both they are scored too (`ratio "
        "parts` above).",
        "",
        "| row | ratio error | measured parts | predicted parts | part errors |",
        "|---|---:|---|---|---|",
    ]
    for r in rows:
        p, unit = r["parts"], r["parts"]["unit"]
        m = " / ".join(f"{v:.4g}" for v in p["measured"])
        q = " / ".join(f"{v:.4g}" for v in p["predicted"])
        e = ", ".join(f"{v:+.1%}" for v in p["errors"])
        lines.append(f"| {r['id']} | {r['error']:+.1%} | {m} {unit} | {q} {unit} | {e} |")
    return [*lines, ""]


def checks_table(result: dict[str, Any]) -> list[str]:
    """Markdown: the rows kept out of the headline errors, by kind, with why."""
    checks = result["groups"].get("checks", {})
    if not checks:
        return []
    reasons: dict[str, set[str]] = {}
    for r in load_rows():
        if r.check is not None:
            reasons.setdefault(r.check, set()).add(r.check_reason)
    lines = [
        "Kept out of the errors above: rows that cannot test the simulator's fidelity (each "
        "row's `check` in its source file, sampler checks by their metric).",
        "",
        "| check | rows | median abs error | p90 abs error | why |",
        "|---|---:|---:|---:|---|",
    ]
    for kind, st in checks.items():
        why = "; ".join(sorted(reasons.get(kind, set())))
        lines.append(f"| {kind} | {st['rows']} | {st['median_abs_error']:.1%} | "
                     f"{st['p90_abs_error']:.1%} | {why} |")
    return [*lines, ""]


def likely_cause_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per row (its error, its own text, the shared cause it names), then each named
    cause's text once; a row without a likely_cause is marked not analysed."""
    explained, shared = likely_causes(), shared_causes()
    lines: list[str] = []
    named: list[str] = []
    for r in rows:
        lc = explained.get(r["id"])
        if lc is None:
            lines.append(f"- {r['id']} ({r['error']:+.1%}): unknown: not yet analysed")
            continue
        text = lc.text
        if lc.cause:
            text = f"{text} (cause: {lc.cause})" if text else f"cause: {lc.cause}"
            if lc.cause not in named:
                named.append(lc.cause)
        lines.append(f"- {r['id']} ({r['error']:+.1%}): {text}")
    if named:
        lines += ["", "The causes these rows name (each source file's `causes`):", ""]
        lines += [f"- {name}: {shared[name]}" for name in named]
    return lines


def report_markdown(result: dict[str, Any], ablation_lines: list[str] | None = None,
                    measured_lines: list[str] | None = None) -> str:
    """REPORT.md: per-metric errors, the cause-by-cause ablation section when given
    (validation/ablation.py), the measured runs' section when given (measured/causes.py),
    every row, the groups, the largest errors with their likely causes, and the pending
    rows."""
    lines = [
        "# Validation against published measurements",
        "",
        "Generated by `frontier validate --write-report`; rows live in "
        "`simulator/validation/sources/`, one file per source, with their setups, assumptions "
        "and likely causes.",
        "",
        "## Errors per metric",
        "",
        "TTFT as the client measures it (front-end costs included), TPOT as `vllm bench serve` "
        "defines it, and throughput (tokens/s, per GPU where the source reports it so) are "
        "scored separately; ratios are the speculative speed-ups, the disaggregation goodput "
        "ratios and the per-GPU throughput ratios read off concurrency sweeps "
        "(sources/10-dynamo.yaml).",
        "",
        *metric_table(result["groups"].get("measures", {})),
        "",
        *checks_table(result),
        *parts_table(result),
        *(ablation_lines or []),
        *(measured_lines or []),
        *ranking_markdown([RankedPair(**p) for p in result["ranking"]], TARGET_MEDIAN),
        "## Every row",
        "",
        "| row | measured | predicted | error | band | check |",
        "|---|---:|---:|---:|---|---|",
    ]
    for r in result["rows"]:
        measured, predicted = (fmt_value(r[k], r["unit"]) for k in ("measured", "predicted"))
        lines.append(
            f"| {r['id']} | {measured} | {predicted} | {r['error']:+.1%} | {band_text(r)} | "
            f"{r['check'] or ''} |"
        )
    lines += [
        "",
        "| group | value | rows | median abs error | p90 abs error |",
        "|---|---|---:|---:|---:|",
    ]
    for gname, groups in result["groups"].items():
        if gname == "measures":
            continue
        for g, st in groups.items():
            lines.append(
                f"| {gname} | {g} | {st['rows']} | {st['median_abs_error']:.1%} | "
                f"{st['p90_abs_error']:.1%} |"
            )
    if result["band_coverage"] is not None:
        cov = result["band_coverage"]
        lines += ["", f"The uncertainty band covers the measurement on {cov:.0%} of rows."]
    lines += ["", "## Largest errors and their likely causes", ""]
    lines += likely_cause_lines(sorted(result["rows"], key=lambda r: -abs(r["error"]))[:8])
    lines += ["", "## Pending rows (need a technique not simulated yet)", ""]
    lines += [f"- {p['id']}: {p['pending']}" for p in result["pending"]]
    return "\n".join(lines) + "\n"
