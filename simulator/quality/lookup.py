"""Quality of a model at a set of formats: the published delta against the model's own
checkpoint, a fallback from the same family (said to be one), or `unknown`.

The key is the model and the format of each tensor class (weights, activations, KV cache), so
a scenario with per-module precision still asks one question per tensor class. Several
benchmarks for one configuration are averaged (each as a relative change) and all are named.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from simulator.quality.table import KV_UNSTATED, QualityRow, model_families, quality_rows

Basis = Literal["measured", "family", "unknown"]
_SIXTEEN_BIT = ("bf16", "fp16")


@dataclass(frozen=True, slots=True)
class Quality:
    """The quality block of a result. delta_pct is None when basis is unknown."""

    delta_pct: float | None
    benchmark: str
    source: str
    basis: Basis
    formats: str  # weights/activations/kv_cache
    note: str = ""

    @property
    def drop_pct(self) -> float | None:
        return None if self.delta_pct is None else max(0.0, -self.delta_pct)

    def to_dict(self) -> dict[str, Any]:
        return {
            "delta_pct": self.delta_pct, "benchmark": self.benchmark, "source": self.source,
            "basis": self.basis, "formats": self.formats, "note": self.note,
        }


def model_key(model: str) -> str:
    """'llama-3.3-70b' or a path '.../llama-3.3-70b.json' -> 'llama-3.3-70b'."""
    name = model.strip().lower()
    if name.endswith(".json"):
        p = Path(name)
        name = p.parent.name if p.stem == "config" else p.stem
    return name


def _matches(row: QualityRow, weights: str, activations: str, kv_cache: str) -> bool:
    kv_ok = row.kv_cache in (kv_cache, KV_UNSTATED)
    return row.weights == weights and row.activations == activations and kv_ok


def _reference_format(rows: list[QualityRow]) -> str:
    return rows[0].baseline_format if rows else "bf16"


def _is_reference(ref: str, weights: str, activations: str, kv_cache: str) -> bool:
    """The published checkpoint itself, or a lossless widening of it (16-bit everywhere)."""
    return (weights in (ref, *_SIXTEEN_BIT) and activations in (ref, *_SIXTEEN_BIT)
            and kv_cache in _SIXTEEN_BIT)


def _summarize(rows: list[QualityRow], basis: Basis, formats: str, note: str) -> Quality:
    delta = sum(r.delta_pct for r in rows) / len(rows)
    sources = "; ".join(dict.fromkeys(r.source for r in rows))
    if any(r.kv_cache == KV_UNSTATED for r in rows):
        note = (note + " " if note else "") + "the source does not state its KV cache format"
    return Quality(round(delta, 3), ", ".join(r.benchmark for r in rows), sources, basis,
                   formats, note)


def lookup_quality(model: str, weights: str, activations: str, kv_cache: str) -> Quality:
    """Published quality delta of `model` served at these formats."""
    key = model_key(model)
    formats = f"{weights}/{activations}/{kv_cache}"
    table = quality_rows()
    own = [r for r in table if r.model == key]
    if _is_reference(_reference_format(own), weights, activations, kv_cache):
        return Quality(0.0, "reference", "the published checkpoint (no quantization beyond it)",
                       "measured", formats)
    hits = [r for r in own if _matches(r, weights, activations, kv_cache)]
    if hits:
        return _summarize(hits, "measured", formats, "")
    family = model_families().get(key) or (own[0].family if own else None)
    kin = [r for r in table if r.family == family and r.model != key] if family else []
    hits = [r for r in kin if _matches(r, weights, activations, kv_cache)]
    if hits:  # the first donor the data file lists; donors are not mixed
        donor = hits[0].model
        return _summarize([r for r in hits if r.model == donor], "family", formats,
                          f"fallback: nothing published for {key}; borrowed from {donor} "
                          f"(family {family})")
    return Quality(None, "unknown", "unknown", "unknown", formats,
                   f"no published quality figure for {key} at {formats}")


def worst(found: list[Quality]) -> Quality:
    """The worse of several lookups (a scenario serving at more than one set of formats):
    unknown if any is unknown, else the largest drop."""
    unknown = [q for q in found if q.delta_pct is None]
    if unknown:
        return unknown[0]
    return min(found, key=lambda q: q.delta_pct if q.delta_pct is not None else 0.0)
