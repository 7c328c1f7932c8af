"""Request records -> latency and throughput summaries with the public keys of docs/architecture.md.

Definitions follow `vllm bench serve`: TTFT from arrival to first token; TPOT =
(e2e - ttft) / (output tokens - 1) over requests with more than one output token; ITL = every
gap between consecutive output tokens; tokens/s per user = 1 / TPOT.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from simulator.engines.style import FrontEnd

FloatArray = npt.NDArray[np.float64]

@dataclass(frozen=True, slots=True)
class SLOTargets:
    ttft_p99_s: float | None = None
    tpot_p99_s: float | None = None
    e2e_p99_s: float | None = None


def percentiles(values: FloatArray) -> dict[str, float | None]:
    """{mean, p50, p90, p99} with numpy's linear interpolation, as vllm bench serve does."""
    if values.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    p50, p90, p99 = linear_percentiles(values, (50, 90, 99))
    return {"mean": float(values.mean()), "p50": p50, "p90": p90, "p99": p99}


def linear_percentiles(values: FloatArray, qs: tuple[float, ...]) -> list[float]:
    """`np.percentile(values, qs)` of a non-empty 1-d array (its default 'linear' method,
    Hyndman & Fan type 7), bit for bit: the same partition, neighbours and interpolation.
    numpy's own routine imports numpy.ma for a masked-array check (~12 ms of a CLI start-up)."""
    n = values.size
    spots = []  # (lower, upper, weight) per q, with numpy's -1 for "the last element"
    for q in qs:
        at = (n - 1) * (q / 100)
        if at >= n - 1:
            spots.append((-1, -1, at + 1.0))  # numpy: at - (-1), the index it substituted
        else:
            lower = math.floor(at)
            spots.append((lower, lower + 1, at - lower))
    arr = values.flatten()
    arr.partition(sorted({0, -1, *(i for s in spots for i in s[:2])}))
    if math.isnan(arr[-1]):  # a NaN sorts last; numpy's percentile is then NaN
        return [math.nan] * len(qs)
    out = []
    for lower, upper, t in spots:
        a, b = float(arr[lower]), float(arr[upper])
        diff = b - a
        out.append(b - diff * (1 - t) if t >= 0.5 else a + diff * t)
    return out


def weighted_percentiles(values: FloatArray, weights: FloatArray) -> dict[str, float | None]:
    """Percentiles of `values` each repeated `weights` times (inverted CDF), without repeating."""
    keep = weights > 0
    if not keep.all():  # else the same arrays, without a copy
        values, weights = values[keep], weights[keep]
    del keep
    if values.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    order = np.argsort(values, kind="stable")
    v, w = values[order], weights[order]
    cum = np.cumsum(w)
    total = cum[-1]
    # np.sum of the products, not np.dot: BLAS may split a dot product over threads, so its
    # rounding would depend on the worker's thread count (Ray workers run with one thread).
    out: dict[str, float | None] = {"mean": float(np.sum(v * w) / total)}
    for name, q in (("p50", 0.50), ("p90", 0.90), ("p99", 0.99)):
        idx = int(np.searchsorted(cum, q * total, side="left"))
        out[name] = float(v[min(idx, v.size - 1)])
    return out


def client_offset_s(records: npt.NDArray[Any], front_end: FrontEnd | None) -> Any:
    """What the client's TTFT and end-to-end latency add to the engine's, per request: the
    time before the engine had it (front-end queue, ingest, tokenization: the records'
    `front_end_s`) and the first chunk's emit. None: the engine's view (nothing added)."""
    if front_end is None:
        return 0.0
    return records["front_end_s"] + front_end.first_chunk_s


def client_ttft_s(records: npt.NDArray[Any], front_end: FrontEnd | None) -> Any:
    """Each request's TTFT as the client measures it: the engine's plus `client_offset_s`."""
    return records["first_token_s"] - records["arrival_s"] + client_offset_s(records, front_end)


def summarize(
    records: npt.NDArray[Any],
    itl_values_s: FloatArray,
    itl_weights: FloatArray,
    num_gpus: int,
    slo: SLOTargets | None,
    front_end: FrontEnd | None = None,
) -> dict[str, Any]:
    """The public result keys from per-request records and the ITL sample set.

    Records hold engine-side instants. TTFT and end-to-end latency are reported as the client
    measures them (`vllm bench serve`): the front-end time per request (queue, ingest,
    tokenization, first-chunk emit; `client_offset_s`) is added to both, so TPOT is unchanged;
    the engine-side TTFT is kept as `ttft_engine_s`."""
    finished = (records["drop_reason"] == 0) & np.isfinite(records["finish_s"])
    # Usually every request finished: the records themselves, not a copy of them.
    done = records if finished.all() else records[finished]
    del finished
    dropped = int(np.count_nonzero(records["drop_reason"] != 0))
    if done.size:
        start = float(np.min(records["arrival_s"][np.isfinite(records["arrival_s"])]))
        duration = float(np.max(done["finish_s"])) - start
    else:
        duration = 0.0
    out_tokens = float(done["output_tokens"].sum())
    in_tokens = float(done["input_tokens"].sum())
    engine_ttft = done["first_token_s"] - done["arrival_s"]
    offset = client_offset_s(done, front_end)
    ttft = engine_ttft + offset
    e2e = done["finish_s"] - done["arrival_s"] + offset
    queue = done["scheduled_s"] - done["arrival_s"]
    multi = done["output_tokens"] > 1
    tpot = (e2e[multi] - ttft[multi]) / (done["output_tokens"][multi] - 1)
    with np.errstate(divide="ignore"):
        per_user = np.where(tpot > 0, 1.0 / np.where(tpot > 0, tpot, 1.0), math.inf)
    per_user = per_user[np.isfinite(per_user)]

    def rate(x: float) -> float:
        return x / duration if duration > 0 else 0.0

    result: dict[str, Any] = {
        "requests_completed": int(done.size),
        "requests_dropped": dropped,
        "duration_s": duration,
        "num_gpus": num_gpus,
        "output_tokens_per_s": rate(out_tokens),
        "output_tokens_per_s_per_gpu": rate(out_tokens) / num_gpus,
        "input_tokens_per_s": rate(in_tokens),
        "requests_per_s": rate(float(done.size)),
        "ttft_s": percentiles(ttft),
        "ttft_engine_s": percentiles(engine_ttft),
        "tpot_s": percentiles(tpot),
        "itl_s": weighted_percentiles(itl_values_s, itl_weights),
        "e2e_s": percentiles(e2e),
        "queue_s": percentiles(queue),
        "output_tokens_per_s_per_user": percentiles(per_user),
        "goodput_requests_per_s": None,
        "slo_attainment": None,
    }
    if slo is not None:
        # A request is good when it meets every per-request target the SLO names (the p99
        # targets bound each request; the attainment says what fraction did).
        ok = np.ones(done.size, dtype=bool)
        if slo.ttft_p99_s is not None:
            ok &= ttft <= slo.ttft_p99_s
        if slo.tpot_p99_s is not None:
            tpot_all = np.zeros(done.size)
            tpot_all[multi] = tpot
            ok &= tpot_all <= slo.tpot_p99_s
        if slo.e2e_p99_s is not None:
            ok &= e2e <= slo.e2e_p99_s
        total = done.size + dropped
        result["goodput_requests_per_s"] = rate(float(np.count_nonzero(ok)))
        result["slo_attainment"] = float(np.count_nonzero(ok)) / total if total else 0.0
    return result
