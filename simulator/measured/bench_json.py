"""Readers of the serving-benchmark clients' result JSON: `vllm bench serve --save-result`
(one JSON object per file) and SGLang's `python -m sglang.bench_serving --output-file` (JSONL,
one result object per line). Neither records the server's layout: the deployment comes from
the scenario given alongside (`--scenario`, `--set`).

Keys relied on, from vllm/benchmarks/serve.py and sglang/bench_serving.py:
  both: completed, total_input_tokens, total_output_tokens, request_rate (a number, or inf /
    "inf": every request at once), max_concurrency (null: no limit), mean_ttft_ms,
    mean_tpot_ms; optional: burstiness (vLLM's gamma shape, 1 = Poisson), median_/p90_/p99_
    of ttft, tpot, itl; output_throughput, request_throughput.
  vLLM: num_prompts (optional), mean_/median_/p99_e2el_ms, input_lens and output_lens (the
    per-request lengths, optional), model_id.
  SGLang: mean_/median_/p99_e2e_latency_ms, model_id or model_path (optional).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from simulator.errors import InputError
from simulator.measured.run import (
    LATENCY_QUANTITIES,
    Load,
    MeasuredRun,
    bad,
    check_mapping,
    integer,
    number,
    require,
)

COMMON = (
    "completed", "total_input_tokens", "total_output_tokens", "request_rate",
    "max_concurrency", "mean_ttft_ms", "mean_tpot_ms",
)
# Statistic prefixes of the clients' keys -> the scorer's statistic names.
_STATS = {"mean": "mean", "median": "p50", "p90": "p90", "p99": "p99"}
# The clients' latency names -> the scorer's quantities (their TPOT excludes the first token,
# as frontier's does; ITL is per gap between streamed chunks).
_E2E_NAMES = {"vllm": "e2el", "sglang": "e2e_latency"}
_RATES = {"output_throughput": "output_tokens_per_s", "request_throughput": "requests_per_s"}


def is_vllm(data: dict[str, Any]) -> bool:
    return "mean_e2el_ms" in data or ("num_prompts" in data and "mean_ttft_ms" in data)


def is_sglang(data: dict[str, Any]) -> bool:
    return "mean_e2e_latency_ms" in data


def read_vllm(path: Path) -> list[MeasuredRun]:
    """One run from a `vllm bench serve --save-result` JSON file."""
    data = check_mapping(_json(path, path.read_text()), str(path), "a vllm bench serve result")
    return [_run(path, 1, data, "vllm")]


def read_sglang(path: Path) -> list[MeasuredRun]:
    """One run per non-empty line of a `sglang.bench_serving` JSONL file."""
    runs = []
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}: line {i}"
        data = check_mapping(_json(where, line), where, "an sglang bench_serving result")
        runs.append(_run(path, i, data, "sglang"))
    if not runs:
        raise InputError(f"{path}: no result lines")
    return runs


def _json(where: Path | str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno} column "
                         f"{exc.colno}; truncated or malformed file?)") from None


def _run(path: Path, row: int, data: dict[str, Any], tool: str) -> MeasuredRun:
    where = f"{path}: line {row}" if tool == "sglang" else str(path)
    what = "vllm bench serve result" if tool == "vllm" else "sglang bench_serving result"
    require(data, COMMON, where, what)
    completed = integer(where, "completed", data["completed"])
    load = Load(
        num_requests=completed,
        input_tokens=number(where, "total_input_tokens", data["total_input_tokens"]) / completed,
        output_tokens=number(where, "total_output_tokens", data["total_output_tokens"])
        / completed,
        concurrency=None
        if data["max_concurrency"] is None
        else integer(where, "max_concurrency", data["max_concurrency"]),
        rate_per_s=_rate(where, data["request_rate"]),
        burstiness=number(where, "burstiness", data.get("burstiness", 1.0)),
        input_lengths=_lengths(where, data, "input_lens", completed),
        output_lengths=_lengths(where, data, "output_lens", completed),
    )
    model = data.get("model_id") or data.get("model_path")
    return MeasuredRun(
        source=str(path), row=row, run_id=f"{path.name}:{row}" if tool == "sglang" else path.name,
        format=tool, load=load, measured=_metrics(where, data, tool),
        model=model if isinstance(model, str) else None,
    )


def _rate(where: str, value: Any) -> float:
    """The request rate: a positive number, or inf ('inf', Infinity) for all at once."""
    if value in ("inf", "Infinity") or (isinstance(value, float) and math.isinf(value)):
        return math.inf
    return number(where, "request_rate", value)


def _lengths(where: str, data: dict[str, Any], key: str, completed: int) -> tuple[int, ...] | None:
    """Per-request token counts where the file lists them (vLLM's input_lens/output_lens);
    a request that failed is listed with 0 output tokens and is left out, as the client's
    own totals leave it out."""
    values = data.get(key)
    if values is None:
        return None
    if not isinstance(values, list):
        raise bad(where, key, type(values).__name__, "a list of token counts")
    out = tuple(integer(where, f"{key}[{j}]", v, minimum=0) for j, v in enumerate(values))
    kept = tuple(v for v in out if v > 0)
    if len(kept) < completed or not kept:
        raise bad(where, key, f"{len(kept)} non-zero lengths", f"at least completed={completed}")
    return kept


def _metrics(where: str, data: dict[str, Any], tool: str) -> dict[str, float]:
    """Every latency statistic and rate the file has, under the scorer's names; the two
    required means must be > 0, an optional figure of 0 (e.g. ITL of a non-streaming run)
    measured nothing and is left unscored."""
    out: dict[str, float] = {}
    for quantity in LATENCY_QUANTITIES:
        name = _E2E_NAMES[tool] if quantity == "e2e" else quantity
        for prefix, stat in _STATS.items():
            key = f"{prefix}_{name}_ms"
            if key not in data:
                continue
            required = key in ("mean_ttft_ms", "mean_tpot_ms")
            value = number(where, key, data[key], positive=required)
            if value > 0:
                out[f"{quantity}.{stat}"] = value
    for key, name in _RATES.items():
        if key in data:
            value = number(where, key, data[key], positive=False)
            if value > 0:
                out[name] = value
    return out
