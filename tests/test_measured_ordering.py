"""Config pairs ordered as measured (measured/ordering.py): hand-counted pairs, the same
configuration measured twice left out, near ties reported apart, and the validate report line."""

from __future__ import annotations

import pytest

from simulator.measured.ordering import ordering_lines, pair_ordering

G = ("m", "b200", "vllm", "aggregated", "1024x1024")


def _p(group: tuple[str, ...], measured: float, predicted: float) -> tuple:
    return (group, {"tpot.mean": measured}, {"tpot.mean": predicted})


def test_pairs_counted_by_hand() -> None:
    """Measured 10 / 20 / 30 ms, predicted 1 / 3 / 2: (10, 20) and (10, 30) keep their order,
    (20, 30) flips: 2 of 3. A fourth run predicted exactly like the first (one configuration
    measured twice) forms no configuration pair with it, but pairs with the other two (10.2
    against 20 and 30: both ordered), so 4 of 5 with the near tie (10 vs 10.2, 2 % apart)
    never counted. Another group's single run adds no pair."""
    pts = [_p(G, 10, 1), _p(G, 20, 3), _p(G, 30, 2), _p(G, 10.2, 1),
           _p((*G[:4], "8192x1024"), 50, 5)]
    o = pair_ordering(pts)["tpot.mean"]
    assert o["pairs"] == 5 and o["ordered"] == pytest.approx(4 / 5)
    assert o["groups"] == 1 and o["groups_at_target"] == 0  # 80 % < 90 %
    assert o["pairs_apart"] == 5  # every counted pair is more than 5 % apart
    assert pair_ordering(pts)["ttft.mean"]["pairs"] == 0


def test_near_ties_are_reported_apart() -> None:
    # 10 vs 10.3 measured (3 % apart) predicted in the wrong order: counted, not "apart".
    o = pair_ordering([_p(G, 10, 2), _p(G, 10.3, 1)])["tpot.mean"]
    assert (o["pairs"], o["ordered"], o["pairs_apart"]) == (1, 0.0, 0)
    [line] = ordering_lines({"tpot.mean": o})
    assert line.startswith("config pairs ordered as measured, tpot.mean: 0.0% of 1 pairs")
