"""The simulation's clock: SimPy's environment, used through its public API only, with
timeouts that end at an exact instant."""

from __future__ import annotations

import math

import simpy

NEIGHBOURS = 4  # float delays tried on each side of `when - now` for one that lands on `when`


class Clock(simpy.Environment):
    """A SimPy environment whose step timeouts end at an exact instant.

    A run of steps ends at the clock summed step by step (`when`), which `now + delay` cannot
    always reach in one float addition: when `when` lies in a higher binade than `now`,
    round-half-even can skip every other float. `timeout_at` picks a delay that lands on `when`
    where one exists (`when - now` or a float neighbour of it); where none does, the timeout
    fires at the float just below and carries `when` as its value, and `instant` reads `when`
    until the clock moves on, so the replica's step end and what it plans next are the
    instant the step-by-step sums give.
    """

    def __init__(self, initial_time: float = 0) -> None:
        super().__init__(initial_time)
        # When a timeout that could not land on its instant fired (NaN: none yet), and that
        # instant.
        self._carried_at = math.nan
        self._carried_to = math.nan

    @property
    def instant(self) -> float:
        """The exact current time: `now`, or the instant the timeout firing now carries when
        it could only fire a float away from it."""
        now: float = self.now
        return self._carried_to if now == self._carried_at else now

    def sleep(self, delay: float) -> simpy.Timeout:
        """`timeout(delay)` counted from the exact instant; its value the instant it ends at."""
        now: float = self.now
        if now == self._carried_at:
            return self.timeout_at(self._carried_to + delay)
        return self.timeout(delay, now + delay)

    def timeout_at(self, when: float) -> simpy.Timeout:
        """A timeout that ends at the instant `when` (not before now); its value is `when`."""
        now: float = self.now
        delay = when - now
        if now + delay == when:
            return self.timeout(delay, when)
        delay = delay_to(now, when, delay)
        event = self.timeout(delay, when)
        if now + delay != when:
            event.callbacks.append(lambda _event: self._carry(when))
        return event

    def _carry(self, when: float) -> None:
        """A timeout fired a float away from its instant: remember the instant for `instant`."""
        self._carried_at, self._carried_to = self.now, when


def delay_to(now: float, when: float, guess: float) -> float:
    """A delay d >= 0 with `now + d == when`, searched among `guess` and its float neighbours;
    where none lands there (round-half-even skips `when`), the one landing closest below it:
    the event then fires before anything due after `when`, and delays counted from `when`
    stay positive."""
    candidates = [guess]
    up = down = guess
    for _ in range(NEIGHBOURS):
        up, down = math.nextafter(up, math.inf), math.nextafter(down, -math.inf)
        candidates += (up, down)
    best, best_t = 0.0, now
    for d in candidates:
        if d < 0:
            continue
        t = now + d
        if t == when:
            return d
        if best_t <= t < when:
            best, best_t = d, t
    return best
