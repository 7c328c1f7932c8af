"""Predict one mapped run with the simulator or the closed-form estimate, and compare each
measured figure with its prediction (signed error: predicted / measured - 1).

Warm-up: the benchmark sent `warmup_requests` first and left them out of its figures. The
scenario simulates them too, in the same closed loop (so the measured requests meet a warm,
full engine, as the real ones did), and the figures are summarised over the requests issued
after them: requests warmup_requests.. in issue order. The estimate is a steady state and
has no warm-up to drop.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from simulator.measured.first_round import burst_clients, burst_ttft_s, with_first_round
from simulator.measured.ordering import lengths_label
from simulator.measured.scenario import Mapped
from simulator.measured.steady import closed_loop, round_means_ms, steady_means_ms
from simulator.measured.workload_map import Unsupported

FAILED = "simulation failed"  # the reason of a run the engine gave up on (or whose worker died)

# Exception class names (not imported: the cost model stays out of this module's imports)
# that mean "the simulator cannot run this setup", not "the input is wrong".
REFUSAL_CATEGORY = {
    "MemoryFitError": "does not fit in memory",
    "LayoutError": "layout refused",
    "ModelError": "model refused",
    "InputError": "layout refused by the schema",
}


def score(item: tuple[Mapped, str, tuple[Any, ...], bool]) -> dict[str, Any]:
    """The JSON-able record of one run: provenance, group, declared defaults, and either its
    measured, predicted and error figures or why it was refused (on the calibrated profiles
    its GPU values describe, where it has any; `steady`: a long closed loop stops once its
    rounds repeat, steady.py)."""
    mapped, method, gpu_values, steady = item
    run = mapped.run
    out = record_head(mapped)
    start = time.perf_counter()
    try:
        if mapped.refused is not None:
            raise mapped.refused
        predicted, notes = _predict(mapped, method, gpu_values, steady)
    except Unsupported as exc:
        return {**out, "status": "refused", "reason": exc.category, "detail": exc.detail}
    except ValueError as exc:  # InputError and the model/layout/memory errors subclass it
        category = REFUSAL_CATEGORY.get(type(exc).__name__, "refused")
        return {**out, "status": "refused", "reason": category,
                "detail": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}
    except RuntimeError as exc:  # the engine gave up (e.g. stalled): listed, never dropped
        return {**out, "status": "refused", "reason": FAILED,
                "detail": str(exc).splitlines()[0]}
    errors = signed_errors(run.measured, predicted)
    return {**out, "status": "scored", "predicted": predicted, "errors": errors,
            "notes": notes, "seconds": time.perf_counter() - start}


def record_head(mapped: Mapped) -> dict[str, Any]:
    """What every run's record starts with, scored or not: provenance, group, declared
    defaults and the measured figures."""
    run = mapped.run
    return {
        "id": run.run_id, "source": run.source, "row": run.row, "format": run.format,
        "gpu": mapped.group[0], "engine": mapped.group[1], "mode": mapped.group[2],
        "engine_version": run.engine_version, "model": run.model,
        "lengths": lengths_label(run),
        "defaults": list(mapped.defaults), "measured": dict(run.measured),
    }


def _predict(mapped: Mapped, method: str, gpu_values: tuple[Any, ...] = (),
             steady: bool = True) -> tuple[dict[str, float], list[str]]:
    import simulator
    from simulator.calibration.applied import profiles_of

    assert mapped.scenario is not None
    loaded = simulator.load_scenario(mapped.scenario)
    profiles = profiles_of(gpu_values) if gpu_values else None
    if method == "estimate":
        est = simulator.estimate(loaded, profiles=profiles)
        notes = [] if est.stable else [f"estimate: load above capacity ({est.limit})"]
        return estimate_figures(est), notes
    loop = closed_loop(mapped.scenario, mapped.run.load.warmup_requests,
                       set(mapped.run.measured)) if steady else None
    if loop is not None:
        clients = loop.clients

        warnings: list[str] = []

        def simulate_rounds(scenario: dict[str, Any]) -> list[tuple[float, float]]:
            short = simulator.load_scenario(scenario)
            result = simulator.simulate(short, profiles=profiles)
            warnings[:] = list(result.warnings)
            if result.summary["requests_dropped"]:
                warnings.append(f"{result.summary['requests_dropped']} requests dropped")
            return round_means_ms(result, _front_end(short), clients)

        got = steady_means_ms(mapped.scenario, loop, simulate_rounds)
        if got is not None:
            means, rounds = got
            return means, [*warnings, f"steady state: {rounds} of {loop.rounds} rounds "
                           f"simulated, the rest carried over (measured/steady.py)"]
    result = simulator.simulate(loaded, profiles=profiles)
    warmup = mapped.run.load.warmup_requests
    burst_of = (burst_clients(mapped.scenario, warmup)
                if "ttft.mean" in mapped.run.measured else None)
    burst = None if burst_of is None else burst_ttft_s(mapped.scenario, burst_of, profiles)
    return _window(mapped, loaded, result, burst)


def signed_errors(measured: Mapping[str, float], predicted: Mapping[str, float]
                  ) -> dict[str, float]:
    """predicted / measured - 1 of each measured figure that has a prediction."""
    return {k: predicted[k] / v - 1.0 for k, v in measured.items() if k in predicted}


def estimate_figures(est: Any) -> dict[str, float]:
    """The closed-form estimate's figures under the measured runs' names (milliseconds)."""
    ms = 1e3
    return {
        "ttft.mean": est.ttft_mean_s * ms, "ttft.p99": est.ttft_p99_s * ms,
        # The fluid estimate gives TPOT's median; with every request alike it is the mean.
        "tpot.mean": est.tpot_p50_s * ms, "tpot.p50": est.tpot_p50_s * ms,
        "tpot.p99": est.tpot_p99_s * ms,
        "output_tokens_per_s": est.output_tokens_per_s, "requests_per_s": est.rate_per_s,
    }


def _front_end(loaded: Any) -> Any:
    """The client-side front end the scenario's engine style charges (None: no engine)."""
    return loaded.engine.style.front_end if loaded.engine is not None else None


def _window(mapped: Mapped, loaded: Any, result: Any, burst: Any = None
            ) -> tuple[dict[str, float], list[str]]:
    """The simulated figures over the measured requests (warm-up left out), the first round's
    TTFTs those of `burst` where the run starts with one (measured/first_round.py)."""
    from simulator.metrics.summary import client_ttft_s, summarize

    warmup = mapped.run.load.warmup_requests
    notes = list(result.warnings)
    summary = result.summary
    if warmup:
        records = result.requests[warmup:]
        empty = np.empty(0)
        summary = summarize(records, empty, empty, result.summary["num_gpus"], None,
                            _front_end(loaded))
    if burst is not None:
        later = result.requests[warmup + burst.size:]
        later = later[(later["drop_reason"] == 0) & np.isfinite(later["finish_s"])]
        ttft = client_ttft_s(later, _front_end(loaded))
        rounds = loaded.engine.burst_rounds(loaded.scenario.workload)
        summary = {**summary, "ttft_s": {**summary["ttft_s"],
                                         "mean": with_first_round(ttft, burst, rounds)}}
    out: dict[str, float] = {}
    for quantity, key in (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("e2e", "e2e_s"),
                          ("itl", "itl_s")):
        stats = summary.get(key) or {}
        for stat in ("mean", "p50", "p90", "p99"):
            if stats.get(stat) is not None:
                out[f"{quantity}.{stat}"] = float(stats[stat]) * 1e3
    out["output_tokens_per_s"] = float(summary["output_tokens_per_s"])
    out["requests_per_s"] = float(summary["requests_per_s"])
    if summary["requests_dropped"]:
        notes.append(f"{summary['requests_dropped']} requests dropped")
    return out, notes
