"""Validation rows: a published measurement plus the scenario that reproduces its setup."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.validation import catalog
from simulator.validation.speculative_rows import ACCEPTANCE_METRIC


@dataclass(frozen=True, slots=True)
class Row:
    id: str
    subset: str
    source: str
    model: str
    gpu: str
    metric: str
    measured: float | None
    unit: str
    tolerance_pct: float  # regression guard: allowed drift from the recorded prediction
    pending: str  # non-empty: what the simulator still lacks to run this row
    note: str
    fields: dict[str, str]
    check: str | None = None  # in-sample | insensitive | sampler: out of the headline errors
    check_reason: str = ""
    measured_parts: tuple[float, float] | None = None  # a ratio's numerator and denominator
    parts_unit: str = ""

    @property
    def weights(self) -> str:
        return self.fields["weights"]

    @property
    def family(self) -> str:
        return self.model.split("-")[0] if self.model else "unknown"

    def scenario(self) -> dict[str, Any]:
        """The scenario dict that reproduces the measured setup."""
        f = self.fields
        if f["arrival"] == "offline":
            arrival: dict[str, Any] = {"kind": "offline"}
        elif f["arrival"] == "closed_loop":
            arrival = {"kind": "closed_loop", "concurrency": int(f["concurrency"])}
        else:
            raise ValueError(f"{self.id}: arrival {f['arrival']!r} not supported in validation")
        tp = int(f["tensor_parallel"])
        replicas = int(f["replicas"] or 1)
        seqs, tokens = int(f["max_num_seqs"]), int(f["max_num_batched_tokens"])
        deployment: dict[str, Any] = {
            "replicas": replicas,
            "tensor_parallel": tp,
        }
        if f.get("expert_parallel"):
            deployment["expert_parallel"] = int(f["expert_parallel"])
        if f.get("gpu_memory_utilization"):
            deployment["gpu_memory_utilization"] = float(f["gpu_memory_utilization"])
        scheduler: dict[str, Any] = {"max_num_seqs": seqs, "max_num_batched_tokens": tokens}
        if f.get("recv_interval_steps"):
            scheduler["recv_interval_steps"] = int(f["recv_interval_steps"])
        if f.get("request_latency_s"):  # "" when not given; "0.0" for an in-process harness
            deployment["overhead"] = {"request_latency_s": float(f["request_latency_s"])}
        return {
            "name": self.id,
            "model": self.model,
            "hardware": {"gpu": self.gpu, "gpus_per_node": tp * replicas},
            "deployment": {
                **deployment,
                "precision": {
                    "weights": f["weights"],
                    "activations": f["activations"],
                    "kv_cache": f["kv_cache"],
                    # module groups the measured checkpoint keeps in BF16 (';'-separated)
                    **({"keep_bf16": f["keep_bf16"].split(";")} if f.get("keep_bf16") else {}),
                },
                "engine": f["engine"],
                "scheduler": scheduler,
            },
            "workload": {
                "arrival": arrival,
                "input_tokens": self._lengths(int(f["input_tokens"])),
                "output_tokens": self._lengths(int(f["output_tokens"])),
                "num_requests": int(f["num_requests"]),
                "seed": 0,
            },
        }


    def _lengths(self, nominal: int) -> dict[str, Any]:
        """Fixed lengths, or uniform on [ratio x nominal, nominal] where the benchmark drew them
        so (InferenceX's benchmark_serving.py sample_uniform with --random-range-ratio)."""
        ratio = self.fields.get("length_min_ratio")
        if not ratio:
            return {"kind": "fixed", "value": nominal}
        return {"kind": "uniform", "min": int(nominal * float(ratio)), "max": nominal}


def metric_value(result: dict[str, Any], metric: str) -> float:
    """One scored figure of a result: a flat key, a dotted percentile key (`ttft_s.mean`), or
    total_tokens_per_s_per_gpu (input + output tokens per second over the GPUs, the
    InferenceX dashboard's `Tput/GPU`)."""
    if metric == "total_tokens_per_s_per_gpu":
        total = result["input_tokens_per_s"] + result["output_tokens_per_s"]
        return float(total / result["num_gpus"])
    value: Any = result
    for part in metric.split("."):
        value = value[part]
    return float(value)


def metric_class(metric: str) -> str:
    """What a metric measures, for the per-metric error table: TTFT, TPOT, throughput (tokens
    per second, per GPU or in all), acceptance length, or a ratio (speed-ups, goodput ratios)."""
    if metric.startswith("ttft"):
        return "TTFT"
    if metric.startswith("tpot"):
        return "TPOT"
    if "tokens_per_s" in metric:
        return "throughput"
    if metric == ACCEPTANCE_METRIC:  # speculative tokens per verify step (a sampler check)
        return "acceptance"
    return "ratio"


# Acceptance-only rows score the sampler against the acceptance figure the preset holds.
SAMPLER_REASON = ("the speculative preset holds the published acceptance, so the row checks the "
                  "sampler, not the simulator's fidelity")


def load_rows(folder: Path = catalog.SOURCES) -> list[Row]:
    """Every row of the source files (validation/sources/, catalog.py), in report order."""
    return [
        Row(
            id=r.id,
            subset=r.subset,
            source=r.source,
            model=r.model,
            gpu=r.gpu,
            metric=r.metric,
            measured=r.measured,
            unit=r.unit,
            tolerance_pct=r.tolerance_pct,
            pending=r.pending,
            note=r.note,
            fields=r.fields(),
            check="sampler" if r.metric == ACCEPTANCE_METRIC else r.check,
            check_reason=SAMPLER_REASON if r.metric == ACCEPTANCE_METRIC else r.check_reason,
            measured_parts=r.measured_parts,
            parts_unit=r.parts_unit,
        )
        for s in catalog.sources(folder)
        for r in s.rows
    ]
