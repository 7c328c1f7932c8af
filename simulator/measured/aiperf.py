"""Reader of aiperf's `profile_export_aiperf.json` (ai-dynamo/aiperf, JsonExporter).

Keys relied on: `records` (older and current exports; a flat export with the metric tags at
the top level is read the same), a mapping of metric tag -> {unit, avg, p50, p90, p99, ...};
the tags time_to_first_token and inter_token_latency are required (aiperf's ITL is
(request_latency - TTFT) / (output tokens - 1) per request: what vLLM and frontier call
TPOT), input_sequence_length and output_sequence_length give the mean lengths, and
request_count the measured requests; request_latency, output_token_throughput and
request_throughput are scored when present. `input_config.loadgen` gives the load:
concurrency or request_rate, and warmup_request_count. Units must be ms, s or ns (latencies)
or tokens/sec, requests/sec (rates). Like the other clients' files it does not record the
server's layout: the scenario given alongside does.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from simulator.errors import InputError
from simulator.measured.run import Load, MeasuredRun, bad, check_mapping, integer, number

REQUIRED_TAGS = (
    "time_to_first_token", "inter_token_latency", "input_sequence_length",
    "output_sequence_length", "request_count",
)
_LATENCIES = {"time_to_first_token": "ttft", "inter_token_latency": "tpot",
              "request_latency": "e2e"}
_RATES = {"output_token_throughput": "output_tokens_per_s",
          "request_throughput": "requests_per_s"}
_TO_MS = {"ms": 1.0, "s": 1e3, "sec": 1e3, "ns": 1e-6, "us": 1e-3}
_STATS = {"avg": "mean", "p50": "p50", "p90": "p90", "p99": "p99"}


def is_aiperf(data: dict[str, Any]) -> bool:
    metrics = data.get("records") if isinstance(data.get("records"), dict) else data
    return isinstance(metrics, dict) and "time_to_first_token" in metrics


def read_aiperf(path: Path) -> list[MeasuredRun]:
    """One run from an aiperf profile export; one line naming the first key it lacks."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}; truncated "
                         f"or malformed file?)") from None
    where = str(path)
    data = check_mapping(data, where, "an aiperf profile export")
    metrics = data["records"] if isinstance(data.get("records"), dict) else data
    for tag in REQUIRED_TAGS:
        if not isinstance(metrics.get(tag), dict) or "avg" not in metrics[tag]:
            raise InputError(
                f"{where}: missing records.{tag}.avg (an aiperf profile export has "
                f"{', '.join(REQUIRED_TAGS)})"
            )
    loadgen = (data.get("input_config") or {}).get("loadgen") or {}
    if not isinstance(loadgen, dict):
        raise bad(where, "input_config.loadgen", loadgen, "a mapping")
    count = integer(where, "records.request_count.avg", metrics["request_count"]["avg"])
    conc, rate = loadgen.get("concurrency"), loadgen.get("request_rate")
    if conc is None and rate is None:
        raise InputError(
            f"{where}: input_config.loadgen records neither concurrency nor request_rate "
            f"(the load the run was measured under)"
        )
    load = Load(
        num_requests=count,
        input_tokens=number(where, "records.input_sequence_length.avg",
                            metrics["input_sequence_length"]["avg"]),
        output_tokens=number(where, "records.output_sequence_length.avg",
                             metrics["output_sequence_length"]["avg"]),
        concurrency=None if conc is None else integer(where, "loadgen.concurrency", conc),
        rate_per_s=None if rate is None else number(where, "loadgen.request_rate", rate),
        warmup_requests=integer(where, "loadgen.warmup_request_count",
                                loadgen.get("warmup_request_count") or 0, minimum=0),
    )
    return [MeasuredRun(source=where, row=1, run_id=path.name, format="aiperf", load=load,
                        measured=_metrics(where, metrics))]


def _metrics(where: str, metrics: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for tag, quantity in _LATENCIES.items():
        m = metrics.get(tag)
        if not isinstance(m, dict):
            continue
        unit = str(m.get("unit", "ms")).lower()
        if unit not in _TO_MS:
            raise bad(where, f"records.{tag}.unit", unit, "ms, s, us or ns")
        for key, stat in _STATS.items():
            if m.get(key) is not None:
                value = number(where, f"records.{tag}.{key}", m[key])
                out[f"{quantity}.{stat}"] = value * _TO_MS[unit]
    for tag, name in _RATES.items():
        m = metrics.get(tag)
        if isinstance(m, dict) and m.get("avg") is not None:
            value = number(where, f"records.{tag}.avg", m["avg"])
            if math.isfinite(value):
                out[name] = value
    return out
