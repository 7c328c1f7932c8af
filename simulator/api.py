"""The public Python API that the CLI, notebooks and sweeps share.

    import simulator
    s = simulator.load_scenario("scenarios/chat-llama-3.1-8b-h100.yaml")
    r = simulator.simulate(s)
    print(r.to_dict()["output_tokens_per_s"], r.requests["first_token_s"][:5])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from simulator.closed_form.client_phases import with_client_phases
from simulator.closed_form.kv_load import kv_chain_summary
from simulator.hardware.profile import Hardware
from simulator.inputs.scenario import Scenario, load_scenario_file
from simulator.inputs.shipped import resolve_scenario
from simulator.metrics.pool_stats import pool_summary
from simulator.metrics.summary import SLOTargets, client_offset_s, summarize
from simulator.quality.of_scenario import scenario_quality
from simulator.serving.engine_build import Engine, build_engine
from simulator.serving.records import DROP_REASONS
from simulator.serving.simulation import TIMESERIES_COLUMNS, CheckHook, RunOutput, run
from simulator.workload.stream import RequestStream, build_stream, check_horizon

if TYPE_CHECKING:
    from simulator.closed_form.scenario import Estimate


@dataclass(frozen=True)
class LoadedScenario:
    """A validated scenario, the folder its relative paths resolve against, and the engine
    built while checking it (reused by simulate so the physics is set up once)."""

    scenario: Scenario
    base_dir: Path | None
    engine: Engine | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Result:
    """What one simulation produced: the summary (public result keys) and per-request records."""

    summary: dict[str, Any]
    requests: npt.NDArray[Any]  # one row per request (serving/records.py RECORD_DTYPE)
    status: str  # completed | time_limit | queue_limit
    preemptions: int
    kv_capacity_tokens: int
    warnings: list[str] = field(default_factory=list)
    timeseries: npt.NDArray[np.float64] | None = None  # rows of TIMESERIES_COLUMNS
    # Compact token clock: per replica, the end time of each of its decode steps; plus, for
    # preempted requests only, their earlier decode-step ranges and re-prefill token times.
    decode_end_s: list[npt.NDArray[np.float64]] = field(default_factory=list)
    token_history: dict[int, tuple[list[tuple[int, int]], list[float]]] = field(
        default_factory=dict
    )
    # Speculative runs: tokens request i emitted at each of its decode steps, in step order.
    spec_emitted: dict[int, npt.NDArray[np.int64]] = field(default_factory=dict)

    def token_times(self, i: int) -> npt.NDArray[np.float64]:
        """Times at which request i emitted each of its output tokens (empty if it did not
        finish): its first token, then one per decode step it took part in."""
        rec = self.requests[i]
        if not np.isfinite(rec["finish_s"]) or rec["drop_reason"]:
            return np.empty(0)
        clock = self.decode_end_s[int(rec["replica"])]
        past, resumed = self.token_history.get(i, ([], []))
        parts = [np.array([rec["first_token_s"]]), np.asarray(resumed, dtype=np.float64)]
        parts += [clock[a : b + 1] for a, b in past]
        if rec["decode_last_step"] >= 0:
            parts.append(clock[int(rec["decode_first_step"]) : int(rec["decode_last_step"]) + 1])
        emitted = self.spec_emitted.get(i)
        if emitted is not None:  # a verify step emits its accepted tokens at the same time
            steps = np.sort(np.concatenate(parts[2:]))
            parts = [*parts[:2], np.repeat(steps, emitted)]
        return np.sort(np.concatenate(parts))

    def to_dict(self) -> dict[str, Any]:
        """The result JSON: the public result keys, then run status and engine facts."""
        out = dict(self.summary)
        out["status"] = self.status
        out["preemptions"] = self.preemptions
        out["kv_capacity_tokens"] = self.kv_capacity_tokens
        out["warnings"] = list(self.warnings)
        return out

    def drop_reasons(self) -> dict[str, int]:
        codes, counts = np.unique(self.requests["drop_reason"], return_counts=True)
        return {DROP_REASONS[c]: int(k) for c, k in zip(codes, counts, strict=True) if c}


def load_scenario(
    path_or_dict: str | Path | Mapping[str, Any] | LoadedScenario,
    overrides: Sequence[str] = (),
) -> LoadedScenario:
    """Read and validate a scenario (file path, shipped scenario name, or dict), applying
    `key.path=value` overrides, and check that its deployment can run (model loads, layout
    splits, weights fit)."""
    if isinstance(path_or_dict, LoadedScenario):
        return path_or_dict
    if isinstance(path_or_dict, str | Path):
        path_or_dict = resolve_scenario(path_or_dict)
    scenario, base_dir = load_scenario_file(path_or_dict, overrides)
    return LoadedScenario(scenario, base_dir, build_engine(scenario, base_dir))


def simulate(
    scenario: LoadedScenario | Scenario | str | Path | Mapping[str, Any],
    *,
    timeseries: bool = False,
    check: bool | CheckHook = False,
    skip_bad_rows: bool = False,
    hardware: Hardware | None = None,
    profiles: Mapping[str, Hardware] | None = None,
) -> Result:
    """Run one scenario to completion (or to its limits) and summarize it. `hardware`
    replaces the scenario's GPU profile (the uncertainty band runs perturbed profiles);
    `profiles` stand in for shipped profiles by name (a calibration's, calibration/applied.py)."""
    if isinstance(scenario, Scenario):
        loaded = LoadedScenario(scenario, None)
    else:
        loaded = load_scenario(scenario)
    s, base_dir = loaded.scenario, loaded.base_dir
    if hardware is None and not profiles and loaded.engine is not None:
        engine = loaded.engine
    else:
        engine = build_engine(s, base_dir, hardware, profiles)
    stream, warnings = build_stream(s, base_dir, skip_bad_rows, engine.max_model_len or None)
    check_horizon(stream.arrival_s)
    stream, phase_notes = with_client_phases(s, engine, stream)
    warnings.extend(phase_notes)
    hook = _check_hook(check, engine)
    out = run(s, engine, stream, timeseries=timeseries, check=hook)
    if hook is not None and hasattr(hook, "finish"):
        hook.finish(out)
    slo = None
    if s.slo is not None:
        slo = SLOTargets(s.slo.ttft_p99_s, s.slo.tpot_p99_s, s.slo.e2e_p99_s)
    itl_values, itl_weights = _itl_samples(out)
    summary = summarize(
        out.records, itl_values, itl_weights, s.num_gpus, slo, engine.style.front_end
    )
    summary.update(_run_facts(out, s, engine, slo))
    summary.update(_content_facts(out, stream, engine))
    summary["quality"] = scenario_quality(s).to_dict()
    warnings.extend(_run_warnings(out))
    if engine.speculative is not None:
        warnings.extend(engine.speculative.notes)
    kv_capacity = engine.memory.kv_capacity_tokens
    if engine.speculative is not None:
        kv_capacity = engine.speculative.kv_capacity_tokens
    summary["kv_chain"] = kv_chain_summary(engine, out.records, kv_capacity, out.preemptions,
                                           summary)
    ts = None
    if timeseries:
        ts = np.asarray(out.step_log.rows, dtype=np.float64).reshape(-1, len(TIMESERIES_COLUMNS))
    result = Result(
        summary, out.records, out.status, out.preemptions, kv_capacity,
        warnings, ts, out.decode_end_s, out.token_history, out.spec_emitted,
    )
    if hook is not None and hasattr(hook, "check_result"):
        hook.check_result(result)
    return result


def _check_hook(check: bool | CheckHook, engine: Engine) -> CheckHook | None:
    """The hook that checks the run: the invariant checker for `check=True`, the caller's own
    hook, or none."""
    if check is True:
        from simulator.serving.invariants import InvariantChecker

        return InvariantChecker(engine)
    return check or None


def _itl_samples(out: RunOutput) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(values, weights) of the inter-token latencies: each decode step's duration weighted by
    the tokens it emitted, plus the gaps of preempted requests resuming (weight one)."""
    dur = np.frombuffer(out.step_log.itl_s, dtype=np.float64)
    weights = np.frombuffer(out.step_log.itl_weight, dtype=np.float64)
    gaps = np.asarray(out.resume_gaps_s, dtype=np.float64)
    if not gaps.size:
        return dur, weights  # no copy of the per-step log unless needed
    return np.concatenate([dur, gaps]), np.concatenate([weights, np.ones_like(gaps)])


def _run_facts(out: RunOutput, s: Scenario, engine: Engine,
               slo: SLOTargets | None) -> dict[str, Any]:
    """Summary keys from the run beyond the per-request metrics: the GPUs' busy share (energy
    per token uses it), the pools of a disaggregated run, speculation, attention-DP imbalance
    and pipeline figures where the run has them."""
    facts: dict[str, Any] = {}
    # Share of simulated time the replicas ran engine steps.
    span_s = out.end_s * len(out.busy_s)
    facts["gpu_busy_fraction"] = min(1.0, sum(out.busy_s) / span_s) if span_s > 0 else 0.0
    if out.pools is not None:
        gpu_span_s = out.end_s * s.num_gpus
        busy = out.pools.gpu_busy_s() / gpu_span_s if gpu_span_s > 0 else 0.0
        facts["gpu_busy_fraction"] = min(1.0, busy)
        facts["disaggregation"] = pool_summary(
            out.pools, out.records, out.end_s, slo, engine.style.front_end
        )
    if out.speculative is not None:
        facts["speculative"] = out.speculative
    if out.attention_dp_imbalance_share is not None:
        facts["attention_dp_imbalance_share"] = out.attention_dp_imbalance_share
    if out.pipeline is not None:
        facts["pipeline"] = out.pipeline
    served = out.records["replica"][(out.records["drop_reason"] == 0)
                                    & (out.records["replica"] >= 0)]
    targets = len(out.busy_s) if out.pools is None else len(out.pools.decode)
    if targets > 1 and served.size:
        # The largest share of the served requests one replica (or rank) took: 1 / replicas
        # when the router balances, 1 when it sends everything to one.
        facts["busiest_replica_share"] = float(np.bincount(served).max()) / served.size
    return facts


def _content_facts(out: RunOutput, stream: RequestStream, engine: Engine) -> dict[str, Any]:
    """The `prefix_cache` block where prompts share content, the `sessions` block for a
    session workload."""
    from simulator.metrics.prefix_cache import prefix_cache_summary, sessions_summary

    facts: dict[str, Any] = {}
    if stream.content is None:
        return facts
    offset = client_offset_s(out.records, engine.style.front_end)
    first = engine.prefill_pool if engine.prefill_pool is not None else engine
    facts["prefix_cache"] = prefix_cache_summary(out.records, offset, out.cache_stats,
                                                 first.scheduler)
    if stream.session is not None:
        facts["sessions"] = sessions_summary(out.records, stream.session,
                                             out.records["front_end_s"])
    return facts


def _run_warnings(out: RunOutput) -> list[str]:
    """The run's own warnings, and one saying so when it stopped before every request was
    served."""
    warnings = list(out.warnings)
    if out.status != "completed":
        warnings.append(
            f"run stopped early ({out.status}) at t={out.end_s:.1f} s: the load exceeds what "
            f"the deployment can serve; results cover finished requests only"
        )
    return warnings


def estimate(
    scenario: LoadedScenario | Scenario | str | Path | Mapping[str, Any],
    *,
    skip_bad_rows: bool = False,
    profiles: Mapping[str, Hardware] | None = None,
) -> Estimate:
    """The closed-form steady-state estimate of a scenario (closed_form/scenario.py): the same step
    cost as `simulate`, no event simulation; milliseconds, not minutes, for a sweep screen.
    `profiles` stand in for shipped profiles by name, as in `simulate`."""
    from simulator.closed_form.scenario import estimate as estimate_scenario

    if isinstance(scenario, Scenario):
        loaded = LoadedScenario(scenario, None)
    else:
        loaded = load_scenario(scenario)
    s, base_dir = loaded.scenario, loaded.base_dir
    if loaded.engine is not None and not profiles:
        engine = loaded.engine
    else:
        engine = build_engine(s, base_dir, None, profiles)
    stream, _ = build_stream(s, base_dir, skip_bad_rows, engine.max_model_len or None)
    return estimate_scenario(s, engine, stream)


def __getattr__(name: str) -> Any:
    """`Estimate` loads with the estimate model, which `simulate` does not need."""
    if name == "Estimate":
        from simulator.closed_form.scenario import Estimate

        return Estimate
    raise AttributeError(f"module 'simulator.api' has no attribute {name!r}")


__all__ = ["Engine", "Estimate", "LoadedScenario", "Result", "estimate", "load_scenario",
           "simulate"]
