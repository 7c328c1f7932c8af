"""When the clients of a closed loop send their first request, for `start: random_phase`.

A closed loop of C clients sending identical requests, started together, stays in lockstep in
the simulation: the requests that were prefilled one after another decode side by side, so they
finish within a few decode steps of each other and their successors arrive together again
(docs/closed-loops.md shows the timeline). Measured engines do not stay locked: their mean TTFT
barely moves from 4 to 8 clients where a lockstep would double it. `random_phase` starts each
client at its own instant in one request cycle instead, the state those runs show.

The cycle is what a client's request takes, end to end, at the closed loop's steady throughput:
C / (requests per second of the closed-form estimate), by Little's law. The instants are
uniform on [0, cycle), drawn from the workload's seed (a generator of their own, so the
stream's lengths do not change), sorted and shifted so the first client starts at t = 0.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from simulator.inputs.scenario import ClosedLoopArrival, Scenario
from simulator.serving.engine_build import Engine
from simulator.workload.stream import FloatArray, RequestStream

# Second word of the generator's seed: the client phases draw apart from the stream's draws.
PHASE_STREAM = 0xC11E


def with_client_phases(scenario: Scenario, engine: Engine, stream: RequestStream
                       ) -> tuple[RequestStream, list[str]]:
    """`stream` with its clients' first-send instants (RequestStream.start_s) where the
    scenario's closed loop starts at random phases; unchanged otherwise. Warnings say when the
    estimate gives no cycle to spread over (the clients then start together)."""
    arrival = scenario.workload.arrival
    clients = stream.closed_loop_concurrency
    if not isinstance(arrival, ClosedLoopArrival) or arrival.start != "random_phase" \
            or clients is None or len(stream) == 0:
        return stream, []
    from simulator.closed_form.scenario import estimate

    try:
        rate_per_s = estimate(scenario, engine, stream).rate_per_s
    except (ValueError, RuntimeError, ZeroDivisionError, OverflowError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return stream, [f"start random_phase: no closed-form estimate of the request cycle "
                        f"({reason}), so the clients start together"]
    if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
        return stream, [f"start random_phase: the estimate gives no throughput "
                        f"({rate_per_s} requests/s), so the clients start together"]
    cycle_s = clients / rate_per_s
    return dataclasses.replace(
        stream, start_s=phases_s(min(clients, len(stream)), cycle_s, scenario.workload.seed)
    ), []


def phases_s(clients: int, cycle_s: float, seed: int) -> FloatArray:
    """Sorted first-send instants of `clients` clients, uniform on one cycle, the first at 0."""
    rng = np.random.default_rng([seed, PHASE_STREAM])
    at: FloatArray = np.sort(rng.uniform(0.0, cycle_s, size=clients))
    first: FloatArray = at - at[0]
    return first
