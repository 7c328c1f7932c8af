"""Number formats: storage bits (scales included) and which tensor-core rate a GEMM runs at.

Storage sizes are exact format definitions (OCP MX spec, NVIDIA NVFP4, AWQ/GPTQ groups), not
measurements. The GEMM rule is the one real kernels follow: the matmul runs at the wider of the
two operand formats, and a format the chip cannot multiply natively is dequantized to the
next wider one it can (FP4 weights on Hopper run at FP8 or BF16).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FormatName = Literal["bf16", "fp16", "fp8", "mxfp4", "nvfp4", "int8", "int4"]
FORMAT_NAMES: tuple[FormatName, ...] = ("bf16", "fp16", "fp8", "mxfp4", "nvfp4", "int8", "int4")


@dataclass(frozen=True, slots=True)
class NumberFormat:
    """One storage format. `tensor_format` is the tensor-core kind that can consume it directly;
    None means weight-only (always dequantized before the multiply)."""

    name: str
    bits_per_element: float  # element bits plus amortized scale bits
    tensor_format: str | None

    @property
    def bytes_per_element(self) -> float:
        return self.bits_per_element / 8.0


FORMATS: dict[str, NumberFormat] = {
    "bf16": NumberFormat("bf16", 16.0, "bf16"),
    "fp16": NumberFormat("fp16", 16.0, "fp16"),
    # e4m3 with one FP32 scale per 128x128 weight block (DeepSeek-V3 style); per-tensor scales
    # are a single number. 32 / 16384 bits per element is the block-scale overhead.
    "fp8": NumberFormat("fp8", 8.0 + 32.0 / (128 * 128), "fp8"),
    # OCP MX: 32 e2m1 elements share one 8-bit E8M0 scale -> 4 + 8/32 = 4.25 bits.
    "mxfp4": NumberFormat("mxfp4", 4.0 + 8.0 / 32, "fp4"),
    # NVFP4: 16 e2m1 elements share one FP8 (e4m3) scale, plus one FP32 per tensor (negligible).
    "nvfp4": NumberFormat("nvfp4", 4.0 + 8.0 / 16, "fp4"),
    # int8 with per-channel scales (SmoothQuant style): scale overhead negligible.
    "int8": NumberFormat("int8", 8.0, "int8"),
    # AWQ/GPTQ: 4-bit weights, one FP16 scale per group of 128 -> 4 + 16/128 = 4.125 bits.
    "int4": NumberFormat("int4", 4.0 + 16.0 / 128, None),
}

# Activations between kernels, norms, embeddings and collectives move in BF16; logits in FP32.
BF16_BYTES = FORMATS["bf16"].bytes_per_element
FP32_BYTES = 4.0

# Wider formats a chip falls back to when it lacks a tensor format (dequantize, then multiply).
_PROMOTION: dict[str, tuple[str, ...]] = {
    "fp4": ("fp4", "fp8", "bf16"),
    "fp8": ("fp8", "bf16"),
    "int8": ("int8", "bf16"),
    "fp16": ("fp16", "bf16"),
    "bf16": ("bf16", "fp16"),
}
_TENSOR_BITS = {"fp4": 4, "fp8": 8, "int8": 8, "fp16": 16, "bf16": 16}


def get_format(name: str) -> NumberFormat:
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown number format {name!r} (valid: {', '.join(FORMATS)})") from None


def _wider(a: str, b: str) -> str:
    """The tensor format a multiply of operands a and b runs at before hardware promotion."""
    if a == b:
        return a
    bits_a, bits_b = _TENSOR_BITS[a], _TENSOR_BITS[b]
    if bits_a != bits_b:
        return a if bits_a > bits_b else b
    # Same width, different kinds (fp8 x int8, fp16 x bf16): no mixed kernel, go to bf16.
    return "bf16"


def gemm_tensor_format(weights: str, activations: str, supported: frozenset[str]) -> str:
    """Tensor-core format a weights x activations GEMM runs at on a chip with `supported`.

    Weight-only formats (int4) multiply at the activation format; FP4 on Hopper has no tensor
    cores, so it is dequantized and multiplied at the activation format (or wider).
    """
    w = get_format(weights).tensor_format
    a = get_format(activations).tensor_format
    if a is None:
        raise ValueError(f"{activations!r} is a weight-only format and cannot hold activations")
    wanted = a if w is None else _wider(w, a)
    for candidate in _PROMOTION[wanted]:
        if candidate in supported:
            return candidate
    raise ValueError(
        f"chip supports none of {_PROMOTION[wanted]} for a {weights} x {activations} GEMM"
    )


def attention_tensor_format(supported: frozenset[str]) -> str:
    """Attention matmuls run at BF16 whatever the KV format: serving kernels dequantize FP8/FP4
    KV to BF16 before the MMA (FlashMLA's FP8 sparse kernel does exactly this, per its deep-dive
    note in shared/reference/kernel_microbenchmarks.csv). Low-bit KV saves bytes, not FLOPs."""
    return "bf16" if "bf16" in supported else "fp16"
