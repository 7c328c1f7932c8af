"""A measured run's load as a scenario workload (measured/scenario.py maps the rest), and what
every mapping step shares: the declared-defaults list it adds to and the refusal it raises."""

from __future__ import annotations

import math
from typing import Any

from simulator.measured.run import Load, MeasuredRun

# The benchmark's clients send their first requests together, but the engines it measures do not
# stay in the lockstep that start leaves identical requests in, which the simulation would keep
# (closed_form/client_phases.py, docs/closed-loops.md): the runs are reproduced from clients at
# random phases of their request cycle.
CLIENT_START = "random_phase"
CLIENT_START_NOTE = ("closed-loop clients start at random phases of their request cycle (the "
                     "measured engines show no lockstep of identical requests), the first "
                     "measured round a burst of every client into the idle engine (the "
                     "harness waits its warm-up out, then starts all clients at once; "
                     "measured/first_round.py)")


class Unsupported(Exception):
    """A run the simulator cannot express: `category` groups the count, the text says why."""

    def __init__(self, category: str, detail: str) -> None:
        super().__init__(category, detail)
        self.category, self.detail = category, detail


def declare(defaults: list[str], text: str) -> None:
    """Add a declared default once (the mapping's choices a run's result lists)."""
    if text not in defaults:
        defaults.append(text)


def workload(run: MeasuredRun, load: Load, defaults: list[str]) -> dict[str, Any]:
    """The run's load as a scenario workload, warm-up requests included (scored apart)."""
    rate = load.rate_per_s
    if load.concurrency is not None and (rate is None or math.isinf(rate)):
        arrival: dict[str, Any] = {"kind": "closed_loop", "concurrency": load.concurrency,
                                   "start": CLIENT_START}
        declare(defaults, CLIENT_START_NOTE)
    elif load.concurrency is not None:
        raise Unsupported("rate capped by max_concurrency", f"request rate {rate}/s with at "
                          f"most {load.concurrency} in flight: no arrival kind expresses both")
    elif rate is None or math.isinf(rate):
        arrival = {"kind": "offline"}
    elif load.burstiness == 1.0:
        arrival = {"kind": "poisson", "rate_per_s": rate}
    else:
        arrival = {"kind": "gamma", "rate_per_s": rate, "cv": 1 / math.sqrt(load.burstiness)}
    return {
        "arrival": arrival,
        "input_tokens": _lengths(load.input_tokens, load.input_lengths, "input", defaults),
        "output_tokens": _lengths(load.output_tokens, load.output_lengths, "output", defaults),
        "num_requests": load.num_requests + load.warmup_requests,
        "seed": 0,
    }


def _lengths(mean: float, values: tuple[int, ...] | None, what: str,
             defaults: list[str]) -> dict[str, Any]:
    if values is not None:
        declare(defaults, f"{what} lengths resampled from the recorded per-request lengths")
        return {"kind": "empirical", "values": list(values)}
    if mean != round(mean):
        declare(defaults, f"{what} lengths fixed at the recorded mean, rounded")
    return {"kind": "fixed", "value": max(1, round(mean))}
