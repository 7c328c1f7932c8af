"""Robust least squares of the declared parameters on the log error log(prediction / measured):
a soft-L1 loss, so a few runs the model cannot explain (a crash-looping engine, a throttled GPU)
pull the fit less than the bulk, and a log error so a TTFT of 20 ms and one of 2 s weigh alike.
The parameters the observations cannot pin down are left at their priors and named."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares

from simulator.calibration.identify import (
    JACOBIAN_STEP,
    SENSITIVITY_FLOOR,
    Identifiability,
    central_jacobian,
    identify,
    identify_stacked,
)
from simulator.calibration.params import (
    FloatArray,
    FreeParameter,
    IntArray,
    ObservationSet,
    Predictor,
    check_parameters,
    priors,
)

# Log error at which soft-L1 turns from squared to linear: 0.1 = a 10 % miss. Errors within it
# (the run-to-run noise of a serving benchmark) fit as least squares; beyond it, as absolute.
F_SCALE = 0.1
# Where a prior sits on a bound, the fit also starts this share of the span inside (_off_bounds).
BOUND_START_SHARE = 0.1
# Finite-difference step in the fitted variable (0.1 % of a log-scale value), for the optimiser's
# Jacobian and the identifiability check; a predictor with coarse steps (an event simulation
# that rounds to whole steps) may need a larger one, passed as fit(..., step=).
DIFF_STEP = JACOBIAN_STEP
# Log error charged for a prediction that is not a finite positive number (the predictor could
# not build that deployment at these values): e^10 off, so the fit steers away from it.
BAD_LOG_ERROR = 10.0
# Where a parameter moves nothing at its prior, the fit looks again with it 3x higher (ln 3 on
# the log scale) and starts a second descent from there, keeping the better end.
PROBE_STEP = math.log(3.0)
# Singular values of the fitted Jacobian at or below this fraction of the largest count as
# unseen directions (J'J's condition then passes 1e16, float64's resolution), and a
# parameter's squared share of such a direction below SHARE_FLOOR as none of it.
SINGULAR_FLOOR = 1e-8
# The optimiser stops when a step moves every fitted variable by less than X_TOLERANCE
# (relative: 1e-4 of a log-scale variable is a value 0.01 % off, far inside any standard
# error a serving benchmark supports) or the cost by less than F_TOLERANCE relative; scipy's
# 1e-8 defaults spend most of a fit's evaluations refining digits the data cannot carry.
X_TOLERANCE = 1e-4
F_TOLERANCE = 1e-6
SHARE_FLOOR = 1e-12


def log_errors(predict: Predictor, values: Mapping[str, float], observations: ObservationSet,
               indices: IntArray) -> FloatArray:
    """log(prediction / measured) at `indices`, BAD_LOG_ERROR where the prediction is unusable."""
    pred = np.asarray(predict(values, indices), dtype=np.float64)
    if pred.shape != indices.shape:
        raise ValueError(f"predictor returned shape {pred.shape} for {indices.shape} indices")
    good = np.isfinite(pred) & (pred > 0)
    safe = np.where(good, pred, 1.0)
    return np.where(good, np.log(safe / observations.measured[indices]), BAD_LOG_ERROR)


@dataclass(frozen=True)
class FittedParameter:
    """A parameter after the fit: its value (the prior when not identified, with the reason),
    standard error in value units (None when not identified or not estimable), RMS sensitivity
    of log(prediction) to its fitted variable at the prior, the rows it moves, and the median
    |log error| of those rows after the fit."""

    parameter: FreeParameter
    value: float
    identified: bool
    reason: str | None
    std_error: float | None
    sensitivity: float
    rows: int
    residual: float
    at_bound: bool

    @property
    def name(self) -> str:
        """The declared name."""
        return self.parameter.name

    @property
    def prior(self) -> float:
        """The declared prior."""
        return self.parameter.prior


@dataclass(frozen=True)
class FitResult:
    """The fit: parameters in declaration order, the rows fitted on, their log errors before
    (priors) and after, and the optimiser's account of itself."""

    parameters: tuple[FittedParameter, ...]
    indices: IntArray = field(repr=False, compare=False)
    log_error_before: FloatArray = field(repr=False, compare=False)
    log_error_after: FloatArray = field(repr=False, compare=False)
    moved_rows: np.ndarray = field(repr=False, compare=False)  # rows x parameters, bool
    condition: float
    evaluations: int
    converged: bool
    message: str

    def values(self) -> dict[str, float]:
        """Every parameter's value after the fit (priors for those not identified)."""
        return {p.name: p.value for p in self.parameters}

    def not_identified(self) -> tuple[FittedParameter, ...]:
        """The parameters left at their priors."""
        return tuple(p for p in self.parameters if not p.identified)

    @property
    def median_abs_log_error_before(self) -> float:
        """Median |log(prediction / measured)| at the priors."""
        return float(np.median(np.abs(self.log_error_before)))

    @property
    def median_abs_log_error_after(self) -> float:
        """Median |log(prediction / measured)| after the fit."""
        return float(np.median(np.abs(self.log_error_after)))


class _Counted:
    """The predictor, counting its calls (evaluations of the whole fitted subset)."""

    def __init__(self, params: Sequence[FreeParameter], observations: ObservationSet,
                 predict: Predictor, indices: IntArray) -> None:
        self.params, self.observations, self.predict = params, observations, predict
        self.indices, self.calls = indices, 0

    def at(self, values: Mapping[str, float]) -> FloatArray:
        self.calls += 1
        return log_errors(self.predict, values, self.observations, self.indices)

    def residual(self, free: Sequence[int], base: Mapping[str, float]) -> _Residual:
        return _Residual(self, free, base)


class _Residual:
    """Log errors as a function of the free parameters' variables, the rest held at `base`."""

    def __init__(self, counted: _Counted, free: Sequence[int], base: Mapping[str, float]) -> None:
        self.counted, self.free, self.base = counted, list(free), dict(base)

    def values(self, x: FloatArray) -> dict[str, float]:
        out = dict(self.base)
        for j, xj in zip(self.free, x, strict=True):
            p = self.counted.params[j]
            out[p.name] = p.from_x(float(xj))
        return out

    def __call__(self, x: FloatArray) -> FloatArray:
        return self.counted.at(self.values(x))


def _bounds(params: Sequence[FreeParameter], free: Sequence[int]) -> tuple[FloatArray, FloatArray]:
    pairs = [params[j].x_bounds() for j in free]
    return (np.array([lo for lo, _ in pairs], dtype=np.float64),
            np.array([hi for _, hi in pairs], dtype=np.float64))


def _probe_point(jac0: FloatArray, bounds: tuple[FloatArray, FloatArray]) -> FloatArray:
    """A second point for parameters that move nothing at the prior: each such one at
    PROBE_STEP above it (within its bound). A step time max(gpu, host) is flat in the host
    cost wherever the GPU is slower, so a host cost that is really larger than its prior
    would otherwise never leave it."""
    n_rows = max(jac0.shape[0], 1)
    flat = ~(np.sqrt(np.sum(jac0**2, axis=0) / n_rows) >= SENSITIVITY_FLOOR)
    return np.where(flat, np.minimum(PROBE_STEP, bounds[1]), 0.0)


def _off_bounds(bounds: tuple[FloatArray, FloatArray]) -> FloatArray | None:
    """A start inside the bounds for parameters whose prior sits on one (a latency shipped at
    0, its lower bound): from a bound, the trust-region reflective method scales its steps by
    the distance to that bound, so it cannot leave; each such parameter starts
    BOUND_START_SHARE of its span inside instead. None when no prior sits on a bound."""
    lower, upper = bounds
    on = (lower == 0.0) | (upper == 0.0)
    if not on.any():
        return None
    span = upper - lower
    return np.where(lower == 0.0, BOUND_START_SHARE * span,
                    np.where(upper == 0.0, -BOUND_START_SHARE * span, 0.0))


def _std_errors(jac: FloatArray, cost: float, n_rows: int) -> FloatArray:
    """Standard errors in the fitted variables: sqrt(diag(s^2 (J'J)^-1)), s^2 = 2 cost / dof,
    with the loss-weighted Jacobian scipy returns (its J'J approximates the cost's Hessian)."""
    n = jac.shape[1]
    s2 = 2.0 * cost / max(n_rows - n, 1)
    # Var(x_j) = s^2 sum_k V_kj^2 / sigma_k^2 over the singular values of J. A direction J
    # barely sees (sigma_k at or below SINGULAR_FLOOR of the largest: at the fitted point the
    # soft-L1 weights can leave a parameter's rows with no say) has no finite variance: its
    # parameters' errors are infinite (reported as unknown), not the zero a pseudo-inverse gives.
    _, sigma, vt = np.linalg.svd(jac, full_matrices=False)
    seen = sigma > SINGULAR_FLOOR * (sigma[0] if sigma.size else 0.0)
    inv_sq = np.where(seen, 1.0 / np.where(seen, sigma, 1.0) ** 2, np.inf)
    share = vt**2
    counts = share > SHARE_FLOOR
    terms = share * np.where(counts, inv_sq[:, None], 0.0)  # 0 x inf never formed
    return np.asarray(np.sqrt(s2 * terms.sum(axis=0)), dtype=np.float64)


def fit(params: Sequence[FreeParameter], observations: ObservationSet, predict: Predictor,
        indices: IntArray | None = None, *, f_scale: float = F_SCALE,
        step: float = DIFF_STEP, max_evaluations: int | None = None) -> FitResult:
    """Fit the identifiable parameters to the observations at `indices` (all by default)."""
    check_parameters(params)
    idx = np.arange(len(observations)) if indices is None else np.asarray(indices, dtype=np.intp)
    if idx.size == 0:
        raise ValueError("no observations to fit")
    counted = _Counted(params, observations, predict, idx)
    at_prior = priors(params)
    everything = counted.residual(range(len(params)), at_prior)
    before = everything(np.zeros(len(params)))
    bounds = _bounds(params, range(len(params)))
    jac0 = central_jacobian(everything, np.zeros(len(params)), bounds, step)
    probe = _probe_point(jac0, bounds)
    if probe.any():  # a flat column at the prior may be a kink (max(gpu, host)): look beyond
        jac_probe = central_jacobian(everything, probe, bounds, step)
        ident = identify_stacked(jac0, jac_probe, [p.name for p in params])
    else:
        ident = identify(jac0, [p.name for p in params])
    free = [j for j, ok in enumerate(ident.identified) if ok]
    x_err = np.full(len(params), np.nan)
    converged, message, values, after = True, "nothing identified: all at priors", at_prior, before
    if free:
        residual = counted.residual(free, at_prior)
        starts = [np.zeros(len(free))]
        if probe[free].any():
            starts.append(probe[free])
        inside = _off_bounds(_bounds(params, free))
        if inside is not None:
            starts.append(inside)
        runs = [least_squares(
            residual, x0, jac="2-point", bounds=_bounds(params, free),
            method="trf", loss="soft_l1", f_scale=f_scale, diff_step=step,
            max_nfev=max_evaluations, xtol=X_TOLERANCE, ftol=F_TOLERANCE,
        ) for x0 in starts]
        result = min(runs, key=lambda r: float(r.cost))
        values = residual.values(np.asarray(result.x, dtype=np.float64))
        after = np.asarray(result.fun, dtype=np.float64)
        converged, message = bool(result.status > 0), str(result.message)
        x_err[free] = _std_errors(np.asarray(result.jac, dtype=np.float64), float(result.cost),
                                  idx.size)
    return FitResult(
        parameters=tuple(_fitted(p, j, values[p.name], ident, x_err[j], after)
                         for j, p in enumerate(params)),
        indices=idx, log_error_before=before, log_error_after=after,
        moved_rows=ident.moved_rows, condition=ident.condition, evaluations=counted.calls,
        converged=converged, message=message,
    )


def _fitted(p: FreeParameter, j: int, value: float, ident: Identifiability, x_err: float,
            after: FloatArray) -> FittedParameter:
    rows = ident.moved_rows[:, j]
    ok = ident.identified[j]
    # trf keeps iterates strictly inside the bounds, a few 1e-9 short of one it presses on.
    bound_tol = 1e-6 * max(abs(p.lower), abs(p.upper), 1.0)
    return FittedParameter(
        parameter=p, value=value, identified=ok, reason=ident.reasons[j],
        std_error=p.value_error(value, x_err) if ok and math.isfinite(x_err) else None,
        sensitivity=float(ident.sensitivity[j]), rows=int(rows.sum()),
        residual=float(np.median(np.abs(after[rows]))) if rows.any() else math.nan,
        at_bound=ok and (value - p.lower <= bound_tol or p.upper - value <= bound_tol),
    )
