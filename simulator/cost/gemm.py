"""GEMM time with tile and wave quantization: the source of much of the frontier's jaggedness.

A GEMM of M x N x K runs as ceil(M/tm) x ceil(N/tn) output tiles spread over the SMs in waves.
The last, partly filled wave costs as much as a full one, so a batch that spills one tile into
a new wave pays for a whole wave. When there are fewer tiles than SMs, kernels split K (split-K
/ stream-K) to fill the chip, down to a minimum K slice. Tile shapes are per chip (hardware
profile, `kernels:` block): skinny decode GEMMs use the small-M tile.
"""

from __future__ import annotations

import math

from simulator.hardware.profile import GemmTiling


def gemm_compute_time_s(
    m: int, n: int, k: int, flops_per_s: float, sm_count: int, tiles: GemmTiling
) -> float:
    """Tile-quantized compute time of an M x N x K GEMM at an achievable rate."""
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    tm = tiles.m_small if m <= tiles.m_small else tiles.m
    count = math.ceil(m / tm) * math.ceil(n / tiles.n)
    per_sm_flops_per_s = flops_per_s / sm_count
    tile_flops = 2.0 * tm * tiles.n * k
    if count >= sm_count:
        waves = math.ceil(count / sm_count)
        return waves * tile_flops / per_sm_flops_per_s
    split = max(1, min(sm_count // count, k // tiles.min_split_k))
    return 2.0 * tm * tiles.n * math.ceil(k / split) / per_sm_flops_per_s


def gemm_bytes(m: int, n: int, k: int, weight_bytes: float, act_bytes: float) -> float:
    """HBM traffic: the weight matrix once, activations in, BF16 activations out."""
    return n * k * weight_bytes + m * k * act_bytes + m * n * 2.0
