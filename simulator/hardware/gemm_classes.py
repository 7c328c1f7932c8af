"""GEMM kernel classes of one chip: how far each kind of GEMM kernel gets from the roofline.

One flat fraction of peak treats every GEMM alike. Serving runs different kernels whose
efficiency differs by class and format: dense cuBLAS/CUTLASS/DeepGEMM GEMMs, grouped MoE expert
GEMMs (worse with few rows per expert), FP4 block-scaled GEMMs on Blackwell, and weight-only
kernels that dequantize 4-bit weights to the activation format on chips without FP4 tensor
cores. Each class is data in the hardware profile (`gemm_classes:` block); this module holds its
schema and SI form. Without the block (or with FRONTIER_KERNEL_MODEL=flat) the cost model falls
back to the flat `gemm_compute_fraction` / `hbm_bandwidth_fraction`.
"""

from __future__ import annotations

import bisect
import math
import os
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field, model_validator

from simulator.hardware.spec_base import StrictSpec

Fraction1 = Annotated[float, Field(gt=0, le=1)]
NonNegative = Annotated[float, Field(ge=0)]
ClassFormat = Literal["bf16", "fp16", "fp8", "int8", "fp4", "tf32", "fp64"]

# Environment switch: "flat" ignores every profile's gemm_classes block (the model before
# kernel classes, for before/after comparisons); "classes" (default) uses it where present.
KERNEL_MODEL_ENV = "FRONTIER_KERNEL_MODEL"


# The profile key paths that set the streaming rate (fraction of HBM bandwidth) of each kernel
# class name cost/gemm.py `gemm_rates` reports, as that function picks them: a native grouped
# MoE GEMM streams at the grouped class's rate whatever its format class, a grouped weight-only
# one at the slower of its own and the grouped rate. What a calibration of a GPU's streaming
# factors moves for a run whose GEMMs run through these classes ("flat": no classes, none).
STREAMING_KEY_PATHS: dict[str, tuple[str, ...]] = {
    "dense": ("gemm_classes.dense.hbm_fraction",),
    "fp4_block_scaled": ("gemm_classes.fp4_block_scaled.hbm_fraction",),
    "weight_only": ("gemm_classes.weight_only.hbm_fraction",),
    "grouped_dense": ("gemm_classes.grouped.hbm_fraction",),
    "grouped_fp4_block_scaled": ("gemm_classes.grouped.hbm_fraction",),
    "grouped_weight_only": ("gemm_classes.weight_only.hbm_fraction",
                            "gemm_classes.grouped.hbm_fraction"),
    "flat": (),
}


def kernel_classes_off() -> bool:
    """FRONTIER_KERNEL_MODEL=flat: cost kernels with the flat fractions (the ablation switch)."""
    return os.environ.get(KERNEL_MODEL_ENV, "classes") == "flat"


def log_interp(xs: tuple[float, ...], ys: tuple[float, ...], x: float) -> float:
    """ys at x, piecewise-linear in log2(x) between the points, flat beyond the ends."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect.bisect_right(xs, x)
    t = (math.log2(x) - math.log2(xs[i - 1])) / (math.log2(xs[i]) - math.log2(xs[i - 1]))
    return ys[i - 1] + t * (ys[i] - ys[i - 1])




class TiledClassSpec(StrictSpec):
    """A tiled tensor-core GEMM kernel: main-loop fraction of peak, fixed time per tile, and
    the fraction of HBM bandwidth it streams at when memory-bound."""

    compute_fraction: dict[ClassFormat, Fraction1]  # of the format's dense peak, main loop
    tile_fixed_us: NonNegative  # prologue (pipeline fill) + epilogue per output tile per CTA
    hbm_fraction: Fraction1
    # Smallest CTA tile M the class's MMA allows (None: the chip's gemm_tile_m_small) and
    # whether its kernels split K to fill the chip when there are fewer tiles than SMs.
    tile_m_min: Annotated[int, Field(gt=0)] | None = None
    split_k: bool = True


class WeightOnlySpec(StrictSpec):
    """Weight-only kernels (4-bit weights, wider activations): the MMA runs at the activation
    format through the dense class; dequantizing the weights in the main loop lowers the rate
    at which the packed weights stream."""

    hbm_fraction: Fraction1
    # Fixed latency per launch on top of the launch cost (the split-K partial sums reduced
    # in turn through L2 before the dequantized tile is written), fitted with hbm_fraction.
    launch_fixed_us: NonNegative = 0.0
    # Rows of the kernel's MMA tile when it is smaller than the chip's small GEMM tile
    # (Marlin-class kernels issue mma.sync m16n8k16: 16-row tiles); None: the chip's.
    tile_m: Annotated[int, Field(gt=0)] | None = None


class GroupedSpec(StrictSpec):
    """Grouped MoE expert GEMMs: a multiplier on the format class's compute fraction by rows
    per expert, interpolated in log2(rows) between the points, flat beyond the ends."""

    rows_per_expert: list[Annotated[float, Field(gt=0)]]
    compute_multiplier: list[Annotated[float, Field(gt=0, le=1)]]
    hbm_fraction: Fraction1
    # Fixed time of one MoE layer's expert path beyond its kernels' launch costs (routing,
    # activation quantization, finalize, and the dependent launches' pipeline fill), fitted to
    # whole-block MoE kernel rows; 0 where the chip's rows need none.
    block_fixed_us: NonNegative = 0.0
    # The token tile of MoE kernels that put tokens on the MMA's N side (swap-AB): rows per
    # expert rounded up to a power of two within [smallest, largest]; None: the format class's
    # tiles (the chip's small tile, the class's tile_m_min).
    token_tile_m: list[Annotated[int, Field(gt=0)]] | None = None
    # The weight formats whose grouped GEMMs run such kernels (the others keep the class tiles).
    token_tile_weights: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _curve(self) -> GroupedSpec:
        tile = self.token_tile_m
        if tile is not None:
            if len(tile) != 2 or tile[0] > tile[1] or any(t & (t - 1) for t in tile):
                raise ValueError("token_tile_m must be [smallest, largest], powers of two, "
                                 "smallest <= largest")
            if not self.token_tile_weights:
                raise ValueError("token_tile_m needs token_tile_weights (the weight formats "
                                 "whose MoE kernels use it)")
        if len(self.rows_per_expert) != len(self.compute_multiplier):
            raise ValueError("rows_per_expert and compute_multiplier must have the same length")
        if not self.rows_per_expert:
            raise ValueError("rows_per_expert needs at least one point")
        xs = self.rows_per_expert
        if any(xs[i + 1] <= xs[i] for i in range(len(xs) - 1)):
            raise ValueError("rows_per_expert must increase strictly")
        return self


class GemmClassesSpec(StrictSpec):
    dense: TiledClassSpec
    grouped: GroupedSpec
    weight_only: WeightOnlySpec
    fp4_block_scaled: TiledClassSpec | None = None  # chips with FP4 tensor cores
    source: str


@dataclass(frozen=True, slots=True)
class TiledClass:
    compute_fraction: dict[str, float]
    tile_fixed_s: float
    hbm_fraction: float
    tile_m_min: int | None = None
    split_k: bool = True


@dataclass(frozen=True, slots=True)
class GemmClasses:
    """What cost/gemm.py reads: one tiled class per format family, the grouped curve and the
    weight-only streaming fraction."""

    dense: TiledClass
    fp4_block_scaled: TiledClass | None
    weight_only_hbm_fraction: float
    grouped_rows: tuple[float, ...]
    grouped_multiplier: tuple[float, ...]
    grouped_hbm_fraction: float
    moe_block_fixed_s: float = 0.0
    weight_only_launch_fixed_s: float = 0.0
    weight_only_tile_m: int | None = None
    grouped_token_tile_m: tuple[int, int] | None = None
    grouped_token_tile_weights: frozenset[str] = frozenset()
    # Whether an engine's dense (not grouped) FP4 GEMMs split K, set from its style
    # (serving/engine_build.py); None: the FP4 class's own split_k.
    fp4_dense_split_k: bool | None = None

    def grouped_compute_multiplier(self, rows_per_expert: float) -> float:
        """Piecewise-linear in log2(rows per expert), flat beyond the measured ends."""
        return log_interp(self.grouped_rows, self.grouped_multiplier, rows_per_expert)

    def scaled(self, fraction_factor: float, fixed_factor: float) -> GemmClasses:
        """Every fraction times `fraction_factor` (capped at 1), every fixed cost times
        `fixed_factor`: the uncertainty band's pessimistic/optimistic copies."""

        def f(x: float) -> float:
            return min(1.0, x * fraction_factor)

        def tiled(c: TiledClass) -> TiledClass:
            return TiledClass(
                {k: f(v) for k, v in c.compute_fraction.items()},
                c.tile_fixed_s * fixed_factor,
                f(c.hbm_fraction),
                c.tile_m_min,
                c.split_k,
            )

        return GemmClasses(
            tiled(self.dense),
            None if self.fp4_block_scaled is None else tiled(self.fp4_block_scaled),
            f(self.weight_only_hbm_fraction),
            self.grouped_rows,
            self.grouped_multiplier,
            f(self.grouped_hbm_fraction),
            self.moe_block_fixed_s * fixed_factor,
            self.weight_only_launch_fixed_s * fixed_factor,
            self.weight_only_tile_m,
            self.grouped_token_tile_m,
            self.grouped_token_tile_weights,
            self.fp4_dense_split_k,
        )


def _tiled(spec: TiledClassSpec) -> TiledClass:
    return TiledClass(
        {str(k): v for k, v in spec.compute_fraction.items()},
        spec.tile_fixed_us * 1e-6,
        spec.hbm_fraction,
        spec.tile_m_min,
        spec.split_k,
    )


def to_gemm_classes(spec: GemmClassesSpec | None) -> GemmClasses | None:
    """SI form of the block; None (the flat model) when absent or switched off by the env."""
    if spec is None or kernel_classes_off():
        return None
    g = spec.grouped
    return GemmClasses(
        _tiled(spec.dense),
        None if spec.fp4_block_scaled is None else _tiled(spec.fp4_block_scaled),
        spec.weight_only.hbm_fraction,
        tuple(g.rows_per_expert),
        tuple(g.compute_multiplier),
        g.hbm_fraction,
        g.block_fixed_us * 1e-6,
        spec.weight_only.launch_fixed_us * 1e-6,
        spec.weight_only.tile_m,
        None if g.token_tile_m is None else (g.token_tile_m[0], g.token_tile_m[1]),
        frozenset(g.token_tile_weights),
    )


def check_formats(spec: GemmClassesSpec, tensor_formats: set[str]) -> str | None:
    """The first problem between the classes and the chip's tensor formats, or None."""
    dense_needs = tensor_formats - {"fp4"}
    missing = sorted(dense_needs - set(spec.dense.compute_fraction))
    if missing:
        return f"gemm_classes.dense.compute_fraction lacks {', '.join(missing)}"
    if "fp4" in tensor_formats:
        fp4 = spec.fp4_block_scaled
        if fp4 is None or "fp4" not in fp4.compute_fraction:
            return "gemm_classes.fp4_block_scaled.compute_fraction needs fp4 on an FP4 chip"
    elif spec.fp4_block_scaled is not None:
        return "gemm_classes.fp4_block_scaled is set but compute.dense_tflops has no fp4"
    return None
