"""k-fold cross-validation grouped by configuration: a configuration's concurrencies and
lengths all fall in one fold, so a held-out error measures how the fit carries to a deployment
it has not seen, not how it interpolates between points of one it has. Errors are
prediction / measured - 1, summarised per group (GPU, engine, mode) and metric."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from simulator.calibration.fit import DIFF_STEP, F_SCALE, FitResult, fit
from simulator.calibration.params import (
    FloatArray,
    FreeParameter,
    IntArray,
    ObservationSet,
    Predictor,
    priors,
)
from simulator.errors import InputError
from simulator.progress import Progress

DEFAULT_FOLDS = 5


def assign_folds(configs: Sequence[str], k: int, seed: int = 0) -> IntArray:
    """Fold of each row: the distinct configurations are ordered by a seeded SHA-256 of their
    key and dealt round-robin, so folds differ in size by at most one configuration and the
    assignment depends only on the seed and the set of keys (not on row order)."""
    if k < 2:
        raise ValueError(f"cross-validation needs k >= 2 folds (got {k})")

    def digest(config: str) -> bytes:
        return hashlib.sha256(f"{seed}\x00{config}".encode()).digest()

    order = sorted(set(configs), key=lambda c: (digest(c), c))
    fold_of = {c: i % k for i, c in enumerate(order)}
    return np.array([fold_of[c] for c in configs], dtype=np.intp)


@dataclass(frozen=True)
class ErrorStats:
    """Relative errors (prediction / measured - 1) of some rows: how many, how many had no
    usable prediction, median and 90th percentile of |error|, and the median signed error
    (the bias: > 0 predicts too slow)."""

    count: int
    failed: int
    median_abs: float
    p90_abs: float
    median_signed: float

    @classmethod
    def of(cls, errors: FloatArray) -> ErrorStats:
        """Statistics of `errors`; NaN marks a row without a usable prediction."""
        ok = errors[np.isfinite(errors)]
        if ok.size == 0:
            return cls(0, int(errors.size), math.nan, math.nan, math.nan)
        absolute = np.abs(ok)
        return cls(int(ok.size), int(errors.size - ok.size), float(np.median(absolute)),
                   float(np.percentile(absolute, 90)), float(np.median(ok)))


@dataclass(frozen=True)
class GroupSummary:
    """Held-out errors of one metric in one group (None: every group), before and after."""

    group: tuple[str, ...] | None
    metric: str
    before: ErrorStats
    after: ErrorStats


@dataclass(frozen=True)
class CrossValidation:
    """Each row's fold, its prediction at the priors and from the fit on the other folds, the
    per-fold fits, and the summaries (per group and metric, then overall per metric)."""

    k: int
    seed: int
    folds: IntArray = field(repr=False, compare=False)
    before: FloatArray = field(repr=False, compare=False)
    after: FloatArray = field(repr=False, compare=False)
    errors_before: FloatArray = field(repr=False, compare=False)
    errors_after: FloatArray = field(repr=False, compare=False)
    fits: tuple[FitResult, ...]
    summaries: tuple[GroupSummary, ...]

    def stats_for(self, rows: np.ndarray) -> tuple[ErrorStats, ErrorStats]:
        """Held-out statistics before and after over a boolean row mask (e.g. the rows one
        parameter moves)."""
        return ErrorStats.of(self.errors_before[rows]), ErrorStats.of(self.errors_after[rows])


def relative_errors(pred: FloatArray, measured: FloatArray) -> FloatArray:
    """prediction / measured - 1, NaN where the prediction is not a finite positive number."""
    good = np.isfinite(pred) & (pred > 0)
    return np.where(good, np.where(good, pred, 1.0) / measured - 1.0, np.nan)


def summarize(observations: ObservationSet, errors_before: FloatArray,
              errors_after: FloatArray) -> tuple[GroupSummary, ...]:
    """Per (group, metric) in sorted order, then per metric over all groups."""
    metrics = np.array(observations.metrics, dtype=object)
    groups = observations.groups
    out: list[GroupSummary] = []
    for group in sorted(set(groups)):
        in_group = np.array([g == group for g in groups])
        for metric in sorted(set(metrics[in_group])):
            rows = in_group & (metrics == metric)
            out.append(GroupSummary(group, str(metric), ErrorStats.of(errors_before[rows]),
                                    ErrorStats.of(errors_after[rows])))
    for metric in sorted(set(observations.metrics)):
        rows = metrics == metric
        out.append(GroupSummary(None, metric, ErrorStats.of(errors_before[rows]),
                                ErrorStats.of(errors_after[rows])))
    return tuple(out)


def cross_validate(params: Sequence[FreeParameter], observations: ObservationSet,
                   predict: Predictor, *, k: int = DEFAULT_FOLDS, seed: int = 0,
                   f_scale: float = F_SCALE, step: float = DIFF_STEP,
                   progress: Progress | None = None,
                   fitter: Callable[[IntArray], FitResult] | None = None) -> CrossValidation:
    """Fit on k-1 folds and predict the held-out one, for each fold; k is cut to the number of
    configurations (at least two are needed). `fitter` fits the rows it is given (a staged
    fit, calibration/stages.py); by default `fit` of every parameter at once."""
    n_configs = len(set(observations.configs))
    if n_configs < 2:
        raise InputError(f"calibration: cross-validation needs measured runs of at least two "
                         f"configurations (got {n_configs})")
    k = min(k, n_configs)
    folds = assign_folds(observations.configs, k, seed)
    everything = np.arange(len(observations))
    before = np.asarray(predict(priors(params), everything), dtype=np.float64)
    after = np.full(len(observations), np.nan)
    fits: list[FitResult] = []
    for f in range(k):
        held = everything[folds == f]
        train = everything[folds != f]
        result = fitter(train) if fitter is not None else fit(
            params, observations, predict, train, f_scale=f_scale, step=step)
        after[held] = np.asarray(predict(result.values(), held), dtype=np.float64)
        fits.append(result)
        if progress is not None:
            progress.step()
    measured = observations.measured
    err_before, err_after = relative_errors(before, measured), relative_errors(after, measured)
    return CrossValidation(
        k=k, seed=seed, folds=folds, before=before, after=after, errors_before=err_before,
        errors_after=err_after, fits=tuple(fits),
        summaries=summarize(observations, err_before, err_after),
    )
