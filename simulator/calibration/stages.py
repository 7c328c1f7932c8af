"""A fit in stages: each stage fits its own parameters on the rows of its own metrics, with
every earlier stage's parameters held at their fitted values, and the stages' results are
merged into one FitResult over every row (what cross-validation and the overlay read).

Why stages: two kinds of parameter seen by different metrics. An engine's host cost shows in
TTFT and TPOT alike; a GPU's GEMM streaming fraction is seen at decode, where the step is
memory-bound (TPOT), while a TTFT also carries queueing and scheduling the GPU factor must not
absorb. Fitting host costs first on every row, then GPU factors on TPOT rows only, keeps each
kind to the rows that measure it and the GPU factor to what the host costs leave unexplained.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from simulator.calibration.fit import (
    DIFF_STEP,
    F_SCALE,
    FitResult,
    FittedParameter,
    fit,
    log_errors,
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


@dataclass(frozen=True)
class Stage:
    """Parameters fitted together, on the rows of `metrics` (None: every row)."""

    params: tuple[FreeParameter, ...]
    metrics: frozenset[str] | None = None


def _held(predict: Predictor, fixed: Mapping[str, float]) -> Predictor:
    """The predictor with earlier stages' values held (a stage's own values win)."""
    def with_fixed(values: Mapping[str, float], indices: IntArray) -> FloatArray:
        return predict({**fixed, **values}, indices)

    return with_fixed


def fit_stages(stages: Sequence[Stage], observations: ObservationSet, predict: Predictor,
               indices: IntArray | None = None, *, f_scale: float = F_SCALE,
               step: float = DIFF_STEP) -> FitResult:
    """Fit each stage in turn on its rows among `indices` (all by default), merged."""
    every = [p for s in stages for p in s.params]
    check_parameters(every)
    idx = np.arange(len(observations)) if indices is None else np.asarray(indices, dtype=np.intp)
    metrics = np.array(observations.metrics, dtype=object)
    fixed: dict[str, float] = {}
    moved = np.zeros((idx.size, len(every)), dtype=bool)
    parameters: list[FittedParameter] = []
    conditions: list[float] = []
    messages: list[str] = []
    evaluations, converged, col = 0, True, 0
    for stage in stages:
        if not stage.params:
            continue
        on = np.ones(idx.size, dtype=bool) if stage.metrics is None else np.isin(
            metrics[idx], sorted(stage.metrics))
        if not on.any():
            raise ValueError(f"no observations of {sorted(stage.metrics or ())} to fit "
                             f"{stage.params[0].name} on")
        result = fit(stage.params, observations, _held(predict, fixed), idx[on],
                     f_scale=f_scale, step=step)
        fixed.update(result.values())
        moved[np.flatnonzero(on), col:col + len(stage.params)] = result.moved_rows
        col += len(stage.params)
        parameters.extend(result.parameters)
        conditions.append(result.condition)
        messages.append(result.message)
        evaluations += result.evaluations
        converged = converged and result.converged
    before = log_errors(predict, priors(every), observations, idx)
    after = log_errors(predict, {**priors(every), **fixed}, observations, idx)
    return FitResult(
        parameters=tuple(parameters), indices=idx, log_error_before=before,
        log_error_after=after, moved_rows=moved,
        condition=max(conditions) if conditions else math.nan,
        evaluations=evaluations + 2, converged=converged, message="; ".join(messages),
    )
