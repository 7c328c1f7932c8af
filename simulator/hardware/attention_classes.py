"""Attention kernel classes of one chip: how the attention kernel an architecture runs moves
its efficiency off the generic FlashAttention-class figures of the `efficiency:` block.

Prefill kernels lose throughput at small head dims (each K/V tile feeds fewer MMA FLOPs per
softmax step: head dim 64 against 128); MLA prefill runs non-absorbed on up-projected heads
(d_qk 192, d_v 128) through its own kernel; absorbed MLA decode (FlashMLA: all query heads
share one latent KV head, d 576 / 512) streams the latent cache and reaches tensor-core rates
the generic GQA decode kernels do not. The block is data in the hardware profile
(`attention_classes:`); absent, or with FRONTIER_KERNEL_MODEL=flat, attention keeps the
generic fractions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import Field, model_validator

from simulator.hardware.gemm_classes import kernel_classes_off, log_interp
from simulator.hardware.spec_base import StrictSpec

Fraction1 = Annotated[float, Field(gt=0, le=1)]




class MLADecodeSpec(StrictSpec):
    compute_fraction: Fraction1  # of the BF16 peak
    hbm_fraction: Fraction1


class AttentionClassesSpec(StrictSpec):
    # Prefill throughput relative to head dim 128 (the efficiency block's figure), by the
    # query-key head dim, log-linear between points, flat beyond the ends.
    prefill_head_dims: list[Annotated[int, Field(gt=0)]]
    prefill_multiplier: list[Annotated[float, Field(gt=0, le=1.5)]]
    mla_prefill_multiplier: Annotated[float, Field(gt=0, le=1.5)]
    mla_decode: MLADecodeSpec | None = None  # None: MLA decode on the generic decode line
    source: str

    @model_validator(mode="after")
    def _curve(self) -> AttentionClassesSpec:
        xs = self.prefill_head_dims
        if not xs or len(xs) != len(self.prefill_multiplier):
            raise ValueError("prefill_head_dims and prefill_multiplier need equal, non-zero length")
        if any(xs[i + 1] <= xs[i] for i in range(len(xs) - 1)):
            raise ValueError("prefill_head_dims must increase strictly")
        return self


class AttentionKernelsSpec(StrictSpec):
    """Prefill attention kernels a deployment may name (deployment.attention_kernel) instead
    of the one the efficiency block's attention_compute_fraction measures, each with its own
    fraction of the BF16 peak; decode attention keeps its line (no published per-kernel
    decode figure is used)."""

    default_prefill: Annotated[str, Field(min_length=1)]  # the efficiency block's kernel
    prefill_compute_fraction: dict[str, Fraction1]  # other kernels, fraction of BF16 peak
    source: str


@dataclass(frozen=True, slots=True)
class AttentionClasses:
    prefill_head_dims: tuple[int, ...]
    prefill_multiplier: tuple[float, ...]
    mla_prefill_multiplier: float
    mla_decode_compute_fraction: float | None
    mla_decode_hbm_fraction: float | None

    def head_dim_multiplier(self, head_dim: int) -> float:
        """Log-linear in the head dim between the measured points, flat beyond."""
        xs = tuple(float(x) for x in self.prefill_head_dims)
        return log_interp(xs, self.prefill_multiplier, head_dim)

    def scaled(self, fraction_factor: float) -> AttentionClasses:
        """The MLA decode fractions (absolute) times `fraction_factor`, capped at 1, for the
        uncertainty band; the prefill multipliers are relative to fractions it scales anyway."""
        c, h = self.mla_decode_compute_fraction, self.mla_decode_hbm_fraction
        return AttentionClasses(
            self.prefill_head_dims,
            self.prefill_multiplier,
            self.mla_prefill_multiplier,
            None if c is None else min(1.0, c * fraction_factor),
            None if h is None else min(1.0, h * fraction_factor),
        )


def to_attention_classes(spec: AttentionClassesSpec | None) -> AttentionClasses | None:
    """SI form of the block; None when absent or switched off by FRONTIER_KERNEL_MODEL=flat."""
    if spec is None or kernel_classes_off():
        return None
    d = spec.mla_decode
    return AttentionClasses(
        tuple(spec.prefill_head_dims),
        tuple(spec.prefill_multiplier),
        spec.mla_prefill_multiplier,
        None if d is None else d.compute_fraction,
        None if d is None else d.hbm_fraction,
    )
