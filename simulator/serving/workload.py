"""The request stream of a scenario: arrival times, prompt and output lengths, priorities.

Pure numpy, no SimPy: everything is drawn up front from one generator seeded by the scenario,
in a fixed order (arrivals, input lengths, output lengths, priorities), so the same scenario
gives bit-identical streams. Closed-loop arrivals are left as NaN: the engine decides them.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from simulator.errors import InputError
from simulator.scenario import (
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

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

Z90 = 1.2815515655446004  # standard normal quantile at 0.9
MAX_BAD_ROWS_SHOWN = 5


@dataclass(frozen=True, eq=False)  # arrays: compare fields with np.array_equal
class RequestStream:
    """One row per request, in arrival order (closed loop: in the order they will be sent)."""

    arrival_s: FloatArray  # NaN for closed-loop arrivals
    input_tokens: IntArray
    output_tokens: IntArray
    priority: IntArray  # lower is served first (vLLM convention)
    closed_loop_concurrency: int | None = None

    def __len__(self) -> int:
        return len(self.input_tokens)


# ------------------------------------------------------------------------------- lengths


def _resolve(path: str, base_dir: Path | None) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() or base_dir is None else base_dir / p


def _csv_column(path: Path, column: str) -> IntArray:
    """Integers of one named column of a CSV with a header row."""
    try:
        with path.open(newline="") as f:
            reader = csv.reader(f)
            header = [h.strip() for h in next(reader, [])]
            if column not in header:
                raise InputError(
                    f"{path}: no column {column!r} (columns: {', '.join(header) or 'none'})"
                )
            i = header.index(column)
            values: list[int] = []
            for row in reader:
                if not row:
                    continue
                try:
                    values.append(_parse_int(row[i]))
                except (IndexError, ValueError):
                    cell = row[i] if i < len(row) else "missing"
                    raise InputError(
                        f"{path}: line {reader.line_num}: column {column!r} is not a whole "
                        f"number (got {cell!r})"
                    ) from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not values:
        raise InputError(f"{path}: column {column!r} has no values")
    return np.asarray(values, dtype=np.int64)


def _parse_int(text: str) -> int:
    """'12' or '12.0' -> 12; anything else raises ValueError."""
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        x = float(text)
        if not math.isfinite(x) or not x.is_integer():
            raise ValueError(text) from None
        return int(x)


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
        pool = _csv_column(_resolve(spec.path, base_dir), spec.column)
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
        raise ValueError(f"arrival kind {spec.kind!r} is not sampled; traces use load_trace")
    return sampler(spec, n, rng)


# --------------------------------------------------------------------------------- traces

_PLAIN = ("arrival_s", "input_tokens", "output_tokens")
_AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")  # Azure LLM inference traces


def parse_azure_timestamp(text: str) -> tuple[int, float]:
    """'2023-11-16 18:15:46.6805900' -> (whole POSIX seconds, fraction).

    Split in two so that 100 ns ticks survive (a float of ~1.7e9 s keeps only ~0.2 µs), and
    parsed by hand because `datetime.fromisoformat` in 3.11 takes at most 6 fraction digits.
    The time is read as UTC; only differences matter.
    """
    text = text.strip()
    whole, dot, frac = text.partition(".")
    if dot and (not frac.isdigit() or not frac.isascii()):
        raise ValueError(f"bad fraction of a second in {text!r}")
    stamp = datetime.fromisoformat(whole + "+00:00")
    return int(stamp.timestamp()), (int(frac) / 10 ** len(frac)) if frac else 0.0


def _check_tokens(text: str, name: str) -> int:
    try:
        value = _parse_int(text)
    except ValueError:
        raise ValueError(f"{name} {text.strip()!r} is not a whole number") from None
    if value < 1:
        raise ValueError(f"{name} {value} is below 1")
    return value


@dataclass
class _TraceRows:
    azure: bool
    seconds: list[float]  # plain: arrival_s; Azure: whole POSIX seconds
    fractions: list[float]  # Azure only: fraction of the second
    inputs: list[int]
    outputs: list[int]
    bad: list[tuple[int, str]]  # (line number, reason)


def _read_trace_rows(path: Path, reader: Any) -> _TraceRows:
    header = tuple(h.strip() for h in next(reader, []))
    if set(_PLAIN) <= set(header):
        azure, names = False, _PLAIN
    elif set(_AZURE) <= set(header):
        azure, names = True, _AZURE
    else:
        raise InputError(
            f"{path}: trace header must name {','.join(_PLAIN)} or the Azure layout "
            f"{','.join(_AZURE)} (got {','.join(header) or 'an empty file'})"
        )
    i_time, i_in, i_out = (header.index(name) for name in names)
    rows = _TraceRows(azure, [], [], [], [], [])
    for row in reader:
        if not row or all(not cell.strip() for cell in row):
            continue  # blank line
        line = reader.line_num
        if len(row) != len(header):
            rows.bad.append((line, f"{len(row)} columns, header has {len(header)}"))
            continue
        whole: float
        try:
            if azure:
                whole, frac = parse_azure_timestamp(row[i_time])
            else:
                whole, frac = float(row[i_time]), 0.0
                if not math.isfinite(whole) or whole < 0:
                    raise ValueError(f"arrival_s {whole} is not a time >= 0")
            n_in = _check_tokens(row[i_in], names[1])
            n_out = _check_tokens(row[i_out], names[2])
        except ValueError as exc:
            reason = str(exc)
            if "could not convert" in reason or "Invalid isoformat" in reason:
                reason = f"{names[0]} {row[i_time].strip()!r} is not a time"
            rows.bad.append((line, reason))
            continue
        rows.seconds.append(whole)
        rows.fractions.append(frac)
        rows.inputs.append(n_in)
        rows.outputs.append(n_out)
    return rows


def load_trace(
    path: str | Path,
    base_dir: Path | None = None,
    time_scale: float = 1.0,
    skip_bad_rows: bool = False,
) -> tuple[FloatArray, IntArray, IntArray, list[int]]:
    """Read a request trace CSV: (arrival_s, input_tokens, output_tokens, bad row line numbers).

    Two layouts, told apart by the header: `arrival_s,input_tokens,output_tokens` (seconds, used
    as given) or the Azure LLM inference trace `TIMESTAMP,ContextTokens,GeneratedTokens`
    (datetimes, made relative to the earliest row). Extra columns are ignored. Times are
    multiplied by `time_scale` and rows sorted by time (stable). Bad rows (wrong column count,
    non-numeric, tokens below 1, unparsable time) raise an InputError naming their lines,
    unless `skip_bad_rows`: then they are dropped and their line numbers returned.
    """
    full = _resolve(str(path), base_dir)
    try:
        with full.open(newline="") as f:
            rows = _read_trace_rows(full, csv.reader(f))
    except OSError as exc:
        raise InputError(f"{full}: cannot read trace ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"{full}: not a readable CSV ({exc})") from None
    bad = rows.bad
    if bad and not skip_bad_rows:
        shown = "; ".join(f"line {line}: {why}" for line, why in bad[:MAX_BAD_ROWS_SHOWN])
        if len(bad) > MAX_BAD_ROWS_SHOWN:
            shown += f"; and {len(bad) - MAX_BAD_ROWS_SHOWN} more"
        lines = ", ".join(str(line) for line, _ in bad[:MAX_BAD_ROWS_SHOWN])
        lines += ", ..." if len(bad) > MAX_BAD_ROWS_SHOWN else ""
        raise InputError(
            f"{full}: {len(bad)} bad row{'s' if len(bad) > 1 else ''} at line"
            f"{'s' if len(bad) > 1 else ''} {lines} ({shown}); fix them or pass --skip-bad-rows"
        )
    if not rows.inputs:
        raise InputError(f"{full}: trace has no usable rows")
    if rows.azure:
        # whole seconds and fractions kept apart until after the subtraction (100 ns ticks)
        sec = np.asarray(rows.seconds, dtype=np.int64)
        frac = np.asarray(rows.fractions, dtype=np.float64)
        first = int(np.lexsort((frac, sec))[0])
        t = (sec - sec[first]).astype(np.float64) + (frac - frac[first])
    else:
        t = np.asarray(rows.seconds, dtype=np.float64)
    t = t * time_scale
    order = np.argsort(t, kind="stable")
    return (
        t[order],
        np.asarray(rows.inputs, dtype=np.int64)[order],
        np.asarray(rows.outputs, dtype=np.int64)[order],
        [line for line, _ in bad],
    )


# --------------------------------------------------------------------------------- stream


def build_stream(
    scenario: Scenario, base_dir: Path | None, skip_bad_rows: bool = False
) -> tuple[RequestStream, list[str]]:
    """The scenario's requests, and warnings worth showing (skipped trace rows, short trace).

    One generator, `default_rng(workload.seed)`, drawn in a fixed order: arrivals, input
    lengths, output lengths, priorities. Trace arrivals take times and lengths from the file
    (the first `num_requests` rows by time) and draw only priorities.
    """
    w = scenario.workload
    rng = np.random.default_rng(w.seed)
    warnings: list[str] = []
    concurrency: int | None = None
    if isinstance(w.arrival, TraceArrival):
        arrival_s, inputs, outputs, bad = load_trace(
            w.arrival.path, base_dir, w.arrival.time_scale, skip_bad_rows
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
    else:
        if w.input_tokens is None or w.output_tokens is None:  # the schema forbids this
            raise ValueError("input_tokens and output_tokens are required without a trace")
        n = w.num_requests
        arrival_s = sample_arrivals(w.arrival, n, rng)
        inputs = sample_lengths(w.input_tokens, n, rng, base_dir)
        outputs = sample_lengths(w.output_tokens, n, rng, base_dir)
        if isinstance(w.arrival, ClosedLoopArrival):
            concurrency = w.arrival.concurrency
    if w.priorities is None:
        priority = np.zeros(n, dtype=np.int64)
    else:
        p = np.asarray(w.priorities.weights, dtype=np.float64)
        values = np.asarray(w.priorities.values, dtype=np.int64)
        priority = rng.choice(values, size=n, p=p / p.sum()).astype(np.int64)
    stream = RequestStream(
        arrival_s=arrival_s,
        input_tokens=inputs,
        output_tokens=outputs,
        priority=priority,
        closed_loop_concurrency=concurrency,
    )
    return stream, warnings
