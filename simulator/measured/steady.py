"""A closed loop of identical requests reaches its steady state in a few rounds, long before its
end: simulate the first rounds only, and carry the steady rounds over to the whole run.

A run of R rounds (round i: requests i*C .. (i+1)*C - 1 in issue order, C clients; round 0 the
benchmark's warm-up) is first simulated for K = 6 rounds as a run of its own: warm-up, the first
measured round (it meets the engine the warm-up left), middle rounds, and a last round whose
clients stop one by one (the drain). When the last two middle rounds' mean TTFT and TPOT agree
within STEADY_REL, the measured rounds 1 .. R-1 are, by their means:

    the simulated rounds 1 .. K-2,  R-K more copies of the last middle round,  the drain round

(each round C requests, so the whole run's mean is their plain mean). Steady means: the last
three middle rounds' means stay within STEADY_REL of their mean, and the drift between the last
two, carried over the R-K rounds not simulated, would move the whole run's mean by less than
STEADY_REL too; otherwise K doubles while it leaves at least K rounds unsimulated, and past
that the whole run is simulated. Only means are carried over: a
percentile needs the whole run, so runs whose files score one are simulated whole."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

MIN_ROUNDS = 6  # warm-up, first measured round, three middle rounds, the drain
# Tolerance on the middle rounds' spread and the projected drift: a tenth of the 2 % by which
# means are reported (chosen so the carried-over means stay within 1 % of the whole run's:
# 0.68 % at most on the 400-run sample of accuracy.yaml, docs/speed.md).
STEADY_REL = 0.002
METRICS = (("ttft.mean", "ttft_s"), ("tpot.mean", "tpot_s"))


@dataclass(frozen=True)
class Loop:
    clients: int  # C
    rounds: int  # R, the warm-up round included


def closed_loop(scenario: dict[str, Any], warmup: int, measured: set[str]) -> Loop | None:
    """The loop early stop may shorten: closed, its clients started together, fixed lengths,
    a warm-up of one round, whole rounds, at least 2 x MIN_ROUNDS of them, two output tokens or
    more (a TPOT), and only the means carried over (TTFT, TPOT) scored."""
    wl = scenario.get("workload") or {}
    arrival = wl.get("arrival") or {}
    if arrival.get("start") == "random_phase":
        # Clients at random phases settle later: two that collide in round 10 stay together
        # from then on, so six steady-looking rounds do not foretell the run. Carried over,
        # accuracy.yaml's sample moved up to 17 % from the whole runs' mean TTFT (p99 6 %;
        # every mean had been within 0.68 % with clients started together): run whole.
        return None
    fixed = all((wl.get(k) or {}).get("kind") == "fixed"
                for k in ("input_tokens", "output_tokens"))
    clients = arrival.get("concurrency")
    n = wl.get("num_requests")
    out_tokens = (wl.get("output_tokens") or {}).get("value")
    if (arrival.get("kind") != "closed_loop" or not fixed or not isinstance(clients, int)
            or not isinstance(n, int) or warmup != clients or n % clients
            or n // clients < 2 * MIN_ROUNDS or not measured
            or not isinstance(out_tokens, int) or out_tokens < 2  # one token: no TPOT
            or not set(measured) <= {name for name, _ in METRICS}):
        return None
    return Loop(clients, n // clients)


def round_means_ms(result: Any, front_end: Any, clients: int) -> list[tuple[float, float]]:
    """(mean TTFT, mean TPOT) in ms of each round of a simulated run, as summarize computes them
    over that round's requests (client-side TTFT)."""
    from simulator.metrics.summary import summarize

    empty = np.empty(0)
    recs = result.requests
    out = []
    for i in range(len(recs) // clients):
        s = summarize(recs[i * clients:(i + 1) * clients], empty, empty,
                      result.summary["num_gpus"], None, front_end)
        out.append(tuple(float(s[key]["mean"]) * 1e3 for _, key in METRICS))
    return out  # type: ignore[return-value]


def carried_over_ms(means: list[tuple[float, float]], rounds: int) -> dict[str, float] | None:
    """The whole run's measured means from a shortened run's rounds (module docstring); None
    when its middle rounds are not yet steady."""
    k = len(means)
    if k < 5:
        return None
    last = means[-4:-1]  # the last three middle rounds
    carried = rounds - k
    for i in range(len(METRICS)):
        values = [m[i] for m in last]
        centre = sum(values) / len(values)
        if not centre:
            continue
        spread = max(abs(v / centre - 1) for v in values)
        drift = abs(values[-1] - values[-2]) / centre * carried / 2  # linear, half on average
        if spread > STEADY_REL or drift > STEADY_REL:
            return None
    b = means[-2]
    measured = [*means[1:-1], *([b] * carried), means[-1]]
    assert len(measured) == rounds - 1
    return {name: sum(m[i] for m in measured) / len(measured)
            for i, (name, _) in enumerate(METRICS)}


def steady_means_ms(scenario: dict[str, Any], loop: Loop, simulate_rounds: Any
                 ) -> tuple[dict[str, float], int] | None:
    """The whole run's means from the fewest rounds that reach a steady state, and the rounds
    simulated; None when only the whole run does. `simulate_rounds(scenario)` simulates a
    shortened scenario and returns its round means."""
    k = MIN_ROUNDS
    while 2 * k <= loop.rounds:
        short = copy.deepcopy(scenario)
        short["workload"]["num_requests"] = k * loop.clients
        got = carried_over_ms(simulate_rounds(short), loop.rounds)
        if got is not None:
            return got, k
        k *= 2
    return None
