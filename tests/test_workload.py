"""Request streams: length and arrival distributions, traces, determinism."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simulator.errors import InputError
from simulator.inputs.scenario import (
    ClosedLoopArrival,
    ConstantArrival,
    EmpiricalLengths,
    GammaArrival,
    LognormalLengths,
    NormalLengths,
    OfflineArrival,
    PoissonArrival,
    UniformLengths,
    load_scenario_file,
)
from simulator.workload.stream import build_stream, sample_arrivals, sample_lengths
from simulator.workload.trace_files import parse_azure_timestamp, read_trace

TRACES = Path(__file__).resolve().parent.parent / "scenarios" / "traces"

BASE: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "hardware": {"gpu": "h100-sxm"},
    "workload": {
        "arrival": {"kind": "poisson", "rate_per_s": 5.0},
        "input_tokens": {"kind": "lognormal", "median": 1000, "p90": 3000},
        "output_tokens": {"kind": "uniform", "min": 10, "max": 500},
        "num_requests": 2000,
        "priorities": {"values": [0, 1, 2], "weights": [1, 2, 3]},
    },
}


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# ------------------------------------------------------------------------------ lengths


def test_lognormal_median_p90_on_200k_samples() -> None:
    # median 1000, p90 3000: mu = ln 1000 = 6.9078, sigma = ln 3 / 1.28155 = 0.85725.
    # Sample quantiles of 200k draws have a relative standard error well under 1 %
    # (p90: sqrt(0.9 * 0.1 / 200000) / pdf ≈ 0.3 %), and rounding to integers moves them
    # by at most 0.5 tokens, so 2 % is a safe tolerance.
    spec = LognormalLengths(median=1000, p90=3000)
    x = sample_lengths(spec, 200_000, _rng())
    assert x.dtype == np.int64
    assert np.median(x) == pytest.approx(1000, rel=0.02)
    assert np.quantile(x, 0.9) == pytest.approx(3000, rel=0.02)


def test_lognormal_mean_sigma_gives_the_mean() -> None:
    # mean 500, sigma 0.5: mu = ln 500 - 0.125, so E[x] = exp(mu + sigma^2/2) = 500
    x = sample_lengths(LognormalLengths(mean=500, sigma=0.5), 200_000, _rng())
    assert x.mean() == pytest.approx(500, rel=0.02)
    # median + sigma: the median is exp(mu) = the given median
    y = sample_lengths(LognormalLengths(median=200, sigma=1.0), 200_000, _rng())
    assert np.median(y) == pytest.approx(200, rel=0.02)


def test_clipping_and_rounding() -> None:
    x = sample_lengths(NormalLengths(mean=100, std=50, min=80, max=120), 10_000, _rng())
    assert x.min() == 80 and x.max() == 120
    y = sample_lengths(LognormalLengths(median=100, p90=1000, max=150), 10_000, _rng())
    assert y.max() == 150 and y.min() >= 1
    # without clipping, a normal with most mass below zero is still at least one token
    z = sample_lengths(NormalLengths(mean=1, std=100), 10_000, _rng())
    assert z.min() == 1
    e = sample_lengths(EmpiricalLengths(values=(5, 50, 500), min=10, max=100), 1000, _rng())
    assert set(e.tolist()) == {10, 50, 100}


def test_uniform_includes_both_ends() -> None:
    x = sample_lengths(UniformLengths(min=3, max=5), 10_000, _rng())
    assert set(x.tolist()) == {3, 4, 5}


def test_empirical_from_csv_column(tmp_path: Path) -> None:
    (tmp_path / "lengths.csv").write_text("id,prompt\na,7\nb,9\n")
    spec = EmpiricalLengths(path="lengths.csv", column="prompt")
    x = sample_lengths(spec, 1000, _rng(), base_dir=tmp_path)
    assert set(x.tolist()) == {7, 9}
    with pytest.raises(InputError, match="no column 'nope'"):
        sample_lengths(EmpiricalLengths(path="lengths.csv", column="nope"), 1, _rng(), tmp_path)
    (tmp_path / "bad.csv").write_text("prompt\n7\nlots\n")
    with pytest.raises(InputError, match=r"line 3: column 'prompt' is not a whole number"):
        sample_lengths(EmpiricalLengths(path="bad.csv", column="prompt"), 1, _rng(), tmp_path)
    with pytest.raises(InputError, match="cannot read"):
        sample_lengths(EmpiricalLengths(path="none.csv", column="p"), 1, _rng(), tmp_path)


# ----------------------------------------------------------------------------- arrivals


def _gap_cv(t: np.ndarray) -> float:
    gaps = np.diff(t)
    return float(gaps.std() / gaps.mean())


def test_poisson_rate_within_2_percent() -> None:
    t = sample_arrivals(PoissonArrival(rate_per_s=8.0), 100_000, _rng())
    assert t[0] > 0  # the first request arrives after the first gap
    assert np.all(np.diff(t) >= 0)
    # 100k exponential gaps: relative standard error of the mean 1/sqrt(1e5) ≈ 0.3 %
    assert len(t) / t[-1] == pytest.approx(8.0, rel=0.02)
    assert _gap_cv(t) == pytest.approx(1.0, rel=0.03)


@pytest.mark.parametrize("cv", [1.0, 3.0])
def test_gamma_gap_cv(cv: float) -> None:
    # Gamma(shape 1/cv^2, scale cv^2/rate): mean gap 1/rate, CV cv
    t = sample_arrivals(GammaArrival(rate_per_s=4.0, cv=cv), 200_000, _rng())
    assert _gap_cv(t) == pytest.approx(cv, rel=0.05)
    assert len(t) / t[-1] == pytest.approx(4.0, rel=0.03)


def test_offline_constant_closed_loop() -> None:
    assert np.array_equal(sample_arrivals(OfflineArrival(), 3, _rng()), [0.0, 0.0, 0.0])
    t = sample_arrivals(ConstantArrival(rate_per_s=4.0), 4, _rng())
    assert np.array_equal(t, [0.0, 0.25, 0.5, 0.75])
    assert np.isnan(sample_arrivals(ClosedLoopArrival(concurrency=2), 3, _rng())).all()


# -------------------------------------------------------------------------------- stream


def test_same_seed_same_stream_and_different_seed_differs() -> None:
    s, _ = load_scenario_file(BASE)
    a, warn_a = build_stream(s, None)
    b, _ = build_stream(s, None)
    assert warn_a == []
    assert len(a) == 2000
    for name in ("arrival_s", "input_tokens", "output_tokens", "priority"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    other, _ = build_stream(load_scenario_file(BASE, ["workload.seed=1"])[0], None)
    for name in ("arrival_s", "input_tokens", "output_tokens", "priority"):
        assert not np.array_equal(getattr(a, name), getattr(other, name)), name
    assert a.arrival_s.dtype == np.float64 and a.input_tokens.dtype == np.int64
    assert a.output_tokens.dtype == np.int64 and a.priority.dtype == np.int64
    assert set(a.priority.tolist()) == {0, 1, 2}
    assert a.closed_loop_concurrency is None


def test_closed_loop_stream_and_default_priority() -> None:
    s, _ = load_scenario_file(
        BASE,
        ["workload.arrival={kind: closed_loop, concurrency: 4}", "workload.priorities=null"],
    )
    stream, _ = build_stream(s, None)
    assert stream.closed_loop_concurrency == 4
    assert np.isnan(stream.arrival_s).all()
    assert not stream.priority.any()


# -------------------------------------------------------------------------------- traces


def test_azure_timestamps_with_seven_fraction_digits() -> None:
    sec, frac = parse_azure_timestamp("2023-11-16 18:15:46.6805900")
    assert frac == pytest.approx(0.68059, abs=1e-12)
    sec2, frac2 = parse_azure_timestamp("2023-11-16 18:16:47.0000001")
    assert (sec2 - sec) + (frac2 - frac) == pytest.approx(60.3194101, abs=1e-9)
    assert parse_azure_timestamp("2023-11-16 18:15:46")[1] == 0.0


def test_azure_trace_relative_to_first_row(tmp_path: Path) -> None:
    (tmp_path / "az.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:47.0000001,20,2\n"
        "2023-11-16 18:15:46.6805900,10,1\n"
        "2023-11-16 18:17:00.1234567,30,3\n"
    )
    trace = read_trace("az.csv", tmp_path, time_scale=2.0)
    t = trace.arrival_s
    n_in = trace.input_tokens
    n_out = trace.output_tokens
    bad = trace.bad_lines
    assert bad == []
    # sorted by time; 100 ns resolution kept; times doubled by time_scale
    assert t.tolist() == pytest.approx([0.0, 2 * 0.3194101, 2 * 73.4428667], abs=1e-9)
    assert n_in.tolist() == [10, 20, 30] and n_out.tolist() == [1, 2, 3]


def test_plain_trace_sorted_stably(tmp_path: Path) -> None:
    (tmp_path / "p.csv").write_text(
        "arrival_s,input_tokens,output_tokens\n1.5,1,1\n0.5,2,2\n1.5,3,3\n0.0,4,4\n"
    )
    trace = read_trace(tmp_path / "p.csv")
    t = trace.arrival_s
    n_in = trace.input_tokens
    assert t.tolist() == [0.0, 0.5, 1.5, 1.5]
    assert n_in.tolist() == [4, 2, 1, 3]


def test_bad_trace_rows_are_named_and_can_be_skipped(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(
        "arrival_s,input_tokens,output_tokens\n"  # line 1
        "0.0,10,1\n"
        "0.1,10\n"  # line 3: two columns
        "0.2,10,1\n"
        "0.3,ten,1\n"  # line 5: not a number
        "0.4,10,0\n"  # line 6: zero tokens
        "-1,10,1\n"  # line 7: negative time
        "\n"
        "0.5,10,2\n"
    )
    with pytest.raises(InputError) as info:
        read_trace(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: 4 bad rows at lines 3, 5, 6, 7 (")
    assert "line 3: 2 columns, header has 3" in msg
    assert "line 5: input_tokens 'ten' is not a whole number" in msg
    assert "line 6: output_tokens 0 is below 1" in msg
    assert "line 7: arrival_s -1.0 is not a time >= 0" in msg
    assert msg.endswith("fix them or pass --skip-bad-rows")
    trace = read_trace(path, skip_bad_rows=True)
    t = trace.arrival_s
    n_out = trace.output_tokens
    bad = trace.bad_lines
    assert bad == [3, 5, 6, 7]
    assert t.tolist() == [0.0, 0.2, 0.5] and n_out.tolist() == [1, 1, 2]


def test_bad_azure_timestamp(tmp_path: Path) -> None:
    (tmp_path / "az.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68x,10,1\nyesterday,1,1\n"
    )
    with pytest.raises(InputError, match="2 bad rows at lines 2, 3") as info:
        read_trace(tmp_path / "az.csv")
    assert "TIMESTAMP 'yesterday' is not a time" in str(info.value)


def test_trace_header_empty_and_missing(tmp_path: Path) -> None:
    (tmp_path / "h.csv").write_text("t,in,out\n1,2,3\n")
    with pytest.raises(InputError, match="trace header must name arrival_s,input_tokens"):
        read_trace(tmp_path / "h.csv")
    (tmp_path / "e.csv").write_text("arrival_s,input_tokens,output_tokens\n")
    with pytest.raises(InputError, match="no usable rows"):
        read_trace(tmp_path / "e.csv")
    (tmp_path / "allbad.csv").write_text("arrival_s,input_tokens,output_tokens\nx,1,1\n")
    with pytest.raises(InputError, match="no usable rows"):
        read_trace(tmp_path / "allbad.csv", skip_bad_rows=True)
    with pytest.raises(InputError, match="cannot read trace"):
        read_trace(tmp_path / "absent.csv")


def test_trace_stream_caps_rows_and_warns(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n2,20,2\n1,10,1\nx,1,1\n3,30,3\n")
    data: dict[str, Any] = {
        "model": "m",
        "hardware": {"gpu": "h100-sxm"},
        "workload": {"arrival": {"kind": "trace", "path": "t.csv"}, "num_requests": 2},
    }
    s, _ = load_scenario_file(data)
    with pytest.raises(InputError, match="1 bad row at line 4"):
        build_stream(s, tmp_path)
    stream, warnings = build_stream(s, tmp_path, skip_bad_rows=True)
    assert stream.arrival_s.tolist() == [1.0, 2.0]  # the first num_requests rows by time
    assert stream.input_tokens.tolist() == [10, 20]
    assert warnings == ["t.csv: skipped 1 bad row (line 4)"]
    s5, _ = load_scenario_file(data, ["workload.num_requests=5"])
    _, warnings = build_stream(s5, tmp_path, skip_bad_rows=True)
    assert "trace has 3 usable rows, fewer than num_requests 5" in warnings[-1]


@pytest.mark.parametrize("name", ["synthetic_plain.csv", "synthetic_azure.csv"])
def test_shipped_synthetic_traces_load(name: str) -> None:
    trace = read_trace(TRACES / name)
    t = trace.arrival_s
    n_in = trace.input_tokens
    n_out = trace.output_tokens
    bad = trace.bad_lines
    assert bad == [] and len(t) == 200
    assert t[0] >= 0 and np.all(np.diff(t) >= 0)
    assert n_in.min() >= 1 and n_out.min() >= 1
    # a few requests per second, as README.md says
    assert 1.0 < len(t) / t[-1] < 8.0
    assert math.isfinite(float(t[-1]))
