"""One measured serving run as read from a benchmark file: what ran, under what load, what it
measured, and where in which file it was recorded. Every reader in this package returns these,
so the mapping to a scenario and the scoring never look at a file format again."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from simulator.errors import InputError

# Metrics a run may carry, as `<quantity>.<statistic>` (latencies in milliseconds, as every
# benchmark tool writes them) or a rate: the names the scorer compares predictions under.
LATENCY_QUANTITIES = ("ttft", "tpot", "itl", "e2e")
LATENCY_STATS = ("mean", "p50", "p90", "p99")
RATES = ("output_tokens_per_s", "requests_per_s")


@dataclass(frozen=True, slots=True)
class Pool:
    """One engine type's layout as the file records it: an aggregated deployment, or the
    prefill or decode pool of a disaggregated one. None: the file did not record it."""

    tensor_parallel: int
    pipeline_parallel: int = 1
    attention_data_parallel: int | None = None
    moe_tensor_parallel: int | None = None
    expert_parallel: int | None = None
    workers: int | None = None
    max_batch: int | None = None  # per attention-DP rank, as AIConfigurator records it

    @property
    def gpus_per_worker(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel * (self.attention_data_parallel or 1)


@dataclass(frozen=True, slots=True)
class Load:
    """The benchmark's request stream. Exactly one of `concurrency` (closed loop) and
    `rate_per_s` (open loop; inf: every request at once) is set, unless both were recorded
    (a rate capped by a concurrency limit, which the mapping refuses). Lengths are the fixed
    or mean tokens per request; `input_lengths`/`output_lengths` the per-request ones when the
    file lists them. `warmup_requests` were sent first and are not in the measured figures."""

    num_requests: int
    input_tokens: float
    output_tokens: float
    concurrency: int | None = None
    rate_per_s: float | None = None
    burstiness: float = 1.0  # vLLM/SGLang gamma shape: 1 is Poisson
    warmup_requests: int = 0
    input_lengths: tuple[int, ...] | None = None
    output_lengths: tuple[int, ...] | None = None


# The note (and declared default) of a run whose exact measurement the file lists again under
# another layout (silicon.py): which layout ran is in doubt.
LAYOUT_CONTRADICTED = "the file lists this measurement again under another layout"


@dataclass(frozen=True, slots=True)
class MeasuredRun:
    """A measured run: engine, model, GPU, number formats, layout, load, metrics, provenance.

    `model`, `gpu`, `engine` are the file's own spellings (None: not recorded, the scenario
    given alongside supplies them). `pools` is empty where the file does not record the
    deployment (the benchmark clients' JSON), one pool for `agg`, prefill then decode for
    `disagg`. `measured` maps metric names (see LATENCY_QUANTITIES, RATES) to values."""

    source: str  # file path as given
    row: int  # 1-based data row, JSONL line, or 1 for a one-run JSON file
    run_id: str
    format: str
    load: Load
    measured: Mapping[str, float]
    engine: str | None = None
    engine_version: str | None = None
    model: str | None = None
    gpu: str | None = None
    gemm_quant: str | None = None  # '' = BF16, as AIConfigurator writes it
    moe_quant: str | None = None
    mode: str | None = None  # agg | disagg
    pools: tuple[Pool, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    # The layout that ran where the row's name (or the name of another rendering of the same
    # measurement) says its columns count otherwise (id_layout.py); None: the columns.
    named_pools: tuple[Pool, ...] | None = None

    @property
    def where(self) -> str:
        return f"{self.source}: row {self.row}"


def bad(where: str, key: str, value: Any, valid: str) -> InputError:
    """The one-line error for a bad field: where, which key, what it was, what is valid."""
    shown = repr(value) if not isinstance(value, str) or value else "empty"
    return InputError(f"{where}: {key}: {shown} is not valid ({valid})")


def _as_float(where: str, key: str, value: Any, valid: str) -> float:
    """A file field read as a float (booleans and empty fields refused), or one clear line."""
    if isinstance(value, bool) or value is None:
        raise bad(where, key, value, valid)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise bad(where, key, value, valid) from None


def number(where: str, key: str, value: Any, *, positive: bool = True) -> float:
    """A finite number (> 0 when `positive`, else >= 0) from a file field, or one clear line."""
    valid = "a finite number " + ("> 0" if positive else ">= 0")
    x = _as_float(where, key, value, valid)
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        raise bad(where, key, value, valid)
    return x


def integer(where: str, key: str, value: Any, *, minimum: int = 1) -> int:
    """A whole number >= `minimum` from a file field ('8', 8, 8.0), or one clear line."""
    valid = f"a whole number >= {minimum}"
    x = _as_float(where, key, value, valid)
    if not math.isfinite(x) or x != int(x) or x < minimum:
        raise bad(where, key, value, valid)
    return int(x)


def check_mapping(data: Any, where: str, what: str) -> dict[str, Any]:
    """`data` as a JSON object, or one line saying the file is not one."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a JSON object ({what}), got {type(data).__name__}")
    return data


def require(data: Mapping[str, Any], keys: tuple[str, ...], where: str, what: str) -> None:
    """Refuse a record missing any key the reader relies on, naming the first one."""
    for key in keys:
        if key not in data:
            raise InputError(f"{where}: missing key {key!r} (a {what} has {', '.join(keys)})")
