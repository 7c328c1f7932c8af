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
import numpy.typing as npt

from simulator.cost.draft import SpeculativeStepModel, make_drafter
from simulator.cost.memory import MemoryBudget, kv_bytes_per_token_per_gpu, weights_bytes_per_gpu
from simulator.cost.spec_ranks import crossover_batch
from simulator.cost.step import StepModel
from simulator.errors import InputError, tag_key
from simulator.inputs.spec_defaults import with_default_acceptance
from simulator.inputs.speculative import (
    DEFAULT_KIND,
    WORKLOAD_KINDS,
    SpeculativeConfig,
    acceptance_length_of,
    per_position_rates,
    preset_row,
)
from simulator.model.load import load_architecture
from simulator.serving.replica import Replica
from simulator.serving.request import Request
from simulator.serving.sched_types import SchedulerConfig
from simulator.serving.speculative import SpecDecoding
from simulator.workload.stream import RequestStream


@dataclass(frozen=True)
class SpeculativeEngine:
    config: SpeculativeConfig
    kind: str
    rates: tuple[float, ...]
    model: SpeculativeStepModel
    draft_weights_bytes_per_gpu: float
    draft_kv_bytes_per_token_per_gpu: float
    kv_capacity_tokens: int  # the target's KV pool once the drafter has taken its share
    notes: tuple[str, ...] = ()  # what the build chose for the user (a default acceptance)

    @property
    def expected_acceptance_length(self) -> float:
        return acceptance_length_of(self.rates)

    def kind_rates(self, stream: RequestStream) -> tuple[tuple[float, ...], ...] | None:
        """Per-position rates by kind code for a stream whose requests carry kinds (None when
        none do); kinds no request carries keep the workload's rates."""
        if stream.kind is None:
            return None
        present = {int(c) for c in np.unique(stream.kind) if c >= 0}
        out: list[tuple[float, ...]] = []
        for code, name in enumerate(WORKLOAD_KINDS):
            if code not in present:
                out.append(self.rates)
                continue
            try:
                out.append(per_position_rates(self.config, name))
            except InputError as exc:
                count = int(np.count_nonzero(stream.kind == code))
                raise InputError(f"{exc} ({count} requests of the workload are {name})") from None
        return tuple(out)

    def decoding(self, stream: RequestStream, seed: int, cfg: SchedulerConfig) -> SpecDecoding:
        """The replica-side settings, the crossover judged at the stream's mean context and
        mean acceptance per verify step."""
        n = len(stream)
        if n:
            context = float(np.mean(stream.input_tokens) + np.mean(stream.output_tokens) / 2)
        else:
            context = 0.0
        by_kind = self.kind_rates(stream)
        tau = self.expected_acceptance_length
        if by_kind is not None and n:
            tau = mixed_acceptance_length(stream, self.rates, by_kind)
        cross = crossover_batch(
            self.model, self.config.num_speculative_tokens, tau, round(context), cfg.max_num_seqs
        )
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
            kind_rates=by_kind,
            request_kind=stream.kind,
            tree_tokens=self.config.tree_tokens or 0,
        )


def mixed_acceptance_length(
    stream: RequestStream,
    default: tuple[float, ...],
    by_kind: tuple[tuple[float, ...], ...],
) -> float:
    """Mean tokens per verify step over a mixed stream: all its output tokens over all the
    verify steps they take, request i taking about out_i / τ(kind_i) steps."""
    assert stream.kind is not None
    taus = np.asarray([acceptance_length_of(r) for r in (*by_kind, default)])
    per_request = taus[stream.kind]  # code -1 picks the last: the workload's own kind
    out = stream.output_tokens.astype(np.float64)
    return float(out.sum() / (out / per_request).sum())


def build_speculative(
    cfg: SpeculativeConfig,
    kind: str | None,
    target: StepModel,
    budget: MemoryBudget,
    base_dir: Path | None,
    key: str = "deployment.speculative",
) -> SpeculativeEngine:
    """The drafter, its memory and the acceptance of `cfg` on `target`; a block that gives
    no acceptance takes the one preset published for the model, method and traffic kind
    (`key`: where the block sits, for the messages)."""
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
    cfg, note = with_default_acceptance(cfg, target.arch.name, kind, key)
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
        SpeculativeStepModel(
            target, cfg.method, drafter, cfg.num_speculative_tokens,
            tree_tokens=cfg.tree_tokens or 0, tree_top_k=cfg.tree_top_k or 1,
        ),
        draft_w,
        draft_kv,
        tokens,
        (note,) if note is not None else (),
    )


@dataclass
class VerifyTally:
    """Per request (by index), the verify steps its finished decode runs took and the tokens
    they emitted: what acceptance by request kind is measured from."""

    steps: npt.NDArray[np.int64]
    emitted: npt.NDArray[np.int64]

    @classmethod
    def empty(cls, n: int) -> VerifyTally:
        return cls(np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64))

    def add(self, r: Request) -> None:
        self.steps[r.index] += r.spec_verify_steps
        self.emitted[r.index] += r.spec_verify_emitted


def _source(c: SpeculativeConfig, kind: str) -> str | None:
    if c.preset is None:
        return None
    row = preset_row(c.preset, kind)
    return f"{row.source}, {row.dataset} ({row.checkpoint})"


def acceptance_by_kind(
    spec: SpeculativeEngine, d: SpecDecoding, stream: RequestStream, tally: VerifyTally
) -> dict[str, dict[str, Any]]:
    """Measured beside expected acceptance for each traffic kind the requests carry."""
    codes = np.full(len(stream), -1, dtype=np.int64) if stream.kind is None else stream.kind
    own = WORKLOAD_KINDS.index(spec.kind)
    codes = np.where(codes < 0, own, codes)
    out: dict[str, dict[str, Any]] = {}
    for code in np.unique(codes):
        name = WORKLOAD_KINDS[int(code)]
        mine = codes == code
        steps = int(tally.steps[mine].sum())
        rates = d.kind_rates[int(code)] if d.kind_rates is not None else spec.rates
        out[name] = {
            "requests": int(np.count_nonzero(mine)),
            "verify_steps": steps,
            "acceptance_rates": list(rates),
            "acceptance_length_expected": acceptance_length_of(rates),
            "acceptance_length_mean": int(tally.emitted[mine].sum()) / steps if steps else None,
            "preset_source": _source(spec.config, name),
        }
    return out


def speculative_stats(
    spec: SpeculativeEngine | None,
    cfg: SchedulerConfig,
    replicas: list[Replica],
    stream: RequestStream,
    tally: VerifyTally,
) -> dict[str, Any] | None:
    """The result's `speculative` block: what the simulation measured, beside what it assumed."""
    if spec is None or cfg.speculative is None:
        return None
    d = cfg.speculative
    scheds = [s for r in replicas for s in r.schedulers()]
    seqs = sum(s.spec_verify_seqs for s in scheds)
    emitted = sum(s.spec_verify_emitted for s in scheds)
    gpu = sum(r.gpu_s for r in replicas)
    draft = sum(r.draft_gpu_s for r in replicas)
    c = spec.config
    by_kind = acceptance_by_kind(spec, d, stream, tally)
    expected = spec.expected_acceptance_length
    if d.kind_rates is not None and len(stream):
        expected = mixed_acceptance_length(stream, spec.rates, d.kind_rates)
    return {
        "method": c.method,
        "num_speculative_tokens": c.num_speculative_tokens,
        "policy": c.policy,
        "workload_kind": next(iter(by_kind)) if len(by_kind) == 1 else "mixed",
        "acceptance_rates": list(spec.rates),
        "acceptance_length_expected": expected,
        "acceptance_length_mean": emitted / seqs if seqs else None,
        "acceptance_by_kind": by_kind,
        "draft_share_of_gpu_time": draft / gpu if gpu > 0 else 0.0,
        "verify_share_of_gpu_time": (gpu - draft) / gpu if gpu > 0 else 0.0,
        "crossover_batch": d.crossover_batch,
        "crossover_context_tokens": d.crossover_context_tokens,
        "policy_switches": sum(s.spec_switches for s in scheds),
        "draft_weights_gb_per_gpu": spec.draft_weights_bytes_per_gpu / 1e9,
        "preset_source": _source(c, spec.kind),
    }
