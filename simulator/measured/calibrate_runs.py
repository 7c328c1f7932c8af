"""Measured runs as a calibration problem: each run's mean TTFT and mean TPOT are
observations; the free parameters are, with `host`, each engine style's two host costs
(`cpu_step_us`, `cpu_per_seq_us`), with `latency` its request latency (`request_latency_us`,
the delay on the way to the engine that holds no queue), with `burst` the rounds its closed
loops' start-up burst sets TTFT for (`closed_loop_burst_rounds`) and, with `gpu`, the streaming
fractions of the GEMM kernel classes each GPU's runs go through (calibration/gpu_factors.py);
the predictor is the closed-form estimate with every run's host cost set from its style's
values (as `deployment.overhead` would) and its GPU profile rebuilt with the GPU values (as
`--calibration` does, calibration/applied.py).

Each run's scenario is validated, its engine built and its request stream drawn once; a
prediction swaps the style's host costs into the engine (rebuilt on the calibrated profile
where the run has GPU parameters) and reruns the fluid estimate, and is cached per run and the
values of the parameters that run depends on (a finite-difference step on one parameter
re-estimates only the runs it can move)."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from simulator.calibration.build import RowSource
from simulator.calibration.gpu_factors import gpu_parameters, parameter_name, streaming_keys
from simulator.calibration.host_costs import (
    BURST_BOUNDS,
    BURST_KEY,
    HOST_KEYS,
    KERNEL_OVERHEAD_FIELDS,
    STYLE_KEYS,
)
from simulator.calibration.params import (
    FloatArray,
    FreeParameter,
    IntArray,
    Observation,
    ObservationSet,
    Target,
)
from simulator.calibration.stages import Stage
from simulator.measured.calibrate_kernels import kernel_parameters, with_engine_kernels
from simulator.measured.estimate_pool import EstimatePool
from simulator.measured.predict import REFUSAL_CATEGORY
from simulator.measured.run import LAYOUT_CONTRADICTED
from simulator.measured.scenario import WORKERS_GUESSED, Mapped
from simulator.measured.workload_map import Unsupported
from simulator.progress import Progress

# The bounds around the shipped host-cost values the fit moves (host_costs.HOST_KEYS).
BOUND_FACTOR = 20.0
# The request latency's bounds, microseconds: from next to nothing to a second, far above any
# serving stack's hops (a log scale: an optimiser started on a bound of 0 cannot leave it).
LATENCY_BOUNDS_US = (1.0, 1e6)
# Prior for a shipped value of 0 (a style without a per-sequence cost): a log-scale parameter
# needs a positive prior, so such a key starts from this many microseconds.
ZERO_PRIOR_US = {"cpu_step_us": 100.0, "cpu_per_seq_us": 1.0, "request_latency_us": 10_000.0}
METRICS = (("ttft_s", "ttft.mean"), ("tpot_s", "tpot.mean"))


@dataclass
class _Prepared:
    """One run ready to estimate: scenario, engine, stream, and the styles of its pools."""

    scenario: Any
    engine: Any
    stream: Any
    styles: tuple[str, ...]  # pool styles whose host cost the fit moves (empty: explicit)
    base_dir: Any = None
    gpu_keys: tuple[tuple[str, str], ...] = ()  # (GPU, key path) its GEMMs stream through
    gpu_params: tuple[tuple[str, str, str], ...] = ()  # (name, GPU, key) of declared ones


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

    def stages(self) -> tuple[Stage, ...]:
        """Host costs on every row first, then each GPU's factors on TPOT rows (decode, where
        the step is memory-bound) with the host costs held (calibration/stages.py); the
        engines' kernel values (comm, moe) likewise on TPOT rows. A GPU's
        factors move only its own runs, so fitting GPUs one at a time is the same least-squares
        problem as fitting them together, and each stops when it has converged."""
        host = tuple(p for p in self.params if p.target.kind == "engine_style"
                     and p.target.key not in KERNEL_OVERHEAD_FIELDS)
        # An engine's kernel values (all-reduce latency, FP8 MoE path) show in the decode
        # step, as a GPU factor does.
        kernels = tuple(p for p in self.params if p.target.kind == "engine_style"
                        and p.target.key in KERNEL_OVERHEAD_FIELDS)
        by_gpu: dict[str, list[FreeParameter]] = {}
        for p in self.params:
            if p.target.kind == "hardware":
                by_gpu.setdefault(p.target.name, []).append(p)
        tpot = frozenset({"tpot_s"})
        gpu = tuple(Stage(tuple(ps), tpot) for _, ps in sorted(by_gpu.items()))
        return ((Stage(host),) if host else ()) + ((Stage(kernels, tpot),) if kernels else ()) + gpu

    def predict(self, values: Mapping[str, float], indices: IntArray) -> FloatArray:
        """Predicted mean TTFT or TPOT (seconds) of the observations at `indices`."""
        idx = np.asarray(indices, dtype=np.intp)
        self.runs.fill(sorted({int(r) for r in self.obs_run[idx]}), values)
        out = np.empty(len(indices), dtype=np.float64)
        for n, i in enumerate(idx):
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

    pool: EstimatePool | None = None

    def _key(self, r: int, values: Mapping[str, float]) -> tuple[int, tuple[float, ...]]:
        """Run `r` and the values of the parameters it depends on."""
        prep = self.prepared[r]
        key = tuple(values.get(f"{s}.{k}", math.nan) for s in prep.styles for k in STYLE_KEYS)
        key += tuple(values.get(name, math.nan) for name, _, _ in prep.gpu_params)
        return r, key

    def fill(self, runs: Sequence[int], values: Mapping[str, float]) -> None:
        """Estimate the runs not cached at these values, on the pool's workers if any."""
        missing = [r for r in runs if self._key(r, values) not in self.cache]
        if not missing:
            return
        jobs = [(r, values) for r in missing]
        hits = self.pool.map(jobs) if self.pool is not None else [
            _estimate(self.prepared[r], values) for r in missing]
        for r, hit in zip(missing, hits, strict=True):
            self.cache[self._key(r, values)] = hit

    def prediction(self, r: int, values: Mapping[str, float]) -> tuple[float, float]:
        """(mean TTFT, mean TPOT) in seconds of run `r` at the parameter values."""
        key = self._key(r, values)
        hit = self.cache.get(key)
        if hit is None:
            hit = _estimate(self.prepared[r], values)
            self.cache[key] = hit
        return hit

    def start_workers(self, workers: int) -> None:
        """Estimate on `workers` forked processes from now on (1: in this process)."""
        self.stop_workers()
        if workers > 1:
            self.pool = EstimatePool(self.prepared, _estimate, workers)

    def stop_workers(self) -> None:
        """Stop the worker processes, if any."""
        if self.pool is not None:
            self.pool.close()
            self.pool = None


def ordering_points(problem: RunProblem, predicted: Any) -> list[Any]:
    """(group, measured, predicted) per run for measured/ordering.py, from one prediction per
    observation (`predicted`, seconds, as the cross-validation's before/after columns)."""
    from simulator.measured.ordering import Point, order_group

    names = dict(METRICS)
    out: dict[int, Point] = {}
    for i, (r, metric) in enumerate(zip(problem.obs_run, problem.obs_metric, strict=True)):
        m = problem.used[int(r)]
        if int(r) not in out:
            out[int(r)] = (order_group(m.run, m.group), {}, {})
        _, measured, pred = out[int(r)]
        measured[names[metric]] = float(problem.observations.measured[i])
        pred[names[metric]] = float(predicted[i])
    return list(out.values())


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
    return _Prepared(loaded.scenario, engine, stream, styles, loaded.base_dir,
                     streaming_keys(engine))


def _restyled(engine: Any, values: Mapping[str, float]) -> Any:
    """The engine (and its prefill pool) with each style's host cost from `values` (us)."""
    def one(e: Any) -> Any:
        name = e.style.name
        step_us, per_seq_us, latency_us = (values.get(f"{name}.{k}") for k in HOST_KEYS)
        return replace(e, style=e.style.with_host_cost(
            None if step_us is None else step_us * 1e-6,
            None if per_seq_us is None else per_seq_us * 1e-6,
            None if latency_us is None else latency_us * 1e-6).with_burst_rounds(
                values.get(f"{name}.{BURST_KEY}")))

    out = one(engine)
    if engine.prefill_pool is not None:
        out = replace(out, prefill_pool=one(engine.prefill_pool))
    return out


def _estimate(prep: _Prepared, values: Mapping[str, float]) -> tuple[float, float]:
    from simulator.closed_form.scenario import estimate

    try:
        engine = _rebuilt(_with_engine_kernels(prep, values), values)
        if prep.styles:
            engine = _restyled(engine, values)
        est = estimate(prep.scenario, engine, prep.stream)
    except (ValueError, RuntimeError, ZeroDivisionError, OverflowError):
        return math.nan, math.nan
    return float(est.ttft_mean_s), float(est.tpot_p50_s)


def _with_engine_kernels(prep: _Prepared, values: Mapping[str, float]) -> _Prepared:
    """The run with its styles' kernel values from `values` (calibrate_kernels.py); its
    engine is then rebuilt (engine None), or the run itself where `values` sets none."""
    scenario = with_engine_kernels(prep.scenario, prep.styles, values)
    return prep if scenario is None else replace(prep, scenario=scenario, engine=None)


def _rebuilt(prep: _Prepared, values: Mapping[str, float]) -> Any:
    """The run's engine built on its GPU profiles with the GPU parameters' values (the
    cached one where the run has none and its scenario was not changed: engine not None)."""
    from simulator.calibration.applied import profiles_of
    from simulator.serving.engine_build import build_engine

    # (GPU, key, value, shipped): profiles_of reads the first three.
    set_here = [(gpu, key, values[name], math.nan) for name, gpu, key in prep.gpu_params
                if name in values]
    if prep.engine is not None and not set_here:  # the cached engine is the same
        return prep.engine
    return build_engine(prep.scenario, prep.base_dir, None,
                        profiles_of(set_here) if set_here else None)


def host_parameters(styles: Sequence[str], cpu: bool = True,
                    latency: bool = False) -> tuple[FreeParameter, ...]:
    """Each style's cpu_step_us and cpu_per_seq_us (with `cpu`), priors from the shipped
    styles, bounds prior / BOUND_FACTOR .. prior * BOUND_FACTOR on a log scale; and its
    request_latency_us (with `latency`) from the shipped value (ZERO_PRIOR_US where that is 0)
    within LATENCY_BOUNDS_US."""
    from simulator.engines.style import load_engine_styles

    shipped = load_engine_styles()
    out = []
    for name in sorted(set(styles)):
        st = shipped[name]
        for key, seconds in (("cpu_step_us", st.cpu_step_s),
                             ("cpu_per_seq_us", st.cpu_per_seq_s)) if cpu else ():
            prior = round(seconds * 1e6, 9) if seconds > 0 else ZERO_PRIOR_US[key]
            out.append(FreeParameter(f"{name}.{key}", Target("engine_style", name, key), prior,
                                     prior / BOUND_FACTOR, prior * BOUND_FACTOR))
        if latency:
            key = "request_latency_us"
            shipped_us = round(st.front_end.latency_s * 1e6, 9)
            prior = min(max(shipped_us or ZERO_PRIOR_US[key], LATENCY_BOUNDS_US[0]),
                        LATENCY_BOUNDS_US[1])
            out.append(FreeParameter(f"{name}.{key}", Target("engine_style", name, key),
                                     prior, *LATENCY_BOUNDS_US))
    return tuple(out)


def burst_parameters(styles: Sequence[str]) -> tuple[FreeParameter, ...]:
    """Each style's closed_loop_burst_rounds from the shipped value, within BURST_BOUNDS on a
    linear scale (1, the first round alone, is a value it may take)."""
    from simulator.engines.style import load_engine_styles

    shipped = load_engine_styles()
    return tuple(
        FreeParameter(f"{name}.{BURST_KEY}", Target("engine_style", name, BURST_KEY),
                      shipped[name].closed_loop_burst_rounds, *BURST_BOUNDS, scale="linear")
        for name in sorted(set(styles)))


FIT_KINDS = ("host", "latency", "burst", "gpu", "comm", "moe")
GUESSED = "P/D worker counts not recorded"
# A run whose layout is in doubt (scenario.LAYOUT_IN_DOUBT) is counted under this reason.
IN_DOUBT = {WORKERS_GUESSED: GUESSED,
            LAYOUT_CONTRADICTED: "layout contradicted by another row"}


def build_problem(mapped: Sequence[Mapped], progress: Progress | None = None,
                  fit: Sequence[str] = ("host",)) -> RunProblem:
    """Prepare every mapped run; refused ones are counted by reason (as validate
    --measurements does); observations of runs without a finite estimate at the shipped
    values are dropped (counted). `fit` names the parameter kinds declared (FIT_KINDS): host
    costs and request latencies (the engine styles' values) first, on every row, then the GPU
    factors on what they leave."""
    used: list[Mapped] = []
    prepared: list[_Prepared] = []
    refused: Counter[str] = Counter()
    example: dict[str, str] = {}
    for m in mapped:
        doubt = next((d for d in IN_DOUBT if d in m.defaults), None)
        if doubt is not None:  # its per-GPU load is a guess: it cannot inform a fit
            refused[IN_DOUBT[doubt]] += 1  # (validate scores it apart the same way)
            example.setdefault(IN_DOUBT[doubt], doubt)
            if progress is not None:
                progress.step()
            continue
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
    params = host_parameters(styles, "host" in fit, "latency" in fit)
    if "burst" in fit:
        params += burst_parameters(styles)
    for kind in ("comm", "moe"):
        if kind in fit:
            params += kernel_parameters(styles, kind)
    if "gpu" in fit:
        params += _declare_gpu(used, prepared)
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


def _declare_gpu(used: Sequence[Mapped], prepared: list[_Prepared]) -> tuple[FreeParameter, ...]:
    """The GPU parameters enough runs exercise; each prepared run learns which apply to it."""
    from simulator.calibration.applied import shipped_value

    pairs = {pair for p in prepared for pair in p.gpu_keys}
    shipped = {(gpu, key): shipped_value(gpu, key) for gpu, key in pairs}
    params = gpu_parameters([p.gpu_keys for p in prepared], [config_key(m) for m in used],
                            shipped)
    declared = {(p.target.name, p.target.key) for p in params}
    for prep in prepared:
        prep.gpu_params = tuple((parameter_name(gpu, key), gpu, key)
                                for gpu, key in prep.gpu_keys if (gpu, key) in declared)
    return params
