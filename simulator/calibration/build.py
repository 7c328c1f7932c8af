"""From a fit (and optionally its cross-validation) to a CalibrationOverlay: each identified
parameter's value with the files, rows and engine versions it was fitted to, and each one left
at its prior with the reason. Also the header's pieces (file hash, version, time)."""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from simulator.calibration.crossval import CrossValidation, ErrorStats
from simulator.calibration.fit import FitResult
from simulator.calibration.overlay import (
    CalibrationOverlay,
    CrossValidated,
    FittedFile,
    FittedTo,
    GroupErrors,
    NotIdentified,
    OverlayHeader,
    OverlayTarget,
    OverlayValue,
    Stats,
)


@dataclass(frozen=True)
class RowSource:
    """Where one observation came from: its file and the engine (name, version) measured."""

    file: str
    engine: str
    engine_version: str


def sha256_of(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def frontier_version() -> str:
    """The installed frontier-sim version ("unknown" when run from a bare checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("frontier-sim")
    except PackageNotFoundError:
        return "unknown"


def make_header(files: Sequence[tuple[str, int]], sources: Sequence[RowSource],
                created: datetime | None = None) -> OverlayHeader:
    """Header for (path, rows used) files, hashing each, with the engine versions of `sources`."""
    return OverlayHeader(
        frontier_version=frontier_version(),
        created=created if created is not None else datetime.now(UTC),
        files=tuple(FittedFile(path=str(p), rows=rows, sha256=sha256_of(p)) for p, rows in files),
        engine_versions=_engine_versions(sources),
    )


def _engine_versions(sources: Sequence[RowSource]) -> dict[str, str]:
    seen: dict[str, set[str]] = {}
    for s in sources:
        seen.setdefault(s.engine, set()).add(s.engine_version)
    return {engine: ", ".join(sorted(v)) for engine, v in sorted(seen.items())}


def _stats(s: ErrorStats) -> Stats:
    def opt(v: float) -> float | None:
        return v if math.isfinite(v) else None

    return Stats(count=s.count, failed=s.failed, median_abs=opt(s.median_abs),
                 p90_abs=opt(s.p90_abs), median_signed=opt(s.median_signed))


def _target(fitted_target: tuple[str, str, str]) -> OverlayTarget:
    kind, name, key = fitted_target
    return OverlayTarget.model_validate({"kind": kind, "name": name, "key": key})


def build_overlay(result: FitResult, header: OverlayHeader, sources: Sequence[RowSource],
                  cross_validation: CrossValidation | None = None) -> CalibrationOverlay:
    """The overlay for a fit on every observation; `sources` is aligned with the observations
    (one per row) and names the file and engine each came from."""
    if len(sources) != len(result.indices) or not np.array_equal(
            result.indices, np.arange(len(sources))):
        raise ValueError("build_overlay needs the fit on every observation, one source per row")
    values, missing = [], []
    for j, p in enumerate(result.parameters):
        target = _target(p.parameter.target)
        if not p.identified:
            missing.append(NotIdentified(target=target, prior=p.prior, reason=p.reason or "?"))
            continue
        rows = np.asarray(result.moved_rows[:, j], dtype=bool)
        used = [sources[int(i)] for i in np.flatnonzero(rows)]
        cv = None
        if cross_validation is not None:
            before, after = cross_validation.stats_for(rows)
            cv = CrossValidated(folds=cross_validation.k, before=_stats(before),
                                after=_stats(after))
        values.append(OverlayValue(
            target=target, value=p.value, prior=p.prior, std_error=p.std_error,
            fitted_to=FittedTo(files=tuple(sorted({s.file for s in used})), rows=len(used),
                               engine_versions=_engine_versions(used)),
            residual=p.residual, cross_validated=cv,
        ))
    groups = () if cross_validation is None else tuple(
        GroupErrors(group=g.group, metric=g.metric, before=_stats(g.before),
                    after=_stats(g.after)) for g in cross_validation.summaries)
    return CalibrationOverlay(header=header, values=tuple(values), not_identified=tuple(missing),
                              cross_validation=groups)
