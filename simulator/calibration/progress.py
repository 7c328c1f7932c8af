"""A progress line on stderr: count/total, rate and ETA. On a terminal one line is rewritten in
place (at most every `min_interval_s`); into a file or pipe (CI logs) a whole line is written each
time another `percent_step` of the total is done, so a log gets ~100 / percent_step lines, not
one per item."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m{seconds % 60:02.0f}s"
    return f"{seconds // 3600:.0f}h{seconds % 3600 // 60:02.0f}m"


class Progress:
    """Counts items done out of `total` and reports them on `stream` (stderr by default)."""

    def __init__(self, total: int, label: str, *, stream: TextIO | None = None,
                 percent_step: float = 10.0, min_interval_s: float = 0.2,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total = max(int(total), 0)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.percent_step = max(percent_step, 1e-9)
        self.min_interval_s = min_interval_s
        self.clock = clock
        self.done = 0
        self.t0 = clock()
        self._last_emit = float("-inf")
        self._last_bucket = 0
        self._open_line = False
        self._finished = False

    def line(self) -> str:
        """`label: done/total (pct%), rate/s, ETA`."""
        elapsed = self.clock() - self.t0
        rate = self.done / elapsed if elapsed > 0 else 0.0
        pct = 100.0 * self.done / self.total if self.total else 100.0
        left = max(self.total - self.done, 0)
        eta = _duration(left / rate) if rate > 0 else "?"
        return (f"{self.label}: {self.done}/{self.total} ({pct:.0f}%), {rate:.3g}/s, "
                f"ETA {eta}")

    def advance(self, n: int = 1) -> None:
        """Count `n` more items done, and report if it is time to."""
        self.done += n
        finished = self.done >= self.total
        if self.tty:
            now = self.clock()
            if finished or now - self._last_emit >= self.min_interval_s:
                self._last_emit = now
                self.stream.write("\r" + self.line() + "\033[K")
                self._open_line = True
                self.stream.flush()
            return
        if finished:
            if not self._finished:  # the finishing line once
                self._finished = True
                self._write_line()
            return
        bucket = int(100.0 * self.done / self.total // self.percent_step)
        if bucket > self._last_bucket:
            self._last_bucket = bucket
            self._write_line()

    def _write_line(self) -> None:
        self.stream.write(self.line() + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End the rewritten terminal line so later output starts on its own."""
        if self._open_line:
            self.stream.write("\n")
            self.stream.flush()
            self._open_line = False
