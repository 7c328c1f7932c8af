"""Config ranking within a model and GPU: does the simulator order published configs as measured?

Issue 15 asks that the config ranking within a model and GPU still match the measurements, as
a planner picks the best config by its order, not its absolute figure. Rows are grouped by
model, GPU, metric and workload shape (input and output lengths); every pair of rows in a group
is a pair of configs (tensor parallelism, format, engine, concurrency) and is concordant when
the predicted order is the measured order.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Point:
    """One scored config: its group (model, GPU, metric, shape), row id, measured, predicted."""

    group: str
    id: str
    measured: float
    predicted: float


@dataclass(frozen=True, slots=True)
class RankedPair:
    """Two configs of one group, `high` the one measured higher; the gaps are high / low - 1."""

    group: str
    high: str
    low: str
    measured_gap: float
    predicted_gap: float

    @property
    def concordant(self) -> bool:
        return self.predicted_gap > 0


def resolvable_gap(error: float) -> float:
    """The smallest measured gap that predictions each within +-error must order right: the
    worst case puts the higher config error low and the lower error high, (1+e)/(1-e) - 1."""
    return (1 + error) / (1 - error) - 1


def ranked_pairs(points: Iterable[Point]) -> list[RankedPair]:
    """Every pair of configs within a group whose measured values differ, oriented high first."""
    by_group: dict[str, list[Point]] = {}
    for p in points:
        by_group.setdefault(p.group, []).append(p)
    out = []
    for group, members in sorted(by_group.items()):
        for a, b in itertools.combinations(sorted(members, key=lambda p: p.id), 2):
            if a.measured == b.measured:
                continue  # a measured tie has no order to match
            hi, lo = (a, b) if a.measured > b.measured else (b, a)
            out.append(
                RankedPair(
                    group,
                    hi.id,
                    lo.id,
                    hi.measured / lo.measured - 1,
                    hi.predicted / lo.predicted - 1,
                )
            )
    return out


def ranking_markdown(pairs: list[RankedPair], error: float) -> list[str]:
    """REPORT.md section: pairs and discordant pairs per group, then each discordant pair."""
    gap = resolvable_gap(error)
    groups: dict[str, list[RankedPair]] = {}
    for p in pairs:
        groups.setdefault(p.group, []).append(p)
    bad = [p for p in pairs if not p.concordant]
    lines = [
        "## Config ranking within a model and GPU",
        "",
        "Rows of one model, GPU, metric and workload shape are configs of one choice (tensor "
        "parallelism, format, engine, concurrency); a pair is concordant when the predicted "
        f"order is the measured one. {len(pairs) - len(bad)} of {len(pairs)} pairs in "
        f"{len(groups)} groups are concordant. Predictions each within the {error:.0%} target "
        f"can only be relied on to order configs measured more than {gap:.1%} apart.",
        "",
        "| group | pairs | discordant |",
        "|---|---:|---:|",
    ]
    for g, ps in groups.items():
        lines.append(f"| {g} | {len(ps)} | {sum(not p.concordant for p in ps)} |")
    if bad:
        lines += ["", "Discordant pairs (measured gap, predicted gap):", ""]
        lines += [
            f"- {p.high} over {p.low}: measured {p.measured_gap:+.1%}, predicted "
            f"{p.predicted_gap:+.1%}"
            for p in bad
        ]
    return [*lines, ""]
