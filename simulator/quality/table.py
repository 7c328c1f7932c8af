"""The shipped quality data: published benchmark scores of quantized checkpoints and the
family each catalog model belongs to. Read once, validated row by row (one clear line on a
bad row, since a silently mis-read figure would be reported as published)."""

from __future__ import annotations

import csv
import functools
import math
from dataclasses import dataclass
from pathlib import Path

from simulator.model.precision import FORMATS

DATA_DIR = Path(__file__).resolve().parent
DELTAS_FILE = DATA_DIR / "quality_deltas.csv"
FAMILIES_FILE = DATA_DIR / "families.csv"
KV_UNSTATED = "unstated"  # the source does not say which KV cache format it evaluated


@dataclass(frozen=True, slots=True)
class QualityRow:
    """One published benchmark score of a quantized checkpoint and of its reference."""

    model: str
    family: str
    benchmark: str
    baseline_format: str
    baseline_score: float
    weights: str
    activations: str
    kv_cache: str
    score: float
    source: str

    @property
    def delta_pct(self) -> float:
        """Relative change of the score in percent (negative: the quantized model is worse)."""
        return (self.score - self.baseline_score) / self.baseline_score * 100.0


def _rows(path: Path) -> list[dict[str, str]]:
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    return list(csv.DictReader(lines))


def _format(path: Path, n: int, key: str, value: str, extra: tuple[str, ...] = ()) -> str:
    if value not in FORMATS and value not in extra:
        valid = ", ".join((*FORMATS, *extra))
        raise ValueError(f"{path.name} row {n}: {key}={value!r} is not a format ({valid})")
    return value


def _score(path: Path, n: int, key: str, value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        x = math.nan
    if not math.isfinite(x) or x <= 0:
        raise ValueError(f"{path.name} row {n}: {key}={value!r} must be a positive score")
    return x


def parse_deltas(path: Path) -> tuple[QualityRow, ...]:
    out = []
    for n, r in enumerate(_rows(path), start=1):
        if not (r.get("source") or "").strip():
            raise ValueError(f"{path.name} row {n}: every figure needs its source")
        out.append(QualityRow(
            model=r["model"], family=r["family"], benchmark=r["benchmark"],
            baseline_format=_format(path, n, "baseline_format", r["baseline_format"]),
            baseline_score=_score(path, n, "baseline_score", r["baseline_score"]),
            weights=_format(path, n, "weights", r["weights"]),
            activations=_format(path, n, "activations", r["activations"]),
            kv_cache=_format(path, n, "kv_cache", r["kv_cache"], (KV_UNSTATED,)),
            score=_score(path, n, "score", r["score"]),
            source=r["source"].strip(),
        ))
    return tuple(out)


@functools.cache
def quality_rows() -> tuple[QualityRow, ...]:
    return parse_deltas(DELTAS_FILE)


@functools.cache
def model_families() -> dict[str, str]:
    return {r["model"]: r["family"] for r in _rows(FAMILIES_FILE)}
