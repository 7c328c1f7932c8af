"""Measured runs as a calibration problem for the engine styles' host costs: each run's mean
TTFT and mean TPOT are observations, each engine style in the data contributes two free
parameters (`cpu_step_us`, `cpu_per_seq_us`), and the predictor is the closed-form estimate
with every run's host cost set from its style's values (as `deployment.overhead` would).

Each run's scenario is validated, its engine built and its request stream drawn once; a
prediction only swaps the style's two host-cost figures into the cached engine and reruns the
fluid estimate, and is cached per run and host-cost values (a finite-difference step on one
style's parameter re-estimates only that style's runs)."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from simulator.calibration.build import RowSource
from simulator.calibration.params import (
    FloatArray,
    FreeParameter,
    IntArray,
    Observation,
    ObservationSet,
    Target,
)
from simulator.measured.predict import REFUSAL_CATEGORY
from simulator.measured.scenario import Mapped, Unsupported
from simulator.progress import Progress

# The host-cost keys of an engine style the fit moves, and the bounds around the shipped value.
HOST_KEYS = ("cpu_step_us", "cpu_per_seq_us")
BOUND_FACTOR = 20.0
# Prior for a shipped value of 0 (a style without a per-sequence cost): a log-scale parameter
# needs a positive prior, so such a key starts from this many microseconds.
ZERO_PRIOR_US = {"cpu_step_us": 100.0, "cpu_per_seq_us": 1.0}
METRICS = (("ttft_s", "ttft.mean"), ("tpot_s", "tpot.mean"))


@dataclass
class _Prepared:
    """One run ready to estimate: scenario, engine, stream, and the styles of its pools."""

    scenario: Any
    engine: Any
    stream: Any
    styles: tuple[str, ...]  # pool styles whose host cost the fit moves (empty: explicit)


@dataclass
class RunProblem:
    """The runs used (their Mapped), those refused (reason -> count, with one example each),
    the observations (two per run at most) with their run and source, and the parameters."""

    used: list[Mapped]
    refused: Counter[str]
    refused_example: dict[str, str]
    observations: ObservationSet
    obs_run: IntArray
    obs_metric: tuple[str, ...]
    sources: tuple[RowSource, ...]
    params: tuple[FreeParameter, ...]
    dropped_observations: int
    runs: _Predictions = field(repr=False)

    def predict(self, values: Mapping[str, float], indices: IntArray) -> FloatArray:
        """Predicted mean TTFT or TPOT (seconds) of the observations at `indices`."""
        out = np.empty(len(indices), dtype=np.float64)
        for n, i in enumerate(np.asarray(indices, dtype=np.intp)):
            r = int(self.obs_run[i])
            ttft, tpot = self.runs.prediction(r, values)
            out[n] = ttft if self.obs_metric[i] == "ttft_s" else tpot
        return out


@dataclass
class _Predictions:
    """The prepared runs and their predictions so far, per run and host-cost values."""

    prepared: list[_Prepared]
    cache: dict[tuple[int, tuple[float, ...]], tuple[float, float]] = field(
        default_factory=dict)

    def prediction(self, r: int, values: Mapping[str, float]) -> tuple[float, float]:
        """(mean TTFT, mean TPOT) in seconds of run `r` at the parameter values."""
        prep = self.prepared[r]
        key = tuple(values.get(f"{s}.{k}", math.nan) for s in prep.styles for k in HOST_KEYS)
        hit = self.cache.get((r, key))
        if hit is None:
            hit = _estimate(prep, values)
            self.cache[(r, key)] = hit
        return hit


def config_key(m: Mapped) -> str:
    """The configuration a run belongs to: everything but its concurrency and lengths
    (engine, version, model, GPU, formats, mode, layout; for files without a layout, the
    deployment given alongside). Cross-validation never splits one across folds."""
    run = m.run
    parts: dict[str, Any] = {
        "engine": run.engine, "version": run.engine_version, "model": run.model,
        "gpu": run.gpu, "gemm": run.gemm_quant, "moe": run.moe_quant, "mode": run.mode,
        "pools": [repr(p) for p in run.pools],
    }
    if not run.pools and m.scenario is not None:
        parts["deployment"] = {k: v for k, v in m.scenario.items() if k != "workload"}
    return json.dumps(parts, sort_keys=True, default=str)


def _prepare(m: Mapped) -> _Prepared:
    """Validate, build and draw the stream of one mapped run (raises what scoring catches)."""
    import simulator
    from simulator.workload.stream import build_stream

    if m.refused is not None:
        raise m.refused
    assert m.scenario is not None
    loaded = simulator.load_scenario(m.scenario)
    engine = loaded.engine
    assert engine is not None
    stream, _ = build_stream(loaded.scenario, loaded.base_dir, False,
                             engine.max_model_len or None)
    pools = [pool for _, pool in loaded.scenario.deployment.engine_types]
    # A run whose scenario sets its overhead keeps it: the fit moves only the styles' own.
    explicit = any(pool.overhead is not None for pool in pools)
    styles = () if explicit else tuple(dict.fromkeys(str(pool.engine) for pool in pools))
    return _Prepared(loaded.scenario, engine, stream, styles)


def _restyled(engine: Any, values: Mapping[str, float]) -> Any:
    """The engine (and its prefill pool) with each style's host cost from `values` (us)."""
    def one(e: Any) -> Any:
        name = e.style.name
        step_us = values.get(f"{name}.cpu_step_us")
        per_seq_us = values.get(f"{name}.cpu_per_seq_us")
        return replace(e, style=e.style.with_host_cost(
            None if step_us is None else step_us * 1e-6,
            None if per_seq_us is None else per_seq_us * 1e-6))

    out = one(engine)
    if engine.prefill_pool is not None:
        out = replace(out, prefill_pool=one(engine.prefill_pool))
    return out


def _estimate(prep: _Prepared, values: Mapping[str, float]) -> tuple[float, float]:
    from simulator.closed_form.scenario import estimate

    engine = _restyled(prep.engine, values) if prep.styles else prep.engine
    try:
        est = estimate(prep.scenario, engine, prep.stream)
    except (ValueError, RuntimeError, ZeroDivisionError, OverflowError):
        return math.nan, math.nan
    return float(est.ttft_mean_s), float(est.tpot_p50_s)


def host_parameters(styles: Sequence[str]) -> tuple[FreeParameter, ...]:
    """cpu_step_us and cpu_per_seq_us of each style, priors from the shipped styles, bounds
    prior / BOUND_FACTOR .. prior * BOUND_FACTOR on a log scale."""
    from simulator.engines.style import load_engine_styles

    shipped = load_engine_styles()
    out = []
    for name in sorted(set(styles)):
        st = shipped[name]
        for key, seconds in (("cpu_step_us", st.cpu_step_s), ("cpu_per_seq_us",
                                                              st.cpu_per_seq_s)):
            prior = round(seconds * 1e6, 9) if seconds > 0 else ZERO_PRIOR_US[key]
            out.append(FreeParameter(f"{name}.{key}", Target("engine_style", name, key), prior,
                                     prior / BOUND_FACTOR, prior * BOUND_FACTOR))
    return tuple(out)


def build_problem(mapped: Sequence[Mapped], progress: Progress | None = None) -> RunProblem:
    """Prepare every mapped run; refused ones are counted by reason (as validate
    --measurements does); observations of runs without a finite estimate at the shipped
    values are dropped (counted)."""
    used: list[Mapped] = []
    prepared: list[_Prepared] = []
    refused: Counter[str] = Counter()
    example: dict[str, str] = {}
    for m in mapped:
        try:
            prep = _prepare(m)
        except Unsupported as exc:
            refused[exc.category] += 1
            example.setdefault(exc.category, exc.detail)
        except ValueError as exc:
            reason = REFUSAL_CATEGORY.get(type(exc).__name__, "refused")
            refused[reason] += 1
            example.setdefault(reason, str(exc).splitlines()[0] if str(exc) else reason)
        else:
            used.append(m)
            prepared.append(prep)
        if progress is not None:
            progress.step()
    styles = sorted({s for p in prepared for s in p.styles})
    params = host_parameters(styles)
    predictions = _Predictions(prepared)
    at_prior = {p.name: p.prior for p in params}
    rows: list[Observation] = []
    runs: list[int] = []
    metrics: list[str] = []
    sources: list[RowSource] = []
    dropped = 0
    for r, m in enumerate(used):
        pred = predictions.prediction(r, at_prior)
        for (metric, key), value in zip(METRICS, pred, strict=True):
            if key not in m.run.measured:
                continue
            if not (math.isfinite(value) and value > 0):
                dropped += 1
                continue
            rows.append(Observation(m.run.measured[key] * 1e-3, metric, config_key(m),
                                    m.group))
            runs.append(r)
            metrics.append(metric)
            sources.append(RowSource(m.run.source, m.run.engine or m.group[1],
                                     m.run.engine_version or "unknown"))
    return RunProblem(used, refused, example, ObservationSet.of(rows),
                      np.array(runs, dtype=np.intp), tuple(metrics), tuple(sources), params,
                      dropped, predictions)
