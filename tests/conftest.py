"""Suite-wide hooks: the fuzz targets' count of distinct bad inputs and the corpus size, printed
after the run (tests/fuzz_stats.py)."""

from __future__ import annotations

from typing import Any

import fuzz_stats


def pytest_terminal_summary(terminalreporter: Any) -> None:
    fuzz_stats.summary_lines(terminalreporter.write_line)
