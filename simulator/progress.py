"""A progress line for long commands (sweeps, validation over measured runs, calibration):
one line rewritten in place on a terminal, whole lines now and then into a file or CI log."""

from __future__ import annotations

import sys
import time
from typing import IO


class Progress:
    """Items done, rate and ETA: one rewritten line on a terminal (at most every 0.2 s), plain
    lines every `every_s` otherwise, and always at the end."""

    def __init__(self, total: int, stream: IO[str] | None = None, every_s: float = 5.0,
                 label: str = "sweep", unit: str = "points") -> None:
        self.total = total
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every_s = every_s if not self.tty else 0.2
        self.label = label
        self.done = 0
        self.t0 = time.perf_counter()
        self._last = float("-inf")

    def line(self) -> str:
        elapsed = time.perf_counter() - self.t0
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = self.total - self.done
        eta = f"{left / rate:.0f} s" if rate > 0 else "?"
        return (f"{self.label}: {self.done}/{self.total} {self.unit}, {rate:.1f} "
                f"{self.unit}/s, ETA {eta}")

    def step(self, n: int = 1) -> None:
        self.done += n
        now = time.perf_counter()
        if now - self._last >= self.every_s or self.done == self.total:
            self._last = now
            self._emit()

    def _emit(self) -> None:
        if self.tty:
            self.stream.write("\r" + self.line() + "\033[K")
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self.total:
            self.stream.write("\n")
            self.stream.flush()
