"""The parallel layout and number formats of one engine: what a step-cost model is built for."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.hardware.profile import Hardware
from simulator.model.architecture import Architecture
from simulator.model.precision import get_format


class LayoutError(ValueError):
    """A parallel layout that this model cannot be split into."""


@dataclass(frozen=True, slots=True)
class ParallelLayout:
    """GPUs of one engine replica = tp x pp x attention_dp; MoE experts spread over ep of them."""

    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    attention_data_parallel: int = 1
    expert_parallel: int = 1
    redundant_experts: int = 0  # EPLB-style extra expert slots, spread evenly over EP ranks
    # Attention-DP MoE layers dispatch and combine tokens all-to-all (DeepEP-style) instead of
    # gathering every rank's tokens on every GPU and scattering them back.
    moe_all_to_all: bool = False

    @property
    def gpus(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel * self.attention_data_parallel

    @property
    def mlp_group(self) -> int:
        """GPUs that share one stage's MLP/MoE work: attention-DP ranks join for the FFN."""
        return self.tensor_parallel * self.attention_data_parallel


@dataclass(frozen=True, slots=True)
class Formats:
    weights: str = "bf16"
    activations: str = "bf16"
    kv_cache: str = "bf16"


def check_layout(arch: Architecture, layout: ParallelLayout) -> None:
    """Raise LayoutError with one sentence when the heads, layers or experts do not split."""
    tp = layout.tensor_parallel
    for name, value in (
        ("tensor_parallel", tp),
        ("pipeline_parallel", layout.pipeline_parallel),
        ("attention_data_parallel", layout.attention_data_parallel),
        ("expert_parallel", layout.expert_parallel),
    ):
        if value < 1:
            raise LayoutError(f"{name} must be >= 1 (got {value})")
    if arch.num_attention_heads % tp:
        valid = ", ".join(str(d) for d in divisors(arch.num_attention_heads))
        raise LayoutError(
            f"tensor_parallel {tp} does not divide the {arch.num_attention_heads} attention heads "
            f"of {arch.name} (valid: {valid})"
        )
    kv = arch.num_kv_heads
    if arch.mla is None and kv % tp and tp % kv:
        raise LayoutError(
            f"tensor_parallel {tp} and the {kv} KV heads of {arch.name} neither divide the other"
        )
    if layout.pipeline_parallel > arch.num_layers:
        raise LayoutError(
            f"pipeline_parallel {layout.pipeline_parallel} exceeds the {arch.num_layers} layers"
        )
    ep = layout.expert_parallel
    if layout.moe_all_to_all and (ep == 1 or layout.attention_data_parallel == 1):
        raise LayoutError(
            "an all-to-all MoE dispatch needs attention_data_parallel > 1 and expert_parallel > 1"
        )
    if ep > 1:
        if arch.moe is None:
            raise LayoutError(f"expert_parallel {ep} needs an MoE model; {arch.name} is dense")
        if arch.moe.num_experts % ep:
            raise LayoutError(
                f"expert_parallel {ep} does not divide the {arch.moe.num_experts} experts "
                f"of {arch.name}"
            )
        if layout.redundant_experts % ep:
            raise LayoutError(
                f"redundant_experts {layout.redundant_experts} must be a multiple of "
                f"expert_parallel {ep} so every EP rank holds the same number of experts"
            )
        if layout.mlp_group % ep:
            raise LayoutError(
                f"expert_parallel {ep} must divide tensor_parallel x attention_data_parallel "
                f"({layout.mlp_group})"
            )


def check_formats(hw: Hardware, formats: Formats) -> None:
    """Formats must exist; activations cannot be a weight-only format."""
    for name in (formats.weights, formats.activations, formats.kv_cache):
        get_format(name)
    if get_format(formats.activations).tensor_format is None:
        raise LayoutError(f"activations cannot be {formats.activations!r}: it is weight-only")


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def kv_heads_per_gpu(arch: Architecture, tp: int) -> int:
    """KV heads each TP rank stores; fewer KV heads than ranks are replicated, as vLLM does."""
    return max(1, arch.num_kv_heads // tp)
