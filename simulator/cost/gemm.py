"""GEMM time with tile and wave quantization: the source of much of the frontier's jaggedness.

A GEMM of M x N x K runs as ceil(M/tm) x ceil(N/tn) output tiles spread over the SMs in waves.
The last, partly filled wave costs as much as a full one, so a batch that spills one tile into
a new wave pays for a whole wave. When there are fewer tiles than SMs, kernels split K (split-K
/ stream-K) to fill the chip, down to K slices of 256.
"""

from __future__ import annotations

import math

TILE_N = 128
TILE_M_LARGE = 128
TILE_M_SMALL = 64  # Hopper wgmma and Blackwell UMMA minimum M; decode GEMMs use it
MIN_SPLIT_K = 256


def gemm_compute_time_s(m: int, n: int, k: int, flops_per_s: float, sm_count: int) -> float:
    """Tile-quantized compute time of an M x N x K GEMM at an achievable rate."""
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    tm = TILE_M_SMALL if m <= TILE_M_SMALL else TILE_M_LARGE
    tiles = math.ceil(m / tm) * math.ceil(n / TILE_N)
    per_sm_flops_per_s = flops_per_s / sm_count
    tile_flops = 2.0 * tm * TILE_N * k
    if tiles >= sm_count:
        waves = math.ceil(tiles / sm_count)
        return waves * tile_flops / per_sm_flops_per_s
    split = max(1, min(sm_count // tiles, k // MIN_SPLIT_K))
    return 2.0 * tm * TILE_N * math.ceil(k / split) / per_sm_flops_per_s


def gemm_bytes(m: int, n: int, k: int, weight_bytes: float, act_bytes: float) -> float:
    """HBM traffic: the weight matrix once, activations in, BF16 activations out."""
    return n * k * weight_bytes + m * k * act_bytes + m * n * 2.0
