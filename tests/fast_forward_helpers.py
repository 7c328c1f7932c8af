"""The check shared by the plain and the attention-DP decode-run tests: a scenario simulated
with its runs of decode steps fast-forwarded gives bit for bit what `--check` gives, where
every step is its own event."""

from __future__ import annotations

from typing import Any

import pytest

import simulator
from simulator.serving.scheduler import Scheduler


def assert_runs_match_stepwise(
    sc: Any, monkeypatch: pytest.MonkeyPatch, min_steps: int
) -> tuple[Any, Any]:
    """Simulate `sc` both ways; the fast run must fast-forward more than `min_steps` steps (so
    the runs did happen), the stepwise one none, and results and records must be equal.
    Returns both results (fast, stepwise) for further checks."""
    runs: list[int] = []
    forward = Scheduler.fast_forward

    def counted(self: Scheduler, steps: int, blocks: int) -> None:
        runs.append(steps)
        forward(self, steps, blocks)

    monkeypatch.setattr(Scheduler, "fast_forward", counted)
    fast = simulator.simulate(sc)
    assert sum(runs) > min_steps, sum(runs)
    runs.clear()
    stepwise = simulator.simulate(sc, check=True)
    assert not runs
    assert fast.to_dict() == stepwise.to_dict()
    for name in fast.requests.dtype.names or ():
        assert fast.requests[name].tobytes() == stepwise.requests[name].tobytes(), name
    return fast, stepwise
