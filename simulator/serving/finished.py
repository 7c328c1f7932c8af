"""The record fields of finished requests, gathered in typed arrays as requests finish and
written into the run's records in blocks (a numpy record write per field costs microseconds)."""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np
import numpy.typing as npt

from simulator.serving.request import Request


class FinishedColumns:
    """The record fields of finished requests, one typed array per field, written into the
    records in blocks (vectorized) as they fill."""

    FLOATS = ("scheduled_s", "first_token_s", "finish_s")
    INTS = ("preemptions", "replica", "decode_first_step", "decode_last_step")

    def __init__(self, records: npt.NDArray[Any], cached: bool = False) -> None:
        """`cached`: also keep each request's cached prompt tokens (a run whose prompts share
        content); else that column stays 0."""
        self.records = records
        self.ints = (*self.INTS, "cached_tokens") if cached else self.INTS
        self._new_columns()

    def _new_columns(self) -> None:
        self.index = array("q")
        self.cols: dict[str, array[Any]] = {name: array("d") for name in self.FLOATS}
        self.cols.update({name: array("q") for name in self.ints})
        c = self.cols
        self._appends = (
            self.index.append, c["scheduled_s"].append, c["first_token_s"].append,
            c["finish_s"].append, c["preemptions"].append, c["replica"].append,
            c["decode_first_step"].append, c["decode_last_step"].append,
        )
        self._cached = c["cached_tokens"].append if "cached_tokens" in c else None

    FLUSH_EVERY = 4096  # rows held before they are written into the records

    def add(self, r: Request) -> None:
        index, scheduled, first, finish, preemptions, replica, d_first, d_last = self._appends
        index(r.index)
        scheduled(r.scheduled_s)
        first(r.first_token_s)
        finish(r.finish_s)
        preemptions(r.preemptions)
        replica(r.replica)
        d_first(r.decode_start_step if r.decode_last_step >= 0 else -1)
        d_last(r.decode_last_step)
        if self._cached is not None:
            self._cached(r.cached_tokens)
        if len(self.index) >= self.FLUSH_EVERY:
            self.scatter()

    def scatter(self) -> None:
        """Write the rows held so far into the records, and let them go."""
        idx = np.frombuffer(self.index, dtype=np.int64)
        for name, col in self.cols.items():
            kind = np.float64 if name in self.FLOATS else np.int64
            self.records[name][idx] = np.frombuffer(col, dtype=kind)
        del idx
        self._new_columns()
