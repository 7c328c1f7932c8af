"""What a calibration fits and what it fits to: declared free parameters (each overlaying one
key of an engine style or a GPU profile) and the measured observations, plus the change of
variables the optimiser works in (log ratio to the prior, so a fit is multiplicative)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from simulator.errors import InputError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
TargetKind = Literal["engine_style", "hardware"]
TARGET_KINDS: tuple[TargetKind, ...] = ("engine_style", "hardware")
Scale = Literal["log", "linear"]

# Predictions for the observations at `indices` (positions in the ObservationSet) with every
# declared parameter at `values[name]`; vectorised so one call covers a fold or the whole set.
Predictor = Callable[[Mapping[str, float], IntArray], FloatArray]


class Target(NamedTuple):
    """The key a parameter overlays: ("engine_style", "sglang", "cpu_per_seq_us") or
    ("hardware", "h100-sxm", "efficiency.gemm_compute_fraction") (a dotted key path)."""

    kind: TargetKind
    name: str
    key: str

    def describe(self) -> str:
        """`engine_style sglang: cpu_per_seq_us`, for messages."""
        return f"{self.kind} {self.name}: {self.key}"


def _check_target(target: Target) -> None:
    if target.kind not in TARGET_KINDS:
        raise ValueError(f"target kind {target.kind!r} is not one of {', '.join(TARGET_KINDS)}")
    if not target.name:
        raise ValueError("target name is empty")
    if not target.key or any(not part for part in target.key.split(".")):
        raise ValueError(f"target key {target.key!r} is not a dotted key path (a.b.c)")


@dataclass(frozen=True)
class FreeParameter:
    """One value the fit may move, from its prior (the shipped figure) within [lower, upper].

    scale="log" (positive values: cpu microseconds, efficiencies) fits ln(value / prior), so a
    step is a ratio; scale="linear" fits (value - prior) / unit, unit = |prior| or the span."""

    name: str
    target: Target
    prior: float
    lower: float
    upper: float
    scale: Scale = "log"

    def __post_init__(self) -> None:
        object.__setattr__(self, "target", Target(*self.target))
        _check_target(self.target)
        where = f"free parameter {self.name!r}"
        if not self.name:
            raise ValueError("free parameter name is empty")
        if not all(math.isfinite(v) for v in (self.prior, self.lower, self.upper)):
            raise ValueError(f"{where}: prior and bounds must be finite")
        if not self.lower < self.upper:
            raise ValueError(f"{where}: lower {self.lower} must be below upper {self.upper}")
        if not self.lower <= self.prior <= self.upper:
            raise ValueError(f"{where}: prior {self.prior} outside [{self.lower}, {self.upper}]")
        if self.scale == "log" and self.lower <= 0:
            raise ValueError(f"{where}: a log-scale parameter needs lower > 0 (got {self.lower})")
        if self.scale not in ("log", "linear"):
            raise ValueError(f"{where}: scale {self.scale!r} is not log or linear")

    @property
    def unit(self) -> float:
        """Size of one unit of the fitted variable on the linear scale."""
        return abs(self.prior) if self.prior != 0 else self.upper - self.lower

    def to_x(self, value: float) -> float:
        """The optimiser's variable for `value` (0 at the prior)."""
        if self.scale == "log":
            return math.log(value / self.prior)
        return (value - self.prior) / self.unit

    def from_x(self, x: float) -> float:
        """The parameter value for the optimiser's variable `x`, clipped to the bounds."""
        value = self.prior * math.exp(x) if self.scale == "log" else self.prior + x * self.unit
        return min(max(value, self.lower), self.upper)

    def x_bounds(self) -> tuple[float, float]:
        """The bounds in the optimiser's variable."""
        return self.to_x(self.lower), self.to_x(self.upper)

    def value_error(self, value: float, x_error: float) -> float:
        """A standard error in x turned into one in value units (first-order delta method)."""
        return abs(value) * x_error if self.scale == "log" else self.unit * x_error


def check_parameters(params: Sequence[FreeParameter]) -> None:
    """Names and targets must be unique: two parameters on one key would fight over it."""
    if not params:
        raise ValueError("no free parameters declared")
    for attr in ("name", "target"):
        seen = [getattr(p, attr) for p in params]
        dupes = sorted({str(v) for v in seen if seen.count(v) > 1})
        if dupes:
            raise ValueError(f"free parameters share a {attr}: {', '.join(dupes)}")


@dataclass(frozen=True)
class Observation:
    """One measured value: `metric` (e.g. "tpot_s") of configuration `config` (the key that
    names one deployment + workload, shared by its concurrencies and lengths), reported under
    `group` (e.g. ("h100-sxm", "vllm", "online"))."""

    measured: float
    metric: str
    config: str
    group: tuple[str, ...] = ()


@dataclass(frozen=True)
class ObservationSet:
    """Observations as columns, so a fit indexes them by position."""

    measured: FloatArray = field(repr=False, compare=False)
    metrics: tuple[str, ...]
    configs: tuple[str, ...]
    groups: tuple[tuple[str, ...], ...]

    @classmethod
    def of(cls, rows: Sequence[Observation]) -> ObservationSet:
        """Columns of `rows`; every measured value must be finite and positive (log error)."""
        if not rows:
            raise InputError("calibration: no measured observations to fit")
        for i, row in enumerate(rows):
            if not (math.isfinite(row.measured) and row.measured > 0):
                raise InputError(
                    f"calibration: observation {i} ({row.config}, {row.metric}): measured value "
                    f"{row.measured!r} is not a finite positive number"
                )
        measured = np.array([r.measured for r in rows], dtype=np.float64)
        measured.setflags(write=False)
        return cls(measured, tuple(r.metric for r in rows), tuple(r.config for r in rows),
                   tuple(tuple(r.group) for r in rows))

    def __len__(self) -> int:
        return len(self.metrics)


def priors(params: Sequence[FreeParameter]) -> dict[str, float]:
    """Every parameter at its prior."""
    return {p.name: p.prior for p in params}
