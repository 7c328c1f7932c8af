"""Config ranking (simulator/validation/ranking.py): pairs within a group, their orientation,
ties, and the gap that predictions within a given error are sure to order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.validation.ranking import Point, ranked_pairs, ranking_markdown, resolvable_gap


def test_pairs_stay_within_a_group_and_point_high_first() -> None:
    # A measured 100, predicted 90; B measured 80, predicted 95: A over B by 100/80 - 1 = +25%,
    # predicted 90/95 - 1 = -5.3%, so discordant. C is another group: no pair with A or B.
    points = [
        Point("g", "B", 80.0, 95.0),
        Point("g", "A", 100.0, 90.0),
        Point("h", "C", 50.0, 50.0),
    ]
    (pair,) = ranked_pairs(points)
    assert (pair.high, pair.low) == ("A", "B")
    assert pair.measured_gap == pytest.approx(0.25)
    assert pair.predicted_gap == pytest.approx(90 / 95 - 1)
    assert not pair.concordant


def test_measured_ties_have_no_order() -> None:
    assert ranked_pairs([Point("g", "A", 10.0, 9.0), Point("g", "B", 10.0, 11.0)]) == []


def test_resolvable_gap_by_hand() -> None:
    # The higher config predicted 10% low, the lower 10% high: 1.1 / 0.9 - 1 = 22.2%.
    assert resolvable_gap(0.10) == pytest.approx(0.2222, abs=1e-4)


@given(
    low=st.floats(1.0, 1e4),
    gap=st.floats(0.0, 2.0),
    err_hi=st.floats(-0.1, 0.1),
    err_lo=st.floats(-0.1, 0.1),
)
def test_predictions_within_the_error_order_any_resolvable_pair(
    low: float, gap: float, err_hi: float, err_lo: float
) -> None:
    """Each prediction within +-10% of its measurement: every pair measured more than the
    resolvable gap apart comes out concordant."""
    high = low * (1 + resolvable_gap(0.10) + 1e-6 + gap)
    pts = [Point("g", "hi", high, high * (1 + err_hi)), Point("g", "lo", low, low * (1 + err_lo))]
    (pair,) = ranked_pairs(pts)
    assert pair.concordant


def test_markdown_lists_each_discordant_pair() -> None:
    pairs = ranked_pairs([Point("g", "A", 100.0, 90.0), Point("g", "B", 80.0, 95.0)])
    text = "\n".join(ranking_markdown(pairs, 0.10))
    assert "0 of 1 pairs in 1 groups are concordant" in text
    assert "- A over B: measured +25.0%, predicted -5.3%" in text
