"""Human-readable formatting of SI quantities for tables (never used in computation)."""

from __future__ import annotations

import math


def si(value: float, unit: str = "", digits: int = 3) -> str:
    """1.23e12 -> '1.23 T' + unit."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g} {unit}".strip()
    prefixes = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")]
    for scale, p in prefixes:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {p}{unit}".strip()
    return f"{value:.{digits}g} {unit}".strip()


def duration(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Plain aligned text table: first column left, the rest right-aligned."""
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]

    def line(cells: list[str]) -> str:
        out = [cells[0].ljust(widths[0])]
        out += [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join(out).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])
