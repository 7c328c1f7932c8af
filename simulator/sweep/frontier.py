"""The Pareto frontier of a sweep: the points no other point beats on both axes.

Default axes: y = output tokens/s per GPU (maximize) against x = output tokens/s
per user at the median (maximize). A point is dominated when another is at least as good on
both axes and strictly better on one; identical points do not dominate each other, so ties
are all on the frontier. Dominated points stay in results.csv; frontier.csv holds the rest.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from simulator.errors import InputError
from simulator.sweep.table import Row, number


@dataclass(frozen=True)
class Axis:
    column: str  # a results.csv column, e.g. ttft_s.p99
    maximize: bool
    label: str

    @property
    def direction(self) -> str:
        return "higher is better" if self.maximize else "lower is better"


# Named axes; any other results.csv column works too (see `parse_axis`).
AXES: dict[str, Axis] = {
    "throughput_per_gpu": Axis("output_tokens_per_s_per_gpu", True, "output tok/s per GPU"),
    "speed_per_user": Axis("output_tokens_per_s_per_user.p50", True,
                           "output tok/s per user (p50)"),
    "ttft_p99": Axis("ttft_s.p99", False, "TTFT p99 (s)"),
    "tpot_p99": Axis("tpot_s.p99", False, "TPOT p99 (s)"),
    "cost": Axis("usd_per_million_output_tokens", False, "USD per million output tokens"),
    "energy": Axis("energy_j_per_output_token", False, "J per output token"),
    "requests_per_s": Axis("requests_per_s", True, "requests/s"),
}
DEFAULT_X = AXES["speed_per_user"]
DEFAULT_Y = AXES["throughput_per_gpu"]


def parse_axis(text: str) -> Axis:
    """'ttft_p99', 'ttft_s.p99', 'ttft_s.p99:min' or 'goodput_requests_per_s:max'.

    Without ':min'/':max' a named axis keeps its direction; a column whose name ends in `_s`
    (a time), or names a cost or an energy, is minimized; anything else is maximized.
    """
    name, _, direction = text.partition(":")
    if direction not in ("", "min", "max"):
        raise InputError(f"axis {text!r}: the direction after ':' must be min or max")
    axis = AXES.get(name)
    if axis is None:
        for a in AXES.values():
            if a.column == name:
                axis = a
        if axis is None:
            base = name.split(".")[0]
            minimize = base.endswith("_s") or "usd" in base or "energy" in base
            axis = Axis(name, not minimize, name)
    if direction:
        axis = Axis(axis.column, direction == "max", axis.label)
    return axis


def pareto_mask(xs: Sequence[float | None], ys: Sequence[float | None],
                maximize: tuple[bool, bool] = (True, True)) -> list[bool]:
    """True for each point on the frontier; points with a missing value are never on it.

    O(n log n): sort by x (best first) and keep each point whose y beats every point with a
    strictly better x and equals the best y among points with the same x.
    """
    sx = 1.0 if maximize[0] else -1.0
    sy = 1.0 if maximize[1] else -1.0
    items = [(sx * x, sy * y, i) for i, (x, y) in enumerate(zip(xs, ys, strict=True))
             if x is not None and y is not None]
    items.sort(key=lambda t: (-t[0], -t[1]))
    mask = [False] * len(xs)
    best_prev = float("-inf")  # best y among points with a strictly better x
    i = 0
    while i < len(items):
        j = i
        while j < len(items) and items[j][0] == items[i][0]:
            j += 1
        group_best = items[i][1]  # sorted by y descending within the same x
        for _, y, idx in items[i:j]:
            if y == group_best and y > best_prev:
                mask[idx] = True
        best_prev = max(best_prev, group_best)
        i = j
    return mask


SpeedPoint = tuple[float, float]  # (output tokens/s per user, output tokens/s per GPU)


def pareto_front(points: Sequence[SpeedPoint]) -> list[SpeedPoint]:
    """The frontier of (per-user speed, per-GPU throughput) points, both maximized, once each,
    by rising per-user speed (so by falling per-GPU throughput)."""
    mask = pareto_mask([x for x, _ in points], [y for _, y in points])
    return sorted({p for p, on in zip(points, mask, strict=True) if on})


def throughput_at_speed(points: Sequence[SpeedPoint], speed: float) -> float | None:
    """Per-GPU throughput of the frontier at a per-user speed target: the line between the
    two frontier points around it; the frontier's best throughput when every point is faster
    than the target (a faster point serves a slower target); None when no point reaches it."""
    front = pareto_front(points)
    if not front or speed > front[-1][0]:
        return None
    if speed <= front[0][0]:
        return front[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(front):
        if x0 <= speed <= x1:
            return y0 + (y1 - y0) * (speed - x0) / (x1 - x0)
    raise AssertionError("unreachable: speed lies inside the frontier's range")


def speed_at_throughput(points: Sequence[SpeedPoint], throughput: float) -> float | None:
    """Per-user speed of the frontier at a per-GPU throughput target (throughput_at_speed with
    the axes swapped): None when no point carries that much."""
    return throughput_at_speed([(y, x) for x, y in points], throughput)


def frontier_rows(rows: Sequence[Row], x: Axis = DEFAULT_X, y: Axis = DEFAULT_Y) -> list[Row]:
    """The rows on the frontier (successful points only), sorted by x from worst to best."""
    ok = [r for r in rows if r.get("point_status", "ok") == "ok"]
    mask = pareto_mask([number(r, x.column) for r in ok], [number(r, y.column) for r in ok],
                       (x.maximize, y.maximize))
    front = [r for r, on in zip(ok, mask, strict=True) if on]
    front.sort(key=lambda r: (number(r, x.column) or 0.0) * (1 if x.maximize else -1))
    return front


