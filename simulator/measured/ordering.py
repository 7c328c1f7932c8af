"""Whether the simulator orders configurations as the measurements do: within each group of
runs of one model, GPU, engine, mode and lengths, the share of pairs of different
configurations whose predicted TTFT (and TPOT) rank as the measured ones. A planner choosing
between configs needs the order right even where the absolute figures are off.

Pairs the simulator predicts identically (the same configuration measured twice) are not
configuration pairs and are left out; pairs measured within `NEAR_TIE` of each other are
counted, and also reported apart, since their measured order is within run-to-run noise.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import combinations
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulator.measured.run import MeasuredRun

METRICS = ("ttft.mean", "tpot.mean")
NEAR_TIE = 0.05  # measured values this close (relative) order by noise as much as by cause
TARGET = 0.9  # issue 30: at least 90 % of a group's config pairs ordered as measured

Point = tuple[tuple[str, ...], dict[str, float], dict[str, float]]  # group, measured, predicted


def lengths_label(run: MeasuredRun) -> str:
    """The run's prompt and output lengths, e.g. '1024x8192'."""
    return f"{run.load.input_tokens:g}x{run.load.output_tokens:g}"


def order_group(run: MeasuredRun, group: tuple[str, str, str]) -> tuple[str, ...]:
    """The group a run's configuration is ranked within: model, (GPU, engine, mode), lengths."""
    return (str(run.model), *group, lengths_label(run))


def points_of(records: Iterable[dict[str, Any]]) -> list[Point]:
    """(group, measured, predicted) of each scored record (measured/predict.py `score`, whose
    `lengths` is lengths_label's)."""
    out: list[Point] = []
    for r in records:
        if r["status"] != "scored":
            continue
        group = (str(r["model"]), r["gpu"], r["engine"], r["mode"], r["lengths"])
        out.append((group, r["measured"], r["predicted"]))
    return out


def pair_ordering(points: Sequence[Point]) -> dict[str, dict[str, float]]:
    """Per metric: groups with a pair, configuration pairs, the share ordered as measured,
    and the same over pairs measured more than NEAR_TIE apart."""
    groups: dict[tuple[str, ...], list[Point]] = {}
    for p in points:
        groups.setdefault(p[0], []).append(p)
    out: dict[str, dict[str, float]] = {}
    for metric in METRICS:
        pairs = ordered = apart = ordered_apart = used = at_target = 0
        for members in groups.values():
            got = [(m[metric], q[metric]) for _, m, q in members if metric in m and metric in q]
            n0, k0 = pairs, ordered
            for (m1, p1), (m2, p2) in combinations(got, 2):
                if p1 == p2 or m1 == m2:
                    continue  # one configuration twice, or no measured order
                right = (m1 < m2) == (p1 < p2)
                pairs += 1
                ordered += right
                if abs(m1 / m2 - 1.0) > NEAR_TIE:
                    apart += 1
                    ordered_apart += right
            used += pairs > n0
            at_target += pairs > n0 and (ordered - k0) >= TARGET * (pairs - n0)
        out[metric] = {
            "groups": used, "groups_at_target": at_target,
            "pairs": pairs, "ordered": ordered / pairs if pairs else 0.0,
            "pairs_apart": apart,
            "ordered_apart": ordered_apart / apart if apart else 0.0,
        }
    return out


def ordering_lines(ordering: dict[str, dict[str, float]]) -> list[str]:
    """One line per metric, for the text report."""
    return [
        f"config pairs ordered as measured, {metric}: {o['ordered']:.1%} of {o['pairs']:,} "
        f"pairs in {o['groups']} groups, {o['groups_at_target']} of them at {TARGET:.0%} or "
        f"more ({o['ordered_apart']:.1%} of the {o['pairs_apart']:,} measured more than "
        f"{NEAR_TIE:.0%} apart)"
        for metric, o in ordering.items() if o["pairs"]
    ]
