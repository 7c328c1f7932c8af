"""A config's capacity under an SLO: the highest offered arrival rate whose run meets it.

A finite run offered R requests/s completes fewer than R per second (its ramp and drain are
inside the run), so reading a run's achieved rate as the config's capacity under-sizes it (20
offered, 18.6 achieved: two copies where one serves). The capacity is searched instead: the
closed-form estimate brackets it (cheap: bisection on the rate over its steady state), then the
simulation bisects around that bracket until the rate that meets the SLO and the rate that
misses it are within `rel_tol`. The answer says whether the search found a missing rate above
it (the point was pushed to saturation) or ran out of runs first."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from simulator.errors import InputError

if TYPE_CHECKING:
    from simulator.calibration.applied import GpuValue
    from simulator.hardware.profile import Hardware

    # A calibration's GPU values (calibration/applied.py Applied.gpu_values): plain data, so a
    # worker process rebuilds the calibrated profiles itself.
    GpuValues = Sequence[GpuValue]

# Arrival kinds whose rate the search moves; closed loops and offline runs become Poisson (a
# capacity is a rate), trace replays are not searched (their rate is the trace's).
RATED = ("poisson", "gamma", "constant")
MIN_REQUESTS = 200  # fewer gives a p99 of two requests
MIN_DURATION_S = 60.0  # arrivals span at least this long: a backlog has time to show
# A run whose queue wait grows by more than this many seconds per second of arrivals is
# overloaded (arrivals outpace service by about that fraction), whatever its SLO says: a
# TPOT-only target is met by an engine whose waiting queue grows without bound.
MAX_WAIT_GROWTH = 0.02
FIRST_STEP = 1.15  # first step of the search outward from the estimate's bracket (then squared)


@dataclass(frozen=True, slots=True)
class Capacity:
    """The highest rate found to meet the SLO, and how it was found."""

    rate_per_s: float  # 0: the SLO is missed even at the lowest rate tried
    saturated: bool  # a rate above it was simulated and missed the SLO
    upper_per_s: float | None  # the lowest rate simulated that missed it
    simulations: int
    estimate_per_s: float  # the estimate's bracket (its highest rate meeting the SLO)
    why_missed: str = ""  # what the lowest missing rate missed
    config: str = ""  # the config searched (points differing only in load share it)
    # The results.csv columns of the run at the capacity (latency, per-user speed, GPUs,
    # quality): what a ranking reads, the same whether the sweep simulated or screened it.
    at_capacity: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"rate_per_s": self.rate_per_s, "saturated": self.saturated,
                "upper_per_s": self.upper_per_s, "simulations": self.simulations,
                "estimate_per_s": self.estimate_per_s, "why_missed": self.why_missed}

    def describe(self) -> str:
        """'17.2 req/s by search (misses the SLO at 17.7: tpot_s.p99 ...)'."""
        if self.rate_per_s <= 0:
            return f"misses the SLO at every rate searched ({self.why_missed})"
        if self.saturated:
            return (f"{self.rate_per_s:.3g} req/s by search (misses the SLO at "
                    f"{self.upper_per_s:.3g}: {self.why_missed})")
        return (f"at least {self.rate_per_s:.3g} req/s by search (not pushed to its limit in "
                f"{self.simulations} runs)")


# The estimate's figure for each SLO column it predicts (others are judged by the simulation).
_ESTIMATED = {"ttft_s.p99": "ttft_p99_s", "ttft_s.mean": "ttft_mean_s",
              "tpot_s.p99": "tpot_p99_s", "tpot_s.p50": "tpot_p50_s",
              "tpot_s.mean": "tpot_p50_s"}


def searchable(scenario: Mapping[str, Any]) -> bool:
    """Whether the search can move this scenario's arrival rate in requests a second: not a
    trace replay, and not sessions (their arrivals start sessions, whose turns follow their
    answers; the search's bracket, the closed-form estimate, has no sessions either)."""
    wl = scenario.get("workload") or {}
    kind = (wl.get("arrival") or {}).get("kind")
    return kind != "trace" and not wl.get("sessions")


def config_key(scenario: Mapping[str, Any]) -> str:
    """The point key (grid.point_key: scenario and the files it reads) of the scenario without
    its arrival process and name: points of a sweep's load axis share it."""
    from simulator.sweep.grid import point_key

    s = dict(scenario)
    s["workload"] = {k: v for k, v in (s.get("workload") or {}).items() if k != "arrival"}
    s.pop("name", None)
    return point_key(s)


def unique_configs(scenarios: Iterable[tuple[str, Mapping[str, Any] | None]]
                   ) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """(id -> config key, config key -> its first scenario) over (id, scenario) pairs whose
    rate can be searched (a missing scenario or a trace replay is left out)."""
    key_of: dict[str, str] = {}
    configs: dict[str, dict[str, Any]] = {}
    for pid, scenario in scenarios:
        if not scenario or not searchable(scenario):
            continue
        key = key_of[pid] = config_key(scenario)
        configs.setdefault(key, dict(scenario))
    return key_of, configs


def at_rate(scenario: Mapping[str, Any], rate_per_s: float) -> dict[str, Any]:
    """The scenario offered `rate_per_s` (Poisson where it was a closed loop or offline), run
    over at least MIN_REQUESTS requests and MIN_DURATION_S of arrivals."""
    s = copy.deepcopy(dict(scenario))
    wl = s.setdefault("workload", {})
    arrival = dict(wl.get("arrival") or {})
    if arrival.get("kind") not in RATED:
        arrival = {"kind": "poisson"}
    arrival["rate_per_s"] = rate_per_s
    wl["arrival"] = arrival
    wl["num_requests"] = max(int(wl.get("num_requests", MIN_REQUESTS)), MIN_REQUESTS,
                             math.ceil(rate_per_s * MIN_DURATION_S))
    return s


# Judges one run: (why it misses the SLO, empty when it meets it; its results.csv columns).
Judge = Callable[[dict[str, Any]], tuple[list[str], dict[str, Any]]]


def _estimate_meets(scenario: Mapping[str, Any], targets: Mapping[str, float],
                    profiles: Mapping[str, Hardware] | None = None
                    ) -> tuple[Callable[[float], bool], float]:
    """(does the estimate meet the SLO at a rate, the estimated capacity in requests/s)."""
    import simulator

    def est(rate: float) -> Any:
        return simulator.estimate(simulator.load_scenario(at_rate(scenario, rate)),
                                  profiles=profiles)

    cap = est(1e-3).capacity_per_s

    def meets(rate: float) -> bool:
        e = est(rate)
        return e.stable and all(getattr(e, _ESTIMATED[c]) <= v
                                for c, v in targets.items() if c in _ESTIMATED)
    return meets, cap


def simulate_failures(scenario: dict[str, Any], targets: Mapping[str, float],
                      pessimistic: bool = False,
                      profiles: Mapping[str, Hardware] | None = None
                      ) -> tuple[list[str], dict[str, Any]]:
    """Why one simulated run of `scenario` misses the SLO (empty: it meets it), and the run's
    results.csv columns. `pessimistic`: on the GPU profile's pessimistic edge (every
    efficiency scaled down by the profile's stated spread, validation/uncertainty.py);
    `profiles`: calibrated profiles standing in for shipped ones by name."""
    import simulator
    from simulator.hardware.profile import load_hardware
    from simulator.sweep.slo import slo_failures
    from simulator.sweep.table import flatten
    from simulator.validation.uncertainty import perturbed

    loaded = simulator.load_scenario(scenario)
    if pessimistic:  # every GPU the run costs on, a P/D pool's own one included
        known = dict(profiles or {})
        known = {gpu: perturbed(known.get(gpu) or load_hardware(gpu), -1)
                 for gpu in _gpus_of(loaded.scenario)}
        result = simulator.simulate(loaded, profiles=known)
    else:
        result = simulator.simulate(loaded, profiles=profiles)
    row = flatten(result.to_dict())
    why = slo_failures(row, targets)
    growth = wait_growth(result.requests["arrival_s"], result.requests["scheduled_s"])
    if growth > MAX_WAIT_GROWTH:
        why.append(f"overloaded (queue wait grows {growth:.2g} s per s)")
    return why, row


def _gpus_of(scenario: Any) -> set[str]:
    """The GPU profiles a validated scenario's engines cost on: its hardware, and a P/D pool's
    own where it names one."""
    gpus = {scenario.hardware.gpu}
    for _, pool in scenario.deployment.engine_types:
        hw = getattr(pool, "hardware", None)
        if hw is not None:
            gpus.add(hw.gpu)
    return gpus


def wait_growth(arrival_s: npt.NDArray[np.float64], scheduled_s: npt.NDArray[np.float64]
                ) -> float:
    """Least-squares slope of queue wait against arrival time over the scheduled requests
    (0 for a stable queue, the overload fraction for a growing one)."""
    ok = np.isfinite(scheduled_s)
    t, w = arrival_s[ok], scheduled_s[ok] - arrival_s[ok]
    if len(t) < 3 or float(np.ptp(t)) <= 0:
        return 0.0
    return float(np.polyfit(t, w, 1)[0])


def _estimate_bracket(scenario: Mapping[str, Any], targets: Mapping[str, float],
                      rel_tol: float, profiles: Mapping[str, Hardware] | None = None
                      ) -> tuple[float, float]:
    """(the estimate's highest rate meeting the SLO, 0 if none; its capacity), by bisection."""
    meets, cap = _estimate_meets(scenario, targets, profiles)
    if meets(cap * (1 - 1e-6)):
        return cap * (1 - 1e-6), cap
    lo, hi = 0.0, cap
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if meets(mid) else (lo, mid)
        if hi - lo <= rel_tol / 4 * hi:
            break
    return lo, cap


def slo_capacity(scenario: Mapping[str, Any], targets: Mapping[str, float], *,
                 rel_tol: float = 0.05, max_simulations: int = 8,
                 judge: Judge | None = None, pessimistic: bool = False,
                 profiles: Mapping[str, Hardware] | None = None) -> Capacity:
    """The highest rate meeting `targets` ('ttft_s.p99' -> seconds, ...): the estimate's
    bisection brackets it, the simulation (`judge`, for tests) settles it within `rel_tol`;
    `pessimistic` judges on the GPU's pessimistic profile; `profiles` (a calibration's)
    stand in for shipped profiles by name in the estimate and the simulations alike."""
    judge = judge or (lambda s: simulate_failures(s, targets, pessimistic, profiles))
    lo_e, cap = _estimate_bracket(scenario, targets, rel_tol, profiles)
    start = lo_e if lo_e > 0 else cap * 0.05
    lo, hi, why_hi, runs, best = 0.0, None, "", 0, {}
    rate, step = start, FIRST_STEP
    # Outward from the estimate in steps that square (1.15, 1.32, 1.75, 3.06, ...: near it
    # first, where it usually errs, yet any distance within a few runs) until one rate meets
    # and one misses, then bisect.
    while runs < max_simulations:
        why, row = judge(at_rate(scenario, rate))
        runs += 1
        if why:
            hi, why_hi = rate, "; ".join(why)
        else:
            lo, best = rate, row
        if hi is None:
            rate, step = rate * step, step * step
        elif lo == 0.0:
            rate, step = rate / step, step * step
            if rate < start * 1e-3:
                break
        elif hi - lo <= rel_tol * lo:
            break
        else:
            rate = (lo + hi) / 2
    return Capacity(lo, hi is not None and lo > 0, hi, runs, lo_e, why_hi, at_capacity=best)

def recorded_gpu_values(manifest: Mapping[str, Any], where: str) -> tuple[GpuValue, ...]:
    """The calibrated GPU values a sweep.json records (pipeline.manifest_of), checked: one
    InputError line naming the file and what is wrong."""
    raw = manifest.get("calibrated_gpu_values", [])
    out: list[GpuValue] = []
    for i, v in enumerate(raw if isinstance(raw, list) else [raw]):
        ok = (isinstance(v, list) and len(v) == 4 and all(isinstance(x, str) for x in v[:2])
              and all(isinstance(x, int | float) and not isinstance(x, bool)
                      and math.isfinite(x) for x in v[2:]))
        if not ok:
            raise InputError(f"{where}: calibrated_gpu_values[{i}]: {v!r} is not [GPU, key "
                             f"path, value, shipped value]; rerun the sweep")
        out.append((v[0], v[1], float(v[2]), float(v[3])))
    return tuple(out)


def _search(job: tuple[dict[str, Any], dict[str, float], bool, GpuValues]) -> Capacity:
    """One config's search (module level: a worker process runs it)."""
    scenario, targets, pessimistic, gpu_values = job
    from simulator.calibration.applied import profiles_of

    profiles = profiles_of(gpu_values) if gpu_values else None
    return slo_capacity(scenario, targets, pessimistic=pessimistic, profiles=profiles)


def search_all(scenarios: Sequence[dict[str, Any]], targets: Mapping[str, float], *,
               pessimistic: bool = False, workers: int = 1,
               on_done: Callable[[], None] | None = None,
               gpu_values: GpuValues = ()) -> list[Capacity]:
    """Each scenario's capacity, in order, on `workers` processes (the searches share
    nothing, so they spread over cores); on the calibrated profiles of `gpu_values`."""
    jobs = [(dict(s), dict(targets), pessimistic, tuple(gpu_values)) for s in scenarios]
    out: list[Capacity] = []
    if workers <= 1 or len(jobs) <= 1:
        results: Iterator[Capacity] = map(_search, jobs)
        for cap in results:
            out.append(cap)
            if on_done is not None:
                on_done()
        return out
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
        for cap in pool.map(_search, jobs):
            out.append(cap)
            if on_done is not None:
                on_done()
    return out


def sweep_configs(rows: Sequence[Mapping[str, Any]], sweep_dir: Path
                  ) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """unique_configs of the points simulated or screened out (a screen rules points out on
    the sweep's own axes, which say nothing about price or capacity)."""
    from simulator.sweep.store import point_scenario

    return unique_configs((str(r.get("point_id", "")),
                           point_scenario(sweep_dir, str(r.get("point_id", ""))))
                          for r in rows if r.get("point_status", "ok") in ("ok", "screened"))


def sweep_capacities(rows: Sequence[Mapping[str, Any]], sweep_dir: Path,
                     targets: Mapping[str, float], on_done: Callable[[], None] | None = None,
                     pessimistic: bool = False, workers: int = 1,
                     gpu_values: GpuValues = ()) -> dict[str, Capacity]:
    """Point id -> its config's capacity (sweep_configs: each config searched once, on
    `workers` processes), on the calibrated profiles the sweep ran on (`gpu_values`, its
    sweep.json's `calibrated_gpu_values`)."""
    key_of, configs = sweep_configs(rows, sweep_dir)
    found = search_all(list(configs.values()), targets, pessimistic=pessimistic,
                       workers=workers, on_done=on_done, gpu_values=gpu_values)
    done = {k: replace(c, config=k) for k, c in zip(configs, found, strict=True)}
    return {pid: done[key] for pid, key in key_of.items()}
