"""Lesson tp-vs-dp: TP for per-user speed, attention data parallelism for tokens per GPU."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from simulator.lessons.core import Findings, col
from simulator.report.sweep_report import step_breakdown
from simulator.sweep.table import Row, number

DP = "deployment.attention_data_parallel"
LOAD = "workload.arrival.concurrency"


def _share(parts: Mapping[str, float], key: str) -> float:
    return parts.get(key, 0.0) / parts["step_time_s"] if parts.get("step_time_s") else 0.0


def analyze(rows: list[Row], spec: Mapping[str, Any], out_dir: Path) -> Findings:
    tp = sorted((r for r in rows if col(r, DP) == 1), key=lambda r: col(r, LOAD))
    dp = sorted((r for r in rows if col(r, DP) > 1), key=lambda r: col(r, LOAD))
    if not tp or not dp:
        return Findings(["Only one of the two layouts simulated; see results.csv."])
    lines = []
    a, b = tp[0], dp[0]
    lines.append(
        f"At concurrency {col(a, LOAD):.0f}, TP {col(a, 'deployment.tensor_parallel'):.0f} "
        f"gives a TPOT of {col(a, 'tpot_s.p50') * 1e3:.1f} ms against "
        f"{col(b, 'tpot_s.p50') * 1e3:.1f} ms for attention-DP {col(b, DP):.0f}: splitting "
        f"every layer over eight GPUs cuts the weight bytes each GPU streams per token.")
    a, b = tp[-1], dp[-1]
    lines.append(
        f"At concurrency {col(b, LOAD):.0f}, attention-DP reaches "
        f"{col(b, 'output_tokens_per_s_per_gpu'):.0f} output tokens/s per GPU against "
        f"{col(a, 'output_tokens_per_s_per_gpu'):.0f} for TP "
        f"({col(b, 'output_tokens_per_s_per_gpu') / col(a, 'output_tokens_per_s_per_gpu'):.2f}×)"
        f", at {col(b, 'output_tokens_per_s_per_user.p50'):.0f} against "
        f"{col(a, 'output_tokens_per_s_per_user.p50'):.0f} tokens/s per user.")
    figures: dict[str, float] = {}
    for label, r in ((f"TP {col(a, 'deployment.tensor_parallel'):.0f}", a),
                     (f"attention-DP {col(b, DP):.0f}", b)):
        parts = step_breakdown(out_dir / "points" / f"{r['point_id']}.yaml")
        share = _share(parts, "communication_s") if parts else None
        imb = number(r, "attention_dp_imbalance_share")
        text = f"At concurrency {col(r, LOAD):.0f}, {label}: "
        text += (f"communication is {100 * share:.0f}% of a step" if share is not None
                 else "communication share unknown")
        if share is not None:
            figures[f"{label} at {col(r, LOAD):.0f}: communication share of a step"] = share
        if imb is not None:
            text += (f", and {100 * imb:.0f}% of the GPU time is spent waiting for the "
                     f"slowest attention rank")
        lines.append(text + ".")
    return Findings(lines, [tp[0], dp[0], tp[-1], dp[-1]], figures=figures)
