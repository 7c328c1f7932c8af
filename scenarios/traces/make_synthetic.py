"""Write the two synthetic request traces in this folder (not real data; see README.md).

Run from the repository root: `.venv/bin/python scenarios/traces/make_synthetic.py`.
Deterministic: a fixed seed, so rerunning rewrites identical files.
"""

from __future__ import annotations

import csv
import math
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROWS = 200
Z90 = 1.2815515655446004  # standard normal quantile at 0.9


def _lognormal_ints(rng: np.random.Generator, median: float, p90: float, n: int) -> list[int]:
    sigma = math.log(p90 / median) / Z90
    return [max(1, round(x)) for x in rng.lognormal(math.log(median), sigma, size=n)]


def write_plain(rng: np.random.Generator) -> None:
    """Poisson arrivals at 2 req/s; chat-like lengths."""
    t = np.cumsum(rng.exponential(1 / 2.0, size=ROWS))
    inputs = _lognormal_ints(rng, 1000, 3000, ROWS)
    outputs = _lognormal_ints(rng, 200, 600, ROWS)
    with (HERE / "synthetic_plain.csv").open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["arrival_s", "input_tokens", "output_tokens"])
        for row in zip(t, inputs, outputs, strict=True):
            w.writerow([f"{row[0]:.6f}", row[1], row[2]])


def write_azure(rng: np.random.Generator) -> None:
    """Bursty gamma arrivals (4 req/s, gap CV 2), code-like lengths, Azure trace layout."""
    cv2 = 2.0**2
    t = np.cumsum(rng.gamma(1 / cv2, cv2 / 4.0, size=ROWS))
    inputs = _lognormal_ints(rng, 2000, 6000, ROWS)
    outputs = _lognormal_ints(rng, 30, 150, ROWS)
    start = datetime(2023, 11, 16, 18, 15, 46)
    with (HERE / "synthetic_azure.csv").open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        for seconds, n_in, n_out in zip(t, inputs, outputs, strict=True):
            ticks = round(float(seconds) * 10**7)  # 100 ns ticks, as the Azure files print
            stamp = start + timedelta(seconds=ticks // 10**7)
            w.writerow([f"{stamp:%Y-%m-%d %H:%M:%S}.{ticks % 10**7:07d}", n_in, n_out])


if __name__ == "__main__":
    generator = np.random.default_rng(20240501)
    write_plain(generator)
    write_azure(generator)
