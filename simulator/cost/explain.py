"""The teaching view: one step of one model on one GPU, operator by operator."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from simulator.cost import (
    BatchShape,
    Formats,
    MemoryBudget,
    ParallelLayout,
    StepCost,
    StepModel,
    memory_budget,
    require_fit,
)
from simulator.cost.format_chain import KVChain, format_notes, kv_chain
from simulator.cost.moe_routing import busiest_rank, rank_slots
from simulator.hardware.profile import Hardware, load_hardware
from simulator.model.architecture import Architecture
from simulator.model.load import load_architecture
from simulator.units import duration, si, table


def bound_of(s: StepCost) -> tuple[str, float]:
    """(what bounds a step, in words; that part's share of the step time)."""
    share = {
        "compute": s.compute_s,
        "memory": s.memory_s,
        "communication": s.communication_s,
        "overhead": s.overhead_s,
    }[s.bound] / s.step_time_s
    what = {
        "compute": "tensor-core throughput",
        "memory": "HBM bandwidth (streaming weights and KV cache)",
        "communication": "communication between GPUs",
        "overhead": "fixed per-kernel launch costs",
    }[s.bound]
    return what, share


def gemm_kernel_classes(model: StepModel, tokens: int) -> dict[str, str]:
    """The GEMM kernel class each kind of GEMM of a step of `tokens` tokens runs through:
    projections and MLP, MoE experts at their rows per expert, LM head (always BF16)."""
    a = model.arch

    def kept(group: str) -> str:  # the class of this step's GEMMs of one module group
        return model.gemm_class(tokens, bf16=a.keeps_bf16(group)).kernel_class

    out = {"attention_projections": kept("attention_in")}
    if a.num_dense_mlp_layers:
        out["dense_mlp"] = kept("dense_mlp")
    moe = a.moe
    if moe is not None and a.num_moe_layers:
        rows = max(1, tokens * moe.experts_per_token // moe.num_experts)
        out["moe_experts"] = model.gemm_class(rows, groups=2).kernel_class
    out["lm_head"] = model.gemm_class(tokens, bf16=True).kernel_class + " (bf16)"
    return out


@dataclass(frozen=True, slots=True)
class Explanation:
    arch: Architecture
    hw: Hardware
    model: StepModel
    batch: BatchShape
    step: StepCost
    memory: MemoryBudget
    # The KV-format chain at --context: this KV format first, then BF16 KV for contrast.
    kv_chains: tuple[KVChain, ...] = field(default=())

    def sentence(self) -> str:
        s = self.step
        what, share = bound_of(s)
        top = max(s.ops, key=lambda o: o.time_s)
        return (
            f"This step is bound by {what}: {share:.0%} of its {duration(s.step_time_s)}; "
            f"the largest operator is {top.op} ({top.time_s / s.step_time_s:.0%})."
        )

    def kernel_classes(self) -> dict[str, str]:
        """The GEMM kernel class (hardware profile `gemm_classes:`) each kind of GEMM in this
        step runs through: projections and MLP, MoE experts at their rows per expert, LM head."""
        return gemm_kernel_classes(self.model, self.batch.tokens)

    def expert_spread(self) -> dict[str, float] | None:
        """Under expert parallelism, what the busiest GPU's experts carry in this step against
        the mean GPU's (cost/moe_routing.py busiest_rank): None without EP or experts."""
        moe, ep = self.arch.moe, self.model.layout.expert_parallel
        tokens = self.batch.tokens
        if moe is None or ep <= 1 or tokens <= 0 or not self.model.routing_scatter:
            return None
        slots = rank_slots(moe.num_experts, ep, self.model.expert_slots)
        k = moe.experts_per_token
        hit, pairs = busiest_rank(slots, ep, k, tokens)
        mean_hit, mean_pairs = busiest_rank(slots, 1, k, tokens)
        return {"ranks": ep, "tokens": tokens, "local_experts": len(slots),
                "busiest_experts_hit": hit, "mean_experts_hit": mean_hit,
                "busiest_pairs": pairs, "mean_pairs": mean_pairs}

    def to_dict(self) -> dict[str, Any]:
        return {
            "step_time_s": self.step.step_time_s,
            "bound": self.step.bound,
            "totals": {
                "compute_s": self.step.compute_s,
                "memory_s": self.step.memory_s,
                "communication_s": self.step.communication_s,
                "overhead_s": self.step.overhead_s,
            },
            "ridge_flops_per_byte": self.model.ridge_flops_per_byte,
            "breakdown": [
                {
                    "op": o.op,
                    "flops": o.flops,
                    "bytes": o.bytes,
                    "time_s": o.time_s,
                    "bound": o.bound,
                    "arithmetic_intensity": o.arithmetic_intensity if o.bytes else None,
                }
                for o in self.step.ops
            ],
            "memory": {
                "weights_bytes_per_gpu": self.memory.weights_bytes_per_gpu,
                "activation_bytes_per_gpu": self.memory.activation_bytes_per_gpu,
                "kv_bytes_per_token_per_gpu": self.memory.kv_bytes_per_token_per_gpu,
                "kv_capacity_tokens": self.memory.kv_capacity_tokens,
                "kv_heads_replicated": self.memory.kv_heads_replicated,
                "window_reserve_bytes_per_gpu": self.memory.window_reserve_bytes_per_gpu,
                "state_bytes_per_seq_per_gpu": self.memory.state_bytes_per_seq_per_gpu,
                "state_reserve_bytes_per_gpu": self.memory.state_reserve_bytes_per_gpu,
            },
            "layer_kinds": layer_kinds(self.arch),
            "gemm_format": self.model.gemm_format,
            "format_notes": format_notes(self.model),
            "kernel_classes": self.kernel_classes(),
            "expert_spread": self.expert_spread(),
            "kv_chain": [c.to_dict() for c in self.kv_chains],
        }

    def to_text(self) -> str:
        ridge = self.model.ridge_flops_per_byte
        rows = []
        for o in self.step.ops:
            ai = o.arithmetic_intensity
            ai_txt = "-" if o.bound == "communication" or not o.bytes else f"{ai:.3g}"
            rows.append(
                [o.op, si(o.flops, "FLOP"), si(o.bytes, "B"), duration(o.time_s), o.bound, ai_txt]
            )
        f, lay, m = self.model.formats, self.model.layout, self.memory
        head = (
            f"{self.arch.name} on {self.hw.name}: tp={lay.tensor_parallel} "
            f"pp={lay.pipeline_parallel} "
            f"attention_dp={lay.attention_data_parallel} ep={lay.expert_parallel}; "
            f"weights {f.weights}, activations {f.activations}, kv {f.kv_cache} "
            f"(GEMMs run at {self.model.gemm_format})\n"
            f"batch: {self.batch.decode_seqs} decode seqs, "
            f"{self.batch.decode_context_tokens} context tokens, "
            f"{self.batch.prefill_tokens} prefill tokens"
        )
        ops = table(["op", "FLOPs", "bytes", "time", "bound", "FLOP/B"], rows)
        s = self.step
        totals = (
            f"step {duration(s.step_time_s)} = compute {duration(s.compute_s)} + memory "
            f"{duration(s.memory_s)} + communication {duration(s.communication_s)} + "
            f"launch overhead {duration(s.overhead_s)}; ridge point {ridge:.0f} FLOP/B "
            f"(ops above it are compute-bound)"
        )
        rep = (
            " (KV heads replicated: fewer KV heads than TP ranks)" if m.kv_heads_replicated else ""
        )
        mem = (
            f"memory per GPU: weights {m.weights_bytes_per_gpu / 1e9:.2f} GB, activations "
            f"{m.activation_bytes_per_gpu / 1e9:.2f} GB, "
            f"KV cache {m.kv_bytes_per_gpu / 1e9:.2f} GB "
            f"of {m.usable_bytes_per_gpu / 1e9:.1f} GB usable; "
            f"{m.kv_bytes_per_token_per_gpu / 1e3:.1f} kB KV per token per GPU{rep}; "
            f"KV capacity {m.kv_capacity_tokens:,} tokens"
        )
        if m.window_reserve_bytes_per_gpu:
            mem += (
                f" (after {m.window_reserve_bytes_per_gpu / 1e9:.2f} GB reserved for one "
                f"sliding window per schedulable sequence)"
            )
        if m.state_reserve_bytes_per_gpu:
            mem += (
                f" (after {m.state_reserve_bytes_per_gpu / 1e9:.2f} GB set aside for "
                f"recurrent states, {m.state_bytes_per_seq_per_gpu / 1e6:.1f} MB a sequence)"
            )
        kinds = ", ".join(f"{n} {_KIND_WORDS.get(kind, kind.replace('_', ' '))}"
                          for kind, n in layer_kinds(self.arch).items() if n)
        classes = ", ".join(f"{k} {v}" for k, v in self.kernel_classes().items())
        lines = [head, f"layers: {kinds}", "", ops, "", totals, mem, self.sentence(),
                 *format_notes(self.model), f"GEMM kernel classes: {classes}"]
        spread = self.expert_spread()
        if spread is not None:
            lines.append(
                f"experts over EP {spread['ranks']}: the busiest GPU sets the MoE time, "
                f"{spread['busiest_experts_hit']:.1f} of its {spread['local_experts']} experts "
                f"hit and {spread['busiest_pairs']:.1f} token-expert pairs against "
                f"{spread['mean_experts_hit']:.1f} and {spread['mean_pairs']:.1f} on the mean "
                f"GPU ({spread['tokens']} tokens routed at random)")
        if self.kv_chains:
            lines += ["", "KV-format chain (bytes per token -> capacity -> largest batch -> "
                      "decode throughput):", *(f"  {c.to_text()}" for c in self.kv_chains)]
        return "\n".join(lines)


# Layer kinds whose words are not their key with spaces.
_KIND_WORDS = {"mamba2": "Mamba-2", "mlp_blocks": "MLP blocks", "moe_blocks": "MoE blocks"}


def layer_kinds(arch: Architecture) -> dict[str, int]:
    """How many layers attend fully, within a window (or a sparse model's top-k), or by a
    recurrence (a hybrid's Gated DeltaNet linear attention or Mamba-2), and how many MLP and
    MoE blocks stand apart from the mixers (Nemotron-H)."""
    windowed = arch.windowed_attention_layers
    kind = "sparse_attention" if arch.sparse is not None else "sliding_attention"
    recurrent = "mamba2" if arch.linear is not None and arch.linear.is_mamba2 else \
        "linear_attention"
    kinds = {"full_attention": arch.softmax_attention_layers - windowed, kind: windowed,
             recurrent: arch.num_linear_layers}
    if arch.num_ffn_blocks is not None:
        kinds["mlp_blocks"] = arch.num_dense_mlp_layers
        kinds["moe_blocks"] = arch.num_moe_layers
    return kinds


def explain(
    model: str,
    gpu: str,
    layout: ParallelLayout,
    formats: Formats,
    decode_batch: int = 1,
    context: int = 1024,
    prefill_tokens: int = 0,
    gpu_memory_utilization: float = 0.9,
    hardware: Hardware | None = None,
) -> Explanation:
    """Cost one step of `decode_batch` sequences at `context` tokens plus an optional prefill;
    `hardware` replaces the shipped profile of `gpu` (a calibrated one)."""
    arch = load_architecture(model)
    hw = hardware if hardware is not None else load_hardware(gpu)
    step_model = StepModel(arch, hw, layout, formats)
    budget = memory_budget(arch, hw, layout, formats, gpu_memory_utilization)
    require_fit(arch, hw, layout, formats, budget)
    batch = BatchShape.one_chunk(
        prefill_tokens, decode_seqs=decode_batch, decode_context_tokens=decode_batch * context
    )
    if batch.tokens == 0:
        raise ValueError("the step is empty: give --decode-batch >= 1 or --prefill-tokens >= 1")
    chains = [kv_chain(step_model, budget, context)]
    if formats.kv_cache != "bf16":  # the same deployment with a BF16 cache, for contrast
        wide = replace(formats, kv_cache="bf16")
        wide_budget = memory_budget(arch, hw, layout, wide, gpu_memory_utilization)
        chains.append(kv_chain(StepModel(arch, hw, layout, wide), wide_budget, context))
    return Explanation(arch, hw, step_model, batch, step_model.cost(batch), budget,
                       tuple(chains))
