"""GEMM time with tile and wave quantization: the source of much of the frontier's jaggedness.

A GEMM of M x N x K runs as ceil(M/tm) x ceil(N/tn) output tiles spread over the SMs in waves.
The last, partly filled wave costs as much as a full one, so a batch that spills one tile into
a new wave pays for a whole wave. When there are fewer tiles than SMs, kernels split K (split-K
/ stream-K) to fill the chip, down to a minimum K slice. Tile shapes are per chip (hardware
profile, `kernels:` block): skinny decode GEMMs use the small-M tile. Each CTA also pays a fixed
prologue + epilogue per tile (the kernel class's `tile_fixed_us`), which is why short-K GEMMs
reach a smaller fraction of peak than long-K ones (DeepGEMM's K=512 row runs at 0.30 of peak,
its K=16384 row at 0.69).

Which kernel class a GEMM runs through (dense, grouped MoE, FP4 block-scaled, weight-only
dequantizing) sets its main-loop rate, tile fixed cost and streaming bandwidth
(`gemm_rates`, from the profile's `gemm_classes:` block; without it the flat fractions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.hardware.profile import GemmTiling, Hardware


@dataclass(frozen=True, slots=True)
class GemmRates:
    """How one GEMM kernel runs: its class, main-loop FLOP/s, fixed time per tile and the HBM
    bandwidth it streams at."""

    kernel_class: str  # "flat" (no classes in the profile), "dense", "fp4_block_scaled",
    # "weight_only", each with a "grouped_" prefix for MoE expert GEMMs
    flops_per_s: float
    tile_fixed_s: float
    hbm_bytes_per_s: float
    tile_m_min: int | None = None  # smallest CTA tile M (None: the chip's small tile)
    split_k: bool = True
    launch_fixed_s: float = 0.0  # per launch beyond the launch cost (weight-only kernels)
    tile_m_small: int | None = None  # the kernel's own small tile M (None: the chip's)
    # Grouped kernels with a token tile: rows rounded up to a power of two in [lo, hi]
    token_tile_m: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class GemmKernelTime:
    """One launch's main-loop and streaming seconds, and whether they add instead of overlap.

    `serial`: a kernel that does not split K, launched as one partial wave, gives each CTA one
    tile whose whole K loop it runs alone on its SM. There is no next tile whose loads could
    hide this one's MMAs, and one CTA per SM keeps too few bytes in flight to cover HBM latency,
    so each K stage waits for its load: the launch takes compute + memory, not the larger.
    Fitted to 34 published small-M FP4 rows (tests/data/gemm_kernel_rows.csv): the sum lands
    at median 7% against 30% for the max (which misses every M <= 256 row by 30-50%); a
    bandwidth throttle by active SMs (the former model) fits the 64-CTA GEMVs but predicts
    the 4-20 CTA ones (flashinfer PR #2540) 70-110% too slow.
    """

    compute_s: float
    memory_s: float
    serial: bool = False

    @property
    def time_s(self) -> float:
        if self.serial:
            return self.compute_s + self.memory_s
        return max(self.compute_s, self.memory_s)


def gemm_rates(
    hw: Hardware,
    tensor_format: str,
    weights_native: bool = True,
    rows_per_group: int = 0,
    grouped: bool = False,
    weights: str = "",
) -> GemmRates:
    """The kernel class of a GEMM whose MMA runs at `tensor_format`. `weights_native`: the
    chip's tensor cores read the weight format directly (FP4 weights on Blackwell, also mixed
    with FP8 activations); False for int4, or FP4 on Hopper, which the kernel dequantizes
    (weight-only class). `rows_per_group`: rows each expert multiplies (grouped MoE GEMMs);
    `weights`: the weight format, which picks a grouped kernel with a token tile where the
    profile names one for it."""
    peak = hw.dense_flops_per_s[tensor_format]
    classes = hw.gemm_classes
    if classes is None:
        return GemmRates(
            "flat",
            peak * hw.gemm_compute_fraction,
            0.0,
            hw.hbm_bytes_per_s * hw.hbm_bandwidth_fraction,
        )
    cls, name, hbm = classes.dense, "dense", classes.dense.hbm_fraction
    launch_fixed, tile_m_small, token_tile = 0.0, None, None
    split_k = cls.split_k
    if tensor_format == "fp4" and classes.fp4_block_scaled is not None:
        cls, name = classes.fp4_block_scaled, "fp4_block_scaled"
        hbm, split_k = cls.hbm_fraction, cls.split_k
        if not grouped and classes.fp4_dense_split_k is not None:
            split_k = classes.fp4_dense_split_k  # the engine's own dense FP4 kernels
    elif not weights_native:
        name, hbm = "weight_only", classes.weight_only_hbm_fraction
        launch_fixed = classes.weight_only_launch_fixed_s
        tile_m_small = classes.weight_only_tile_m
    fraction = cls.compute_fraction[tensor_format]
    if grouped:
        name = "grouped_" + name
        fraction *= classes.grouped_compute_multiplier(max(1, rows_per_group))
        # A grouped MoE kernel streams at its own measured rate (whole-block MoE rows); a
        # weight-only one still pays its dequantizing main loop, whichever is slower.
        hbm = (
            classes.grouped_hbm_fraction
            if weights_native
            else min(hbm, classes.grouped_hbm_fraction)
        )
        if weights in classes.grouped_token_tile_weights:
            token_tile = classes.grouped_token_tile_m
    return GemmRates(
        name,
        peak * fraction,
        cls.tile_fixed_s,
        hw.hbm_bytes_per_s * hbm,
        None if token_tile else cls.tile_m_min,
        split_k,
        launch_fixed,
        tile_m_small,
        token_tile,
    )


def tiled_gemm(
    m: int,
    n: int,
    k: int,
    flops_per_s: float,
    sm_count: int,
    tiles: GemmTiling,
    tile_fixed_s: float = 0.0,
    tile_m_min: int | None = None,
    split_k: bool = True,
    tile_m_small: int | None = None,
    token_tile_m: tuple[int, int] | None = None,
) -> tuple[float, int]:
    """(compute seconds, CTAs launched) of an M x N x K GEMM, tile- and wave-quantized, at an
    achievable main-loop rate, each CTA paying `tile_fixed_s` per tile it computes.
    `token_tile_m` (lo, hi): the kernel's M tile is M rounded up to a power of two within
    [lo, hi] (swap-AB MoE kernels' token tile) instead of the chip's tiles."""
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0, 0
    small = tiles.m_small if tile_m_small is None else tile_m_small
    small = small if tile_m_min is None else max(small, tile_m_min)
    if token_tile_m is not None:
        lo, hi = token_tile_m
        tm = min(max(1 << (m - 1).bit_length(), lo), hi)
    else:
        tm = small if m <= small else max(tiles.m, small)
    count = math.ceil(m / tm) * math.ceil(n / tiles.n)
    per_sm_flops_per_s = flops_per_s / sm_count
    tile_flops = 2.0 * tm * tiles.n * k
    if count >= sm_count:
        waves = math.ceil(count / sm_count)
        return waves * (tile_flops / per_sm_flops_per_s + tile_fixed_s), count
    split = max(1, min(sm_count // count, k // tiles.min_split_k)) if split_k else 1
    time_s = 2.0 * tm * tiles.n * math.ceil(k / split) / per_sm_flops_per_s + tile_fixed_s
    return time_s, count * split


def gemm_kernel_s(
    hw: Hardware,
    rates: GemmRates,
    m: int,
    n: int,
    k: int,
    groups: int,
    weight_bytes: float,
    act_bytes: float,
) -> GemmKernelTime:
    """Compute and memory seconds of one launch of `groups` M x N x K GEMMs at `rates`."""
    compute_s, ctas = tiled_gemm(
        m,
        n * groups,
        k,
        rates.flops_per_s,
        hw.sm_count,
        hw.gemm_tiling,
        rates.tile_fixed_s,
        rates.tile_m_min,
        rates.split_k,
        rates.tile_m_small,
        rates.token_tile_m,
    )
    memory_s = gemm_bytes(m, n, k, weight_bytes, act_bytes) * groups / rates.hbm_bytes_per_s
    serial = not rates.split_k and 0 < ctas < hw.sm_count
    return GemmKernelTime(compute_s, memory_s, serial)


def gemm_bytes(m: int, n: int, k: int, weight_bytes: float, act_bytes: float) -> float:
    """HBM traffic: the weight matrix once, activations in, BF16 activations out."""
    return n * k * weight_bytes + m * k * act_bytes + m * n * 2.0
