"""How a scenario's load sets the steady state of each side of its deployment: an open loop's
offered rate, a closed loop's population on one pool of units, or a closed loop cycling
through disaggregated prefill and decode pools (Little's law). Split from scenario.py, which
turns the loaded sides into the estimate's metrics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simulator.closed_form.sides import Side, open_side, pool_prefill_wait_s
from simulator.closed_form.steady_state import (
    Operating,
    Traffic,
    Unit,
    capacity,
    decode_steps,
    prefill_capacity_per_s,
    solve_population,
)
from simulator.inputs.scenario import ClosedLoopArrival, Scenario
from simulator.serving.engine_build import Engine
from simulator.workload.stream import RequestStream

SideIn = tuple[Unit, Traffic, int]  # a side's unit, the traffic it sees, how many units

POOLS_NOTE = ("closed loop over disaggregated pools: the rate at which the clients' cycle "
              "closes (Little's law), at most the tighter pool's capacity; clients beyond it "
              "wait in the prefill queue")


@dataclass(frozen=True)
class Loaded:
    """The sides in their steady state under the scenario's load, and what set it."""

    sides: tuple[Side, ...]
    rate_per_s: float  # requests/s served (closed loop: what the population drives)
    population: float | None  # clients in flight of a closed loop or backlog; None: open loop
    excess_s: float = 0.0  # closed loop over pools beyond their capacity: the clients' wait
    notes: tuple[str, ...] = ()


def deployment_capacity_per_s(sides_in: list[SideIn]) -> float:
    """Most requests/s the deployment sustains: the tighter of its sides."""
    caps = []
    for unit, traffic, count in sides_in:
        if unit.prefills_only:
            caps.append(prefill_capacity_per_s(unit, traffic) * count)
        else:
            caps.append(capacity(unit, traffic)[0].rate_per_s * count)
    return min(caps)


def closed_population(scenario: Scenario, rate: float | None, n_req: int) -> float | None:
    """Clients a closed loop (its concurrency) or an offline backlog (all requests) keeps in
    flight, at most the run's requests; None for an open loop, which has an offered rate."""
    if rate is not None:
        return None
    a = scenario.workload.arrival
    population = float(a.concurrency if isinstance(a, ClosedLoopArrival) else n_req)
    return min(population, float(n_req))


def load_sides(sides_in: list[SideIn], engine: Engine, stream: RequestStream,
               rate: float | None, population: float | None, cap_total: float, cv2: float,
               offset_s: float) -> Loaded:
    """The steady state of every side: a closed loop on one pool solves its population, a
    closed loop over pools finds its cycle's rate, an open loop takes its offered `rate`."""
    if population is not None and len(sides_in) == 1:
        unit, traffic, count = sides_in[0]
        active = max(1.0, min(float(count), population))  # fewer in flight than units
        op, seat_wait = solve_population(unit, traffic, population / active, offset_s)
        top, why = capacity(unit, traffic)
        side = Side(unit, count, op, why, top.rate_per_s, True, seat_wait)
        return Loaded((side,), op.rate_per_s * active, population)
    closed = rate is None

    def at(r: float) -> list[Side]:
        return pool_sides(sides_in, stream, closed, r)

    if not closed:
        assert rate is not None
        return Loaded(tuple(at(rate)), rate, population)
    assert population is not None
    rate, excess_s = _drive_pools(at, sides_in, engine, cv2, cap_total, population, offset_s)
    return Loaded(tuple(at(rate)), rate, population, excess_s, (POOLS_NOTE,))


def pool_sides(sides_in: list[SideIn], stream: RequestStream, closed: bool,
               r: float) -> list[Side]:
    """Each side's steady state when the deployment serves `r` requests/s: a prefill pool
    runs its prompts alone, a decode (or mixed) pool as an open side over the run's span."""
    n_req = len(stream)
    out: list[Side] = []
    for unit, traffic, count in sides_in:
        if unit.prefills_only:
            per = r / count
            alone = Operating(0.0, per, 0.0, 0.0, capacity(unit, traffic)[0].prefill_s, 0.0)
            cap_u = prefill_capacity_per_s(unit, traffic)
            out.append(Side(unit, count, alone, "prefill", cap_u, per < cap_u))
        else:
            # A closed loop's requests are sent over n / rate seconds.
            span = (n_req / max(r, 1e-12) if closed else
                    float(stream.arrival_s[-1] - stream.arrival_s[0]) if n_req > 1
                    else 0.0)
            out.append(open_side(unit, traffic, count, r, n_req / count, span))
    return out


def _drive_pools(pool_sides: Callable[[float], list[Side]],
                 sides_in: list[SideIn], engine: Engine, cv2: float,
                 cap_total: float, population: float, offset_s: float) -> tuple[float, float]:
    """(rate, excess wait) of `population` clients cycling through a prefill pool, the KV
    transfer and a decode pool: the rate at which rate x cycle time = population (Little's
    law), by bisection; past the tighter pool's capacity the rate stays there and the clients
    left over wait population / rate - cycle in the prefill queue."""
    link = engine.kv_link
    assert link is not None

    def cycle_s(r: float) -> float:
        total = offset_s
        sides = pool_sides(r)
        for side, (unit, traffic, count) in zip(sides, sides_in, strict=True):
            if unit.prefills_only:
                total += pool_prefill_wait_s(side, traffic, cv2, r / count, population)[0]
                total += side.op.prefill_s
                total += link.exposed_s(round(traffic.input_mean), side.op.prefill_s)
            else:
                total += decode_steps(traffic, unit) * side.op.step_s
        return total

    top = cap_total * 0.999
    if top <= 0:
        return 0.0, 0.0
    cycle_top = cycle_s(top)
    if top * cycle_top <= population:
        return top, max(0.0, population / top - cycle_top)
    lo, hi = 0.0, top
    for _ in range(50):
        mid = (lo + hi) / 2
        if mid * cycle_s(mid) < population:
            lo = mid
        else:
            hi = mid
    return lo, 0.0
