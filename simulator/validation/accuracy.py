"""The simulator's measured error against real engines (accuracy.yaml): what an answer
that rests on its predictions should be read with. Measured, not assumed: each figure names
the file, the runs and the command that produced it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from simulator.errors import InputError
from simulator.yamlsafe import safe_load_bounded

ACCURACY_PATH = Path(__file__).with_name("accuracy.yaml")


class _Metric(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    median_abs_error: float = Field(ge=0)
    p90_abs_error: float = Field(ge=0)
    median_signed_error: float
    runs: int = Field(ge=1)


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    measured_on: str
    method: str
    command: str
    commit: str
    metrics: dict[str, _Metric]


@dataclass(frozen=True, slots=True)
class MetricError:
    """One metric's error over measured runs (|predicted / measured - 1|)."""

    metric: str  # 'ttft' or 'tpot'
    median_abs: float
    p90_abs: float
    median_signed: float
    runs: int


@dataclass(frozen=True, slots=True)
class Accuracy:
    measured_on: str
    method: str
    metrics: dict[str, MetricError]

    def line(self) -> str:
        """'measured error of mean TTFT 59 % median (p90 347 %), ... over N runs of ...'."""
        parts = [f"mean {m.metric.upper()} {m.median_abs:.0%} median (p90 {m.p90_abs:.0%})"
                 for m in self.metrics.values()]
        return (f"the simulator's measured error against real engines ({self.method}, "
                f"{self.measured_on}): " + ", ".join(parts))


def load_accuracy(path: Path = ACCURACY_PATH) -> Accuracy:
    try:
        data = _File.model_validate(safe_load_bounded(path.read_text()))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: {str(exc).splitlines()[0]}") from None
    metrics = {k: MetricError(k, m.median_abs_error, m.p90_abs_error, m.median_signed_error,
                              m.runs) for k, m in data.metrics.items()}
    return Accuracy(data.measured_on, data.method, metrics)
