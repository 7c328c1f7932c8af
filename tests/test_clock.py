"""The simulation's clock (serving/clock.py) ends step timeouts at the exact instant the
step-by-step sums give, on SimPy's public API: where `now + delay` can land there it does,
and where no float delay can (round-half-even), the instant is carried and read back."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from simulator.serving.clock import Clock, delay_to

# `now` in a lower binade than `when`, with its bits placed so that every now + d rounds to an
# even multiple of when's last place, and `when` is an odd one: no float delay lands on it.
NOW, WHEN = 0.2909037761458523, 1.7626903632435094


def test_the_unreachable_pair_is_unreachable() -> None:
    d = WHEN - NOW
    for _ in range(64):
        d = math.nextafter(d, -math.inf)
    for _ in range(128):
        assert NOW + d != WHEN
        d = math.nextafter(d, math.inf)


@given(st.floats(0.0, 1e6), st.floats(0.0, 1e6))
def test_delay_to_lands_on_when_or_just_below(now: float, step: float) -> None:
    when = now + step  # a sum: what a run of steps reaches
    d = delay_to(now, when, when - now)
    assert d >= 0
    assert now + d == when or now + d == math.nextafter(when, -math.inf)


def _run(env: Clock, gen: Any) -> None:
    env.process(gen)
    env.run()


def test_a_reachable_instant_is_hit_exactly() -> None:
    env, seen = Clock(), []

    def proc() -> Any:
        yield env.timeout(0.25)
        end = yield env.timeout_at(0.4)
        seen.append((end, env.now, env.instant))

    _run(env, proc())
    assert seen == [(0.4, 0.4, 0.4)]


def test_an_unreachable_instant_is_carried_and_steps_go_on_from_it() -> None:
    env, seen = Clock(), []

    def proc() -> Any:
        yield env.timeout(NOW)
        assert env.now == NOW
        end = yield env.timeout_at(WHEN)
        seen.append((end, env.now, env.instant))
        end = yield env.sleep(0.125)  # counted from the carried instant, not from now
        seen.append((end, env.now, env.instant))

    _run(env, proc())
    below = math.nextafter(WHEN, -math.inf)
    assert seen[0] == (WHEN, below, WHEN)
    assert seen[1] == (WHEN + 0.125, WHEN + 0.125, WHEN + 0.125)


def test_the_carried_instant_is_forgotten_once_the_clock_moves() -> None:
    env, seen = Clock(), []

    def proc() -> Any:
        yield env.timeout(NOW)
        yield env.timeout_at(WHEN)
        yield env.timeout(0.5)
        seen.append((env.now, env.instant))

    _run(env, proc())
    t = math.nextafter(WHEN, -math.inf) + 0.5
    assert seen == [(t, t)]


def test_sleep_orders_as_a_timeout_does() -> None:
    """Equal times run in the order scheduled, sleeps and timeouts alike."""
    env, order = Clock(), []
    env.timeout(1.0).callbacks.append(lambda _e: order.append("timeout"))
    env.sleep(1.0).callbacks.append(lambda _e: order.append("sleep"))
    env.timeout_at(1.0).callbacks.append(lambda _e: order.append("at"))
    env.run()
    assert order == ["timeout", "sleep", "at"]
