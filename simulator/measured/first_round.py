"""The benchmark's first measured round: a burst of every client into an idle engine.

aiperf (the calibration file's harness; 0.3.0 read at source) waits its warm-up out, then
starts the profiling phase with all C clients sending at once, and `vllm bench serve
--max-concurrency C` starts the same way without a warm-up. So the first C measured requests
of a closed loop meet an empty engine together and queue for their prefills (C prompts at the
engine's prefill rate), while the later rounds are the state the reproduction at random
phases settles into (docs/closed-loops.md: the measured engines show no lockstep after it).
Reproducing the whole run at random phases leaves that queue out: in a run of 20 rounds it is a
twentieth of the requests, but its TTFT is up to C / 2 prefill steps long.

The burst is simulated as a run of its own (C requests, clients started together, the same
engine), and its requests stand in for the first measured round; TPOT stays the whole run's
(a burst's outputs are cut short below, and its decodes are a twentieth of the run's).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

# The burst's requests decode only until every prompt of it has its first token: outputs are
# first cut to this many tokens, and doubled while a request finishes before the burst's last
# first token (its leaving would lighten the steps the later prompts wait through), up to the
# whole output.
BURST_FIRST_OUTPUT = 16


def burst_clients(scenario: dict[str, Any], warmup: int) -> int | None:
    """C, where the run's first measured round is a burst of C clients into an idle engine: a
    closed loop reproduced at random phases (measured/workload_map.py CLIENT_START) whose warm-up
    is none or whole rounds, with at least two measured rounds; None otherwise."""
    wl = scenario.get("workload") or {}
    arrival = wl.get("arrival") or {}
    clients, n = arrival.get("concurrency"), wl.get("num_requests")
    if (arrival.get("kind") != "closed_loop" or arrival.get("start") != "random_phase"
            or not isinstance(clients, int) or not isinstance(n, int) or clients < 2
            or warmup % clients or n - warmup < 2 * clients):
        return None
    return clients


def _burst_scenario(scenario: dict[str, Any], clients: int, output_tokens: int | None
                    ) -> dict[str, Any]:
    s = copy.deepcopy(scenario)
    wl = s["workload"]
    wl["arrival"]["start"] = "together"
    wl["num_requests"] = clients
    out = wl.get("output_tokens") or {}
    if output_tokens is not None and out.get("kind") == "fixed":
        out["value"] = min(int(out["value"]), output_tokens)
    return s


def burst_ttft_s(scenario: dict[str, Any], clients: int, profiles: Any = None,
                 load: Callable[[dict[str, Any]], Any] | None = None
                 ) -> npt.NDArray[np.float64]:
    """Client-side TTFT of each of `clients` requests sent together into the idle engine
    (`load` builds the engine from a scenario: simulator.load_scenario unless given)."""
    import simulator
    from simulator.metrics.summary import client_ttft_s

    build = load or simulator.load_scenario
    full = int((scenario["workload"].get("output_tokens") or {}).get("value") or 0)
    cap = BURST_FIRST_OUTPUT
    while True:
        loaded = build(_burst_scenario(scenario, clients, cap))
        recs = simulator.simulate(loaded, profiles=profiles).requests
        done = recs[(recs["drop_reason"] == 0) & np.isfinite(recs["finish_s"])]
        if (cap >= full or done.size == 0
                or done["finish_s"].min() >= done["first_token_s"].max()):
            break
        cap *= 2
    front_end = loaded.engine.style.front_end if loaded.engine is not None else None
    ttft: npt.NDArray[np.float64] = client_ttft_s(done, front_end)
    return ttft


def with_first_round(later_ttft_s: npt.NDArray[np.float64], burst_s: npt.NDArray[np.float64],
                     rounds: float = 1.0) -> float:
    """Mean TTFT of the measured requests: the burst's for the first `rounds` rounds (the
    engine style's closed_loop_burst_rounds: the train of arrivals the burst leaves persists
    that long; at most every round), the later rounds' mean for the rest."""
    n = later_ttft_s.size + burst_s.size
    if rounds == 1.0:  # every request once (the sum kept as it is summed, to the bit)
        return float((later_ttft_s.sum() + burst_s.sum()) / n)
    weight = min(float(rounds), n / burst_s.size) if burst_s.size else 0.0
    later_mean = float(later_ttft_s.mean()) if later_ttft_s.size else 0.0
    return float((weight * burst_s.sum() + (n - weight * burst_s.size) * later_mean) / n)
