"""The closed-form estimates of a calibration's runs on worker processes: a fit's
finite-difference steps ask for hundreds of runs at new parameter values at once, each a
millisecond or two of pure Python, so they spread over the machine's cores.

Workers are forked after the runs are prepared and inherit them (scenarios, engines, streams
are never pickled); a job sends a run's index and the parameter values, and gets back its
(mean TTFT, mean TPOT). Where fork is not available the estimates run in this process."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any

# A batch smaller than this runs in the parent: shipping it costs more than it saves.
MIN_PARALLEL_JOBS = 32
# Chunks per worker a batch is cut into, so a worker that drew slow runs does not hold the rest.
CHUNKS_PER_WORKER = 4

Estimator = Callable[[Any, Mapping[str, float]], tuple[float, float]]
_RUNS: Sequence[Any] = ()
_ESTIMATE: Estimator | None = None


def _inherit(runs: Sequence[Any], estimate: Estimator) -> None:
    """Worker initializer: keep the forked parent's runs and estimator (not pickled: the
    fork start method passes initializer arguments by memory)."""
    global _RUNS, _ESTIMATE
    _RUNS, _ESTIMATE = runs, estimate


def _work(jobs: list[tuple[int, dict[str, float]]]) -> list[tuple[float, float]]:
    assert _ESTIMATE is not None
    return [_ESTIMATE(_RUNS[r], values) for r, values in jobs]


class EstimatePool:
    """`workers` processes estimating prepared runs with `estimate(run, values)`."""

    def __init__(self, runs: Sequence[Any], estimate: Estimator, workers: int) -> None:
        self.runs, self.estimate, self.workers = runs, estimate, workers
        self._executor: Executor | None = None
        if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
            self._executor = ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("fork"),
                initializer=_inherit, initargs=(runs, estimate))

    def map(self, jobs: Sequence[tuple[int, Mapping[str, float]]]) -> list[tuple[float, float]]:
        """(mean TTFT, mean TPOT) of each (run index, values) job, in order."""
        if self._executor is None or len(jobs) < MIN_PARALLEL_JOBS:
            return [self.estimate(self.runs[r], v) for r, v in jobs]
        size = max(1, -(-len(jobs) // (self.workers * CHUNKS_PER_WORKER)))
        chunks = [[(r, dict(v)) for r, v in jobs[i:i + size]]
                  for i in range(0, len(jobs), size)]
        return [hit for part in self._executor.map(_work, chunks) for hit in part]

    def close(self) -> None:
        """Stop the workers (idempotent)."""
        if self._executor is not None:
            self._executor.shutdown()
            self._executor = None
