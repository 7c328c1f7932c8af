"""The GPU profile as one engine's kernels see it: the engine style (or the deployment's
overhead) replaces or adds to the profile's values where the engine runs kernels of its own
(its all-reduce, its FP8 MoE expert path, its dense FP4 GEMMs' split-K tactic)."""

from __future__ import annotations

from dataclasses import replace

from simulator.engines.style import EngineStyle
from simulator.hardware.profile import Hardware
from simulator.inputs.deployment import Overhead
from simulator.model.architecture import Architecture


def engine_hardware(hw: Hardware, arch: Architecture, weights: str, style: EngineStyle,
                    overhead: Overhead | None) -> Hardware:
    """The profile with each of the engine's kernel values applied."""
    hw = with_engine_collectives(hw, style.allreduce_latency_per_peer_s, overhead)
    hw = with_engine_fp4_gemms(hw, style.fp4_gemm_split_k)
    return with_engine_fp8_moe(hw, arch, weights, style.moe_fp8_block_fixed_s, overhead)


def _overhead_or_style(overhead: Overhead | None, field: str, style_value: float | None
                       ) -> float | None:
    """The deployment overhead's `field` where it sets one, else the style's value."""
    value = None if overhead is None else getattr(overhead, field)
    return style_value if value is None else float(value)


def with_engine_collectives(hw: Hardware, style_per_peer_s: float | None,
                             overhead: Overhead | None) -> Hardware:
    """The GPU profile as the engine's collectives see it: the per-peer latency of its
    all-reduce kernels from the deployment's overhead, else its style, else the profile's."""
    per_peer_s = _overhead_or_style(overhead, "allreduce_latency_per_peer_s", style_per_peer_s)
    if per_peer_s is None or per_peer_s == hw.allreduce_latency_per_peer_s:
        return hw
    return replace(hw, allreduce_latency_per_peer_s=per_peer_s)


def with_engine_fp8_moe(hw: Hardware, arch: Architecture, weights: str, style_s: float,
                         overhead: Overhead | None) -> Hardware:
    """The GPU profile as the engine's FP8 MoE expert path sees it: the grouped class's fixed
    latency per MoE layer plus the engine's own (its overhead's, else its style's), for FP8
    expert weights; unchanged for other formats, dense models, or a profile without classes."""
    extra_s = _overhead_or_style(overhead, "moe_fp8_block_fixed_s", style_s) or 0.0
    classes = hw.gemm_classes
    if extra_s <= 0.0 or weights != "fp8" or arch.moe is None or classes is None:
        return hw
    return replace(hw, gemm_classes=replace(
        classes, moe_block_fixed_s=classes.moe_block_fixed_s + extra_s))


def with_engine_fp4_gemms(hw: Hardware, split_k: bool | None) -> Hardware:
    """The GPU profile as the engine's dense block-scaled FP4 GEMMs see it: split K or not as
    the engine's kernels do, else as the profile's FP4 class says (MoE expert GEMMs keep the
    class's: their grouped kernels are another code path)."""
    classes = hw.gemm_classes
    if split_k is None or classes is None or classes.fp4_block_scaled is None:
        return hw
    if classes.fp4_block_scaled.split_k == split_k and classes.fp4_dense_split_k is None:
        return hw
    return replace(hw, gemm_classes=replace(classes, fp4_dense_split_k=split_k))
