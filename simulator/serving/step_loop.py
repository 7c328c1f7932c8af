"""The one step loop every engine replica runs: plan a step, cost it, let its time pass, commit
it at its end, then take a run of decode steps at once when one can start.

What differs between kinds of replica (one scheduler; attention-DP ranks stepping in lockstep;
a pipeline's micro-batch slot passing through the stages) is a `StepPolicy`, so the kinds
share this loop and the order of what it does, and differ only where they differ.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Protocol, TypeVar

import simpy

Process = Generator[simpy.Event, Any, None]
P = TypeVar("P")


class StepPolicy(Protocol[P]):
    """How one kind of replica plans, costs, spends and commits a step (P: what it plans)."""

    def plan(self) -> P | None:
        """Take in what may join now, then plan the next step; None: nothing can run."""

    def idle(self) -> Process:
        """Nothing could be planned: poll what is held, or wait until work arrives."""

    def cost(self, planned: P) -> float:
        """The step's time (adding its GPU time to the totals kept), checked when asked."""

    def spend(self, planned: P, dt: float) -> Generator[simpy.Event, Any, tuple[float, float]]:
        """Let the step's time pass; the instant it ended and the time it took."""

    def commit(self, planned: P, end_s: float, dt: float) -> None:
        """Apply the step's results at its end, and log its gaps and time-series row."""

    def after(self, end_s: float, dt: float) -> Process | None:
        """A run of decode steps to take at once after this step, when one can start."""


def run_steps(policy: StepPolicy[P]) -> Process:
    """A replica's (or a pipeline slot's) SimPy process: step after step, for ever."""
    plan, cost, spend, commit, after = (
        policy.plan, policy.cost, policy.spend, policy.commit, policy.after
    )
    while True:
        planned = plan()
        if planned is None:
            yield from policy.idle()
            continue
        end_s, dt = yield from spend(planned, cost(planned))
        commit(planned, end_s, dt)
        run = after(end_s, dt)
        if run is not None:
            yield from run
