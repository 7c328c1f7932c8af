"""Speculative decoding assembled for one scenario: drafter, memory it takes, acceptance, policy.

The drafter's weights and its own KV cache come out of the target's KV pool (a separate draft
model and EAGLE/MTP heads all cache K and V for every context token). `policy: auto` turns
drafting off above the batch where it stops paying, found from the roofline at the workload's
typical context (`cost/draft.crossover_batch`); the result reports that batch either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simulator.cost.draft import SpeculativeStepModel, crossover_batch, make_drafter
from simulator.cost.memory import MemoryBudget, kv_bytes_per_token_per_gpu, weights_bytes_per_gpu
from simulator.cost.step import StepModel
from simulator.errors import tag_key
from simulator.inputs.speculative import (
    DEFAULT_KIND,
    SpeculativeConfig,
    acceptance_length_of,
    per_position_rates,
    preset_row,
)
from simulator.model.load import load_architecture
from simulator.serving.replica import Replica
from simulator.serving.sched_types import SchedulerConfig
from simulator.serving.speculative import SpecDecoding
from simulator.serving.workload import RequestStream


@dataclass(frozen=True)
class SpeculativeEngine:
    config: SpeculativeConfig
    kind: str
    rates: tuple[float, ...]
    model: SpeculativeStepModel
    draft_weights_bytes_per_gpu: float
    draft_kv_bytes_per_token_per_gpu: float
    kv_capacity_tokens: int  # the target's KV pool once the drafter has taken its share

    @property
    def expected_acceptance_length(self) -> float:
        return acceptance_length_of(self.rates)

    def crossover(self, context_tokens: int, max_batch: int) -> int | None:
        return crossover_batch(
            self.model,
            self.config.num_speculative_tokens,
            self.expected_acceptance_length,
            context_tokens,
            max_batch,
        )

    def decoding(self, stream: RequestStream, seed: int, cfg: SchedulerConfig) -> SpecDecoding:
        """The replica-side settings, the crossover judged at the stream's mean context."""
        n = len(stream)
        if n:
            context = float(np.mean(stream.input_tokens) + np.mean(stream.output_tokens) / 2)
        else:
            context = 0.0
        cross = self.crossover(round(context), cfg.max_num_seqs)
        off_above = None
        if self.config.policy == "auto" and cross is not None:
            off_above = cross - 1
        return SpecDecoding(
            self.config.num_speculative_tokens,
            self.rates,
            seed,
            off_above,
            crossover_batch=cross,
            crossover_context_tokens=context,
            confidence_scheduled=self.config.method == "dspark",
        )


def build_speculative(
    cfg: SpeculativeConfig,
    kind: str | None,
    target: StepModel,
    budget: MemoryBudget,
    base_dir: Path | None,
) -> SpeculativeEngine:
    draft_arch = None
    if cfg.draft_model is not None:
        name = cfg.draft_model
        if base_dir is not None and name.endswith(".json") and not Path(name).is_absolute():
            name = str(base_dir / name)
        try:
            draft_arch = load_architecture(name)
        except ValueError as exc:
            tag_key(exc, "speculative.draft_model")
            raise
    drafter = make_drafter(cfg.method, target, draft_arch)
    rates = per_position_rates(cfg, kind)
    draft_w = draft_kv = 0.0
    if drafter is not None:
        draft_w = weights_bytes_per_gpu(drafter.arch, target.layout, target.formats)
        draft_kv = kv_bytes_per_token_per_gpu(drafter.arch, target.layout, target.formats.kv_cache)
    avail = budget.kv_bytes_per_gpu - draft_w
    per_token = budget.kv_bytes_per_token_per_gpu + draft_kv
    dp = target.layout.attention_data_parallel
    tokens = int(avail // per_token) * dp if avail > 0 else 0
    return SpeculativeEngine(
        cfg,
        kind or DEFAULT_KIND,
        rates,
        SpeculativeStepModel(target, cfg.method, drafter, cfg.num_speculative_tokens),
        draft_w,
        draft_kv,
        tokens,
    )


def speculative_stats(
    spec: SpeculativeEngine | None, cfg: SchedulerConfig, replicas: list[Replica]
) -> dict[str, Any] | None:
    """The result's `speculative` block: what the simulation measured, beside what it assumed."""
    if spec is None or cfg.speculative is None:
        return None
    d = cfg.speculative
    seqs = sum(r.sched.spec_verify_seqs for r in replicas)
    emitted = sum(r.sched.spec_verify_emitted for r in replicas)
    gpu = sum(r.gpu_s for r in replicas)
    draft = sum(r.draft_gpu_s for r in replicas)
    c = spec.config
    source = None
    if c.preset is not None:
        row = preset_row(c.preset, spec.kind)
        source = f"{row.source}, {row.dataset} ({row.checkpoint})"
    return {
        "method": c.method,
        "num_speculative_tokens": c.num_speculative_tokens,
        "policy": c.policy,
        "workload_kind": spec.kind,
        "acceptance_rates": list(spec.rates),
        "acceptance_length_expected": spec.expected_acceptance_length,
        "acceptance_length_mean": emitted / seqs if seqs else None,
        "draft_share_of_gpu_time": draft / gpu if gpu > 0 else 0.0,
        "verify_share_of_gpu_time": (gpu - draft) / gpu if gpu > 0 else 0.0,
        "crossover_batch": d.crossover_batch,
        "crossover_context_tokens": d.crossover_context_tokens,
        "policy_switches": sum(r.sched.spec_switches for r in replicas),
        "draft_weights_gb_per_gpu": spec.draft_weights_bytes_per_gpu / 1e9,
        "preset_source": source,
    }
