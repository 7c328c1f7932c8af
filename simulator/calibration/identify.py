"""Which declared parameters the observations can pin down, read off the Jacobian of the log
errors at the priors: a parameter that moves no prediction, or that moves them only as a
combination with others (a product a*b, two fixed costs always summed), is left at its prior
and named, since any value the optimiser gave it would be arbitrary."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from simulator.calibration.params import FloatArray

# Step in the optimiser's variable for the identifiability Jacobian: 0.1 % of a log-scale
# value, large enough to move a simulated prediction above its rounding, small for a slope.
JACOBIAN_STEP = 1e-3
# RMS of d log(prediction) / dx below which a parameter "moves no prediction": a 1 % change of
# the value then moves predictions by < 1e-8 relative, far below any measurement's noise.
SENSITIVITY_FLOOR = 1e-6
# Smallest singular value over the largest, columns scaled to unit length, below which the
# columns are taken as collinear: two columns correlated above 0.999998 fall under it.
MIN_SINGULAR_RATIO = 1e-3
# A parameter takes part in a collinear combination when its share of the null direction is
# at least this fraction of the largest share.
NULL_SHARE = 0.1

BoolMatrix = npt.NDArray[np.bool_]


def central_jacobian(residual: Callable[[FloatArray], FloatArray], x0: FloatArray,
                     bounds: tuple[FloatArray, FloatArray],
                     step: float = JACOBIAN_STEP) -> FloatArray:
    """d residual / dx by central differences, each step kept inside the bounds (a prior on a
    bound gets a one-sided difference over the step actually taken)."""
    lower, upper = bounds
    columns = []
    for j in range(len(x0)):
        hi, lo = x0.copy(), x0.copy()
        hi[j] = min(x0[j] + step, upper[j])
        lo[j] = max(x0[j] - step, lower[j])
        columns.append((residual(hi) - residual(lo)) / (hi[j] - lo[j]))
    return np.column_stack(columns) if columns else np.zeros((0, 0))


@dataclass(frozen=True)
class Identifiability:
    """Per parameter (in declaration order): identified or why not, its RMS sensitivity, the
    rows it moves, and the condition (largest / smallest singular value) of those kept."""

    identified: tuple[bool, ...]
    reasons: tuple[str | None, ...]
    sensitivity: FloatArray = field(repr=False, compare=False)
    moved_rows: BoolMatrix = field(repr=False, compare=False)
    condition: float


def _singular(jac: FloatArray, keep: list[int]) -> tuple[float, FloatArray]:
    """Smallest over largest singular value of the unit-scaled columns `keep`, and the right
    singular vector of the smallest (the direction that moves nothing)."""
    cols = jac[:, keep]
    cols = cols / np.linalg.norm(cols, axis=0)
    _, s, vt = np.linalg.svd(cols, full_matrices=False)
    return float(s[-1] / s[0]), vt[-1]


def identify(jac: FloatArray, names: Sequence[str]) -> Identifiability:
    """Flag columns that are ~0, then peel collinear combinations off one parameter at a time:
    of a combination, the parameter declared last is left at its prior (declaration order is
    the caller's priority), the others stay free and absorb the combination."""
    n_rows = max(jac.shape[0], 1)
    sensitivity = np.sqrt(np.sum(jac**2, axis=0) / n_rows)
    moved = np.abs(jac) > SENSITIVITY_FLOOR
    reasons: list[str | None] = [None] * len(names)
    for j, s in enumerate(sensitivity):
        if not s >= SENSITIVITY_FLOOR:  # also NaN
            reasons[j] = (f"moves no prediction (RMS sensitivity of log(prediction) {s:.1e} "
                          f"< {SENSITIVITY_FLOOR:.0e}); left at its prior")
    keep = [j for j in range(len(names)) if reasons[j] is None]
    ratio = 1.0
    while len(keep) > 1:
        ratio, null = _singular(jac, keep)
        if ratio >= MIN_SINGULAR_RATIO:
            break
        share = np.abs(null)
        members = [keep[i] for i in range(len(keep)) if share[i] >= NULL_SHARE * share.max()]
        drop = max(members)
        partners = ", ".join(names[m] for m in members if m != drop)
        reasons[drop] = (f"collinear with {partners}: only their combination moves the "
                         f"predictions (singular value ratio {ratio:.1e} < "
                         f"{MIN_SINGULAR_RATIO:.0e}); left at its prior")
        keep.remove(drop)
    if len(keep) > 1:
        ratio, _ = _singular(jac, keep)
    return Identifiability(
        identified=tuple(r is None for r in reasons),
        reasons=tuple(reasons),
        sensitivity=sensitivity,
        moved_rows=moved,
        condition=1.0 / ratio if ratio > 0 else float("inf"),
    )


def identify_stacked(jac_prior: FloatArray, jac_probe: FloatArray,
                     names: Sequence[str]) -> Identifiability:
    """`identify` over two points at once (the prior and a probe above it): a parameter is
    identified if it moves predictions at either and is not collinear over both; its moved
    rows are those it moves at either point."""
    both = identify(np.vstack([jac_prior, jac_probe]), names)
    n = jac_prior.shape[0]
    moved = both.moved_rows[:n] | both.moved_rows[n:]
    return Identifiability(identified=both.identified, reasons=both.reasons,
                           sensitivity=both.sensitivity, moved_rows=moved,
                           condition=both.condition)
