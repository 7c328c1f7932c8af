"""One configured chip: a model on a GPU under a layout and formats, its effective rates, and
the one-kernel costs (a GEMM, an elementwise pass, a collective) every operator list builds on.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.cost.gemm import GemmRates, gemm_bytes, gemm_kernel_s, gemm_rates
from simulator.cost.layout import Formats, ParallelLayout, check_formats, check_layout
from simulator.cost.ops import OpCost, roofline
from simulator.hardware.profile import Hardware
from simulator.model.architecture import Architecture
from simulator.model.precision import (
    BF16_BYTES,
    attention_tensor_format,
    gemm_tensor_format,
    get_format,
)


@dataclass(frozen=True)
class Kernels:
    """The configuration a step is costed under; checks the layout and formats once."""

    arch: Architecture
    hw: Hardware
    layout: ParallelLayout
    formats: Formats
    comm_overlap: float = 0.0  # fraction of communication hidden under compute (assumption)
    # Shares of all routed token-expert pairs on the busiest EP rank's expert slots
    # (cost/moe_routing.py); None is uniform routing.
    expert_slots: tuple[float, ...] | None = None
    # deployment.moe_kernel "unfused": every expert this GPU holds runs as its own MLP over all
    # of the step's tokens, its output masked by the routing weight (vLLM's Mixtral before the
    # fused MoE kernel, PR #2542), instead of a grouped GEMM over the tokens routed to it.
    moe_unfused: bool = False
    # The busiest EP rank of a random routing draw sets the MoE time (cost/moe_routing.py
    # busiest_rank); False costs the mean rank's counts instead (REPORT.md's ablation switch).
    routing_scatter: bool = True

    def __post_init__(self) -> None:
        check_layout(self.arch, self.layout)
        check_formats(self.hw, self.formats)
        if not 0.0 <= self.comm_overlap <= 1.0:
            raise ValueError(f"comm_overlap must be in [0, 1] (got {self.comm_overlap})")

    # ---- rates -------------------------------------------------------------------------

    @property
    def gemm_format(self) -> str:
        supported = frozenset(self.hw.dense_flops_per_s)
        return gemm_tensor_format(self.formats.weights, self.formats.activations, supported)

    @property
    def gemm_flops_per_s(self) -> float:
        return self.hw.dense_flops_per_s[self.gemm_format] * self.hw.gemm_compute_fraction

    @property
    def bf16_gemm_flops_per_s(self) -> float:
        fmt = attention_tensor_format(frozenset(self.hw.dense_flops_per_s))
        return self.hw.dense_flops_per_s[fmt] * self.hw.gemm_compute_fraction

    @property
    def attention_flops_per_s(self) -> float:
        fmt = attention_tensor_format(frozenset(self.hw.dense_flops_per_s))
        return self.hw.dense_flops_per_s[fmt] * self.hw.attention_compute_fraction

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hw.hbm_bytes_per_s * self.hw.hbm_bandwidth_fraction

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity above which a GEMM is compute-bound on this chip."""
        return self.gemm_flops_per_s / self.hbm_bytes_per_s

    # ---- building blocks ---------------------------------------------------------------

    def gemm(
        self,
        op: str,
        m: int,
        n: int,
        k: int,
        layers: int,
        groups: int = 1,
        bf16: bool = False,
    ) -> OpCost:
        """`groups` same-shape GEMMs (MoE experts) launched as one grouped kernel per layer,
        costed through its kernel class (`gemm_rates`)."""
        rates = self.gemm_class(m, groups, bf16)
        if bf16:
            wb, ab = BF16_BYTES, BF16_BYTES
        else:
            wb = get_format(self.formats.weights).bytes_per_element
            ab = min(get_format(self.formats.activations).bytes_per_element, BF16_BYTES)
        flops = 2.0 * m * n * k * groups * layers
        nbytes = gemm_bytes(m, n, k, wb, ab) * groups * layers
        kernel = gemm_kernel_s(self.hw, rates, m, n, k, groups, wb, ab)
        return roofline(
            op,
            flops,
            nbytes,
            rates.flops_per_s,
            rates.hbm_bytes_per_s,
            layers,
            self.hw.kernel_launch_overhead_s + rates.launch_fixed_s,
            kernel.compute_s * layers,
            kernel.memory_s * layers,
            kernel.serial,
        )

    def gemm_class(self, m: int, groups: int = 1, bf16: bool = False) -> GemmRates:
        """Kernel class and rates of a GEMM of `m` rows per group (BF16 modules: dense BF16)."""
        if bf16:
            fmt = attention_tensor_format(frozenset(self.hw.dense_flops_per_s))
            return gemm_rates(self.hw, fmt, True, m, groups > 1)
        native = get_format(self.formats.weights).tensor_format
        weights_native = native is not None and self.hw.supports(native)
        return gemm_rates(self.hw, self.gemm_format, weights_native, m, groups > 1,
                          self.formats.weights)

    def elementwise(self, op: str, nbytes: float, kernels: int) -> OpCost:
        return roofline(
            op,
            0.0,
            nbytes,
            1.0,
            self.hbm_bytes_per_s,
            kernels,
            self.hw.kernel_launch_overhead_s,
            compute_s=0.0,
        )

    def moe_block_fixed(self, layers: int) -> OpCost | None:
        """The MoE expert path's fixed latency per layer beyond its kernels' launches (routing,
        activation quantization, finalize; the grouped class's `block_fixed_us`), or None
        where the chip's classes charge none. Counted as overhead, like a launch."""
        classes = self.hw.gemm_classes
        if classes is None or classes.moe_block_fixed_s <= 0.0 or layers <= 0:
            return None
        t = layers * classes.moe_block_fixed_s
        return OpCost(
            op="moe_block_fixed",
            flops=0.0,
            bytes=0.0,
            time_s=t,
            launch_s=t,
            bound="memory",
            kernels=0,
        )

    def comm(self, op: str, time_s: float, nbytes: float) -> OpCost:
        t = time_s * (1.0 - self.comm_overlap)
        return OpCost(op, 0.0, nbytes, t, 0.0, "communication", 0)
