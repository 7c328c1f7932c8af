"""The request stream of a scenario: arrival times, prompt and output lengths, priorities.

Pure numpy, no SimPy: everything is drawn up front from one generator seeded by the scenario,
in a fixed order (arrivals, input lengths, output lengths, priorities), so the same scenario
gives bit-identical streams. Closed-loop arrivals are left as NaN: the engine decides them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from simulator.errors import InputError
from simulator.inputs.scenario import (
    MAX_TOKENS,
    ClosedLoopArrival,
    ConstantArrival,
    EmpiricalLengths,
    FixedLengths,
    GammaArrival,
    LognormalLengths,
    NormalLengths,
    OfflineArrival,
    PoissonArrival,
    Scenario,
    TraceArrival,
    UniformLengths,
)
from simulator.inputs.speculative import WORKLOAD_KINDS
from simulator.workload.content import Content
from simulator.workload.sessions import (
    ContentDraw,
    session_requests,
    shared_prefix_requests,
)
from simulator.workload.trace_content import trace_contents
from simulator.workload.trace_files import (
    MAX_BAD_ROWS_SHOWN,
    csv_column,
    read_trace,
    resolve_path,
)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

Z90 = 1.2815515655446004  # standard normal quantile at 0.9


@dataclass(frozen=True, eq=False)  # arrays: compare fields with np.array_equal
class RequestStream:
    """One row per request, in arrival order (closed loop: in the order they will be sent)."""

    arrival_s: FloatArray  # NaN for closed-loop arrivals
    input_tokens: IntArray
    output_tokens: IntArray
    priority: IntArray  # lower is served first (vLLM convention)
    closed_loop_concurrency: int | None = None
    # Per request, its traffic kind as a code into WORKLOAD_KINDS (-1: the workload's kind);
    # None when no request carries its own (a trace `kind` column or `workload.kind_mix`).
    kind: IntArray | None = None
    # Closed loop: when each client sends its first request, ascending (None: all at t = 0).
    start_s: FloatArray | None = None
    # Per request, what its prompt holds (workload/content.py), where it shares content with
    # others: sessions, a shared prefix. None: every prompt is its own.
    content: tuple[Content, ...] | None = None
    # Sessions (workload/sessions.py): each request's session (requests numbered session by
    # session, turn by turn) and its pause after the previous turn's answer. A session's first
    # turn arrives at arrival_s (NaN in a closed loop); later turns follow their answers.
    session: IntArray | None = None
    think_s: FloatArray | None = None

    def __len__(self) -> int:
        return len(self.input_tokens)


# ------------------------------------------------------------------------------- lengths


def _fixed(spec: Any, n: int, rng: np.random.Generator, base_dir: Path | None) -> FloatArray:
    return np.full(n, float(spec.value))


def _uniform(spec: Any, n: int, rng: np.random.Generator, base_dir: Path | None) -> FloatArray:
    return rng.integers(spec.min, spec.max + 1, size=n).astype(np.float64)


def _normal(spec: Any, n: int, rng: np.random.Generator, base_dir: Path | None) -> FloatArray:
    return rng.normal(spec.mean, spec.std, size=n)


def lognormal_params(spec: LognormalLengths) -> tuple[float, float]:
    """(mu, sigma) of log(length) from median+sigma, median+p90 or mean+sigma."""
    if spec.median is not None and spec.p90 is not None:
        # p90 = exp(mu + z90 sigma) and median = exp(mu)
        return math.log(spec.median), math.log(spec.p90 / spec.median) / Z90
    assert spec.sigma is not None  # the schema allows no other combination
    if spec.median is not None:
        return math.log(spec.median), spec.sigma
    assert spec.mean is not None
    # mean = exp(mu + sigma^2 / 2)
    return math.log(spec.mean) - spec.sigma**2 / 2, spec.sigma


def _lognormal(spec: Any, n: int, rng: np.random.Generator, base_dir: Path | None) -> FloatArray:
    mu, sigma = lognormal_params(spec)
    return rng.lognormal(mu, sigma, size=n)


def _empirical(spec: Any, n: int, rng: np.random.Generator, base_dir: Path | None) -> FloatArray:
    if spec.values is not None:
        pool = np.asarray(spec.values, dtype=np.int64)
    else:
        pool = csv_column(resolve_path(spec.path, base_dir), spec.column)
    return rng.choice(pool, size=n, replace=True).astype(np.float64)


LengthSampler = Callable[[Any, int, np.random.Generator, Path | None], FloatArray]
LENGTH_SAMPLERS: dict[str, LengthSampler] = {
    "fixed": _fixed,
    "uniform": _uniform,
    "normal": _normal,
    "lognormal": _lognormal,
    "empirical": _empirical,
}
LengthSpec = FixedLengths | UniformLengths | NormalLengths | LognormalLengths | EmpiricalLengths


def sample_lengths(
    spec: LengthSpec, n: int, rng: np.random.Generator, base_dir: Path | None = None
) -> IntArray:
    """`n` token counts: drawn, clipped to [min, max] when given, rounded, then kept in
    [1, MAX_TOKENS]."""
    x = LENGTH_SAMPLERS[spec.kind](spec, n, rng, base_dir)
    lo = getattr(spec, "min", None) if spec.kind != "uniform" else None
    hi = getattr(spec, "max", None) if spec.kind != "uniform" else None
    if lo is not None or hi is not None:
        x = np.clip(x, lo, hi)
    # Unbounded distributions (normal, lognormal) may draw past int64: cap at MAX_TOKENS,
    # far beyond any context window, so such requests are dropped, not wrapped around.
    return np.clip(np.rint(x), 1, MAX_TOKENS).astype(np.int64)


# ------------------------------------------------------------------------------ arrivals


def _offline(spec: Any, n: int, rng: np.random.Generator) -> FloatArray:
    return np.zeros(n)


def _poisson(spec: Any, n: int, rng: np.random.Generator) -> FloatArray:
    # exponential gaps; the first request arrives after the first gap, not at zero
    return np.cumsum(rng.exponential(1.0 / spec.rate_per_s, size=n))


def _gamma(spec: Any, n: int, rng: np.random.Generator) -> FloatArray:
    # Gamma(k, theta) has mean k theta and CV 1/sqrt(k): k = 1/cv^2, theta = cv^2 / rate
    cv2 = spec.cv**2
    return np.cumsum(rng.gamma(1.0 / cv2, cv2 / spec.rate_per_s, size=n))


def _constant(spec: Any, n: int, rng: np.random.Generator) -> FloatArray:
    return np.arange(n, dtype=np.float64) / float(spec.rate_per_s)


def _closed_loop(spec: Any, n: int, rng: np.random.Generator) -> FloatArray:
    return np.full(n, np.nan)


ArrivalSampler = Callable[[Any, int, np.random.Generator], FloatArray]
ARRIVAL_SAMPLERS: dict[str, ArrivalSampler] = {
    "offline": _offline,
    "poisson": _poisson,
    "gamma": _gamma,
    "constant": _constant,
    "closed_loop": _closed_loop,
}
ArrivalSpec = OfflineArrival | PoissonArrival | GammaArrival | ConstantArrival | ClosedLoopArrival


def sample_arrivals(spec: ArrivalSpec, n: int, rng: np.random.Generator) -> FloatArray:
    """`n` arrival instants in seconds, non-decreasing (NaN for closed loop)."""
    sampler = ARRIVAL_SAMPLERS.get(spec.kind)
    if sampler is None:
        raise ValueError(f"arrival kind {spec.kind!r} is not sampled; traces use read_trace")
    with np.errstate(over="ignore"):  # an overflow to inf is refused by check_horizon
        return sampler(spec, n, rng)


# Arrivals past this many seconds (~32 years) are refused: the clock is a float, and at larger
# times a step's microseconds would vanish into it (or the arrivals overflow to infinity and
# the requests never arrive), giving a run that "completes" with wrong figures.
HORIZON_S = 1e9


def check_horizon(arrival_s: FloatArray) -> None:
    """Refuse a stream to simulate whose arrivals pass HORIZON_S (the closed-form estimate
    needs no clock and takes any rate)."""
    timed = arrival_s[~np.isnan(arrival_s)]
    if timed.size and not float(timed.max()) <= HORIZON_S:  # also refuses infinity
        raise InputError(
            f"workload.arrival: the requests arrive over {float(timed.max()):.3g} s, past the "
            f"simulated clock's horizon of {HORIZON_S:.0e} s; raise the rate (or lower the "
            f"trace's time_scale)")


# --------------------------------------------------------------------------------- stream


def build_stream(
    scenario: Scenario,
    base_dir: Path | None,
    skip_bad_rows: bool = False,
    max_model_len: int | None = None,
) -> tuple[RequestStream, list[str]]:
    """The scenario's requests, and warnings worth showing (skipped trace rows, short trace).

    One generator, `default_rng(workload.seed)`, drawn in a fixed order: arrivals, input
    lengths, output lengths, priorities, then kinds (only with `kind_mix`). Trace arrivals
    take times, lengths and any `kind` column from the file (the first `num_requests` rows by
    time) and draw only priorities; a trace row whose prompt + output passes `max_model_len`
    is a bad row.
    """
    w = scenario.workload
    rng = np.random.default_rng(w.seed)
    warnings: list[str] = []
    drawn: ContentDraw | None = None
    content: tuple[Content, ...] | None = None
    concurrency: int | None = None
    kind: IntArray | None = None
    if isinstance(w.arrival, TraceArrival):
        trace = read_trace(
            w.arrival.path, base_dir, w.arrival.time_scale, skip_bad_rows, max_model_len
        )
        arrival_s, inputs, outputs, bad = (
            trace.arrival_s, trace.input_tokens, trace.output_tokens, trace.bad_lines
        )
        if bad:
            lines = ", ".join(str(b) for b in bad[:MAX_BAD_ROWS_SHOWN])
            more = ", ..." if len(bad) > MAX_BAD_ROWS_SHOWN else ""
            plural = "s" if len(bad) > 1 else ""
            warnings.append(
                f"{w.arrival.path}: skipped {len(bad)} bad row{plural} (line{plural} {lines}{more})"
            )
        if len(arrival_s) < w.num_requests:
            warnings.append(
                f"{w.arrival.path}: trace has {len(arrival_s)} usable rows, fewer than "
                f"num_requests {w.num_requests}; using all {len(arrival_s)}"
            )
        n = min(len(arrival_s), w.num_requests)
        arrival_s, inputs, outputs = arrival_s[:n], inputs[:n], outputs[:n]
        kind = trace.kind[:n] if trace.kind is not None else None
        contents, notes = trace_contents(trace, w.arrival.hash_block_tokens, w.arrival.path)
        warnings.extend(notes)
        content = contents[:n] if contents is not None else None
    elif w.sessions is not None:
        n = w.num_requests
        arrival_spec = w.arrival
        assert not isinstance(arrival_spec, TraceArrival)  # the schema forbids it
        drawn = session_requests(
            w, n, rng, lambda spec, k: sample_lengths(spec, k, rng, base_dir),
            lambda k: sample_arrivals(arrival_spec, k, rng))
        inputs, outputs = drawn.input_tokens, drawn.output_tokens
        assert drawn.arrival_s is not None
        arrival_s = drawn.arrival_s
        if isinstance(w.arrival, ClosedLoopArrival):
            concurrency = w.arrival.concurrency
    else:
        if w.input_tokens is None or w.output_tokens is None:  # the schema forbids this
            raise ValueError("input_tokens and output_tokens are required without a trace")
        n = w.num_requests
        arrival_s = sample_arrivals(w.arrival, n, rng)
        inputs = sample_lengths(w.input_tokens, n, rng, base_dir)
        outputs = sample_lengths(w.output_tokens, n, rng, base_dir)
        if w.shared_prefix is not None:
            drawn = shared_prefix_requests(w, inputs, outputs, rng)
            inputs = drawn.input_tokens
        if isinstance(w.arrival, ClosedLoopArrival):
            concurrency = w.arrival.concurrency
    if w.priorities is None:
        priority = np.zeros(n, dtype=np.int64)
    else:
        p = np.asarray(w.priorities.weights, dtype=np.float64)
        values = np.asarray(w.priorities.values, dtype=np.int64)
        priority = rng.choice(values, size=n, p=p / p.sum()).astype(np.int64)
    if w.kind_mix is not None:
        codes = np.asarray([WORKLOAD_KINDS.index(k) for k in w.kind_mix], dtype=np.int64)
        weights = np.asarray(list(w.kind_mix.values()), dtype=np.float64)
        kind = rng.choice(codes, size=n, p=weights / weights.sum()).astype(np.int64)
    stream = RequestStream(
        arrival_s=arrival_s,
        input_tokens=inputs,
        output_tokens=outputs,
        priority=priority,
        closed_loop_concurrency=concurrency,
        kind=kind,
        content=drawn.content if drawn is not None else content,
        session=drawn.session if drawn is not None else None,
        think_s=drawn.think_s if drawn is not None else None,
    )
    return stream, warnings

