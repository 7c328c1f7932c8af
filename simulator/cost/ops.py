"""One row of a step's cost: an operator with its FLOPs, bytes, time and what bounds it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Bound = Literal["compute", "memory", "communication"]


@dataclass(frozen=True, slots=True)
class OpCost:
    """Per-GPU cost of one operator summed over the layers it appears in."""

    op: str
    flops: float
    bytes: float  # HBM bytes, or bytes on the wire for communication
    time_s: float  # core time + launch_s
    launch_s: float  # fixed per-kernel cost included in time_s
    bound: Bound
    kernels: int

    @property
    def core_s(self) -> float:
        return self.time_s - self.launch_s

    @property
    def arithmetic_intensity(self) -> float:
        return self.flops / self.bytes if self.bytes > 0 else math.inf


def roofline(
    op: str,
    flops: float,
    nbytes: float,
    flops_per_s: float,
    bytes_per_s: float,
    kernels: int,
    launch_s: float,
    compute_s: float | None = None,
    memory_s: float | None = None,
    serial: bool = False,
) -> OpCost:
    """max(compute, memory) + launches; their sum when `serial` (loads that cannot overlap the
    MMAs, cost/gemm.GemmKernelTime). `compute_s` / `memory_s` override flops/rate and
    bytes/rate (tile-quantized GEMMs, their kernel class's streaming)."""
    tc = flops / flops_per_s if compute_s is None else compute_s
    tm = nbytes / bytes_per_s if memory_s is None else memory_s
    launch = kernels * launch_s
    return OpCost(
        op,
        flops,
        nbytes,
        (tc + tm if serial else max(tc, tm)) + launch,
        launch,
        "compute" if tc >= tm else "memory",
        kernels,
    )

