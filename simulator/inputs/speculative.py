"""The `deployment.speculative` block and the published acceptance figures its presets name.

Acceptance is given one of three ways: `acceptance_length` τ (mean tokens emitted per verify
step, bonus token included, as papers report it), `acceptance_rate` (the probability that draft
position i is accepted given the ones before were: one value for every position or one per
position), or `preset` (a published figure by method × workload kind, from
speculative_presets.csv next to this file, each row with its source and target model). Given
none, the one preset published for the scenario's model, method and traffic is taken
(`spec_defaults.py`). All three become one
per-position rate vector, which the serving engine samples step by step.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import Field, ValidationInfo, field_validator, model_validator

from simulator.errors import InputError
from simulator.inputs.common import AsTuple, _invalid, _Strict

SpeculativeMethod = Literal["draft_model", "eagle3", "mtp", "dflash", "dspark", "ngram"]
WorkloadKind = Literal["chat", "code", "math", "summarization"]
WORKLOAD_KINDS: tuple[str, ...] = get_args(WorkloadKind)  # a request's kind code indexes this
DEFAULT_KIND: WorkloadKind = "chat"  # the preset row used when the workload names no kind
Rate = Annotated[float, Field(ge=0, lt=1)]


@dataclass(frozen=True, slots=True)
class PresetRow:
    """One published acceptance figure: τ at `measured_k` drafts, or a per-position rate."""

    preset: str
    method: str
    kind: str
    model: str  # the target model (catalog name) the figure was measured on
    acceptance_length: float | None
    # One rate for every position, or one per draft position (`;`-separated in the CSV):
    # positions past the last are unknown.
    acceptance_rate: tuple[float, ...] | None
    measured_k: int | None  # draft length of the measurement; None when the source omits it
    checkpoint: str
    source: str
    dataset: str


def _rates(cell: str) -> tuple[float, ...] | None:
    if not cell:
        return None
    rates = tuple(float(x) for x in cell.split(";"))
    if not all(0.0 <= a < 1.0 for a in rates):
        raise ValueError(f"speculative_presets.csv: acceptance rates {cell!r} must lie in [0, 1)")
    return rates


@cache
def load_presets() -> dict[str, dict[str, PresetRow]]:
    """preset name -> workload kind -> its published row."""
    text = Path(__file__).with_name("speculative_presets.csv").read_text()
    out: dict[str, dict[str, PresetRow]] = {}
    for r in csv.DictReader(text.splitlines()):
        row = PresetRow(
            r["preset"],
            r["method"],
            r["kind"],
            r["model"],
            float(r["acceptance_length"]) if r["acceptance_length"] else None,
            _rates(r["acceptance_rate"]),
            int(r["measured_k"]) if r["measured_k"] else None,
            r["checkpoint"],
            r["source"],
            r["dataset"],
        )
        out.setdefault(row.preset, {})[row.kind] = row
    return out


class SpeculativeConfig(_Strict):
    # Who drafts: a draft model, EAGLE-3 heads, the model's MTP layers, DFlash, DSpark, or n-gram
    # lookup.
    method: SpeculativeMethod
    # Tokens drafted per step (k); the target verifies k + 1 positions.
    num_speculative_tokens: Annotated[int, Field(ge=1, le=16)]
    # mean tokens emitted per verification step, bonus token included: 1 .. k+1
    acceptance_length: float | None = None
    # Probability a drafted token is accepted: one value, or one per draft position.
    acceptance_rate: Rate | Annotated[tuple[Rate, ...], AsTuple] | None = None
    # A published acceptance figure (speculative_presets.csv) by traffic kind; none of the three
    # given: the one preset for the model and method, if exactly one fits.
    preset: str | None = None
    draft_model: str | None = None  # catalog name or config.json path (method draft_model)
    # auto: stop drafting above the batch where a verify step no longer pays for itself.
    policy: Literal["always", "auto"] = "always"
    # Tree drafting (EAGLE-2/3's dynamic tree): the target verifies `tree_tokens` positions per
    # sequence (the tree's draft tokens + 1, EAGLE's total_token) instead of a k-token chain's
    # k + 1, and each draft pass after the first expands `tree_top_k` tokens per sequence; k
    # stays the tree's depth (the longest path acceptance can take). Absent: a chain.
    tree_tokens: Annotated[int, Field(ge=2, le=1024)] | None = None
    # Tokens each draft pass after the first expands per sequence (tree drafting).
    tree_top_k: Annotated[int, Field(ge=1, le=64)] | None = None

    @field_validator("acceptance_length")
    @classmethod
    def _acceptance_in_range(cls, v: float | None, info: ValidationInfo) -> float | None:
        k = info.data.get("num_speculative_tokens")
        if v is not None and k is not None and not 1.0 <= v <= k + 1:
            raise _invalid(
                f"acceptance_length {v} must lie in [1, num_speculative_tokens + 1] = [1, {k + 1}]"
            )
        return v

    @field_validator("acceptance_rate")
    @classmethod
    def _one_rate_per_position(
        cls, v: float | tuple[float, ...] | None, info: ValidationInfo
    ) -> float | tuple[float, ...] | None:
        k = info.data.get("num_speculative_tokens")
        if isinstance(v, tuple) and k is not None and len(v) != k:
            raise _invalid(
                f"{len(v)} acceptance rates for num_speculative_tokens {k}; give one value "
                f"or one per draft position"
            )
        return v

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None:
            return v
        presets = load_presets()
        if v not in presets:
            raise _invalid(f"unknown preset {v!r}; valid: {', '.join(sorted(presets))}")
        method = next(iter(presets[v].values())).method
        if info.data.get("method") not in (None, method):
            raise _invalid(f"preset {v!r} is a {method} figure; method is {info.data['method']}")
        return v

    @model_validator(mode="after")
    def _exactly_one_acceptance(self) -> SpeculativeConfig:
        given = [
            n
            for n in ("acceptance_length", "acceptance_rate", "preset")
            if getattr(self, n) is not None
        ]
        # None given: the published preset for the scenario's model, method and traffic is
        # taken when exactly one fits (inputs/spec_defaults.py), else the build refuses.
        if len(given) > 1:
            raise _invalid(
                "give exactly one of acceptance_length, acceptance_rate or preset "
                f"(got {', '.join(given)})"
            )
        self._check_tree()
        if (self.method == "draft_model") != (self.draft_model is not None):
            raise _invalid(
                "draft_model (a catalog name or config.json path) is required with method "
                "draft_model and only with it"
            )
        return self


    def _check_tree(self) -> None:
        t, top_k, k = self.tree_tokens, self.tree_top_k, self.num_speculative_tokens
        if t is None and top_k is None:
            return
        if t is None or top_k is None:
            raise _invalid("tree drafting needs both tree_tokens and tree_top_k (or neither)")
        if self.method not in ("draft_model", "eagle3", "mtp"):
            raise _invalid(
                f"tree_tokens: method {self.method} drafts no tree; trees come from the "
                f"sequential drafters (draft_model, eagle3, mtp)"
            )
        # The tree holds a depth-k path (k + 1 positions with the root) and each of its k
        # levels at most top_k tokens.
        if not k + 1 <= t <= k * top_k + 1:
            raise _invalid(
                f"tree_tokens {t} must lie in [num_speculative_tokens + 1, "
                f"num_speculative_tokens x tree_top_k + 1] = [{k + 1}, {k * top_k + 1}]"
            )

    @property
    def verify_tokens(self) -> int:
        """Positions the target verifies per sequence each step: the tree, or k + 1."""
        return self.tree_tokens or self.num_speculative_tokens + 1


def acceptance_length_of(rates: tuple[float, ...]) -> float:
    """Mean tokens per verify step: 1 + a1 + a1·a2 + … (the bonus token always comes)."""
    total, p = 1.0, 1.0
    for a in rates:
        p *= a
        total += p
    return total


def geometric_rate(tau: float, k: int) -> float:
    """The per-position rate a with 1 + a + … + a^k = τ (bisection; the sum rises with a)."""
    if tau >= k + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if acceptance_length_of((mid,) * k) < tau:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def per_position_rates(cfg: SpeculativeConfig, kind: str | None) -> tuple[float, ...]:
    """The k per-position acceptance probabilities for traffic of `kind` (None: chat)."""
    k = cfg.num_speculative_tokens
    if cfg.acceptance_length is not None:
        return (geometric_rate(cfg.acceptance_length, k),) * k
    if cfg.acceptance_rate is not None:
        r = cfg.acceptance_rate
        return tuple(r) if isinstance(r, tuple) else (r,) * k
    assert cfg.preset is not None
    row = preset_row(cfg.preset, kind)
    if row.acceptance_rate is not None:
        rates = row.acceptance_rate
        if len(rates) == 1:
            return rates * k  # one published rate, taken for every position
        if k > len(rates):
            raise InputError(
                f"deployment.speculative.preset: {cfg.preset} publishes acceptance for draft "
                f"positions 1-{len(rates)}; position {len(rates) + 1} on is unknown (not "
                f"published); use num_speculative_tokens <= {len(rates)} or give acceptance_rate"
            )
        return rates[:k]
    assert row.acceptance_length is not None
    measured_k = row.measured_k if row.measured_k is not None else k
    if row.acceptance_length > measured_k + 1 or (
        row.measured_k is None and row.acceptance_length > k + 1
    ):
        need = math.ceil(row.acceptance_length - 1)
        raise InputError(
            f"deployment.speculative.preset: {cfg.preset} ({row.kind}) reports acceptance "
            f"length {row.acceptance_length}, more than num_speculative_tokens {k} + 1 allows; "
            f"use num_speculative_tokens >= {need}"
        )
    # The same per-position rate at the user's draft length (a geometric chain).
    return (geometric_rate(row.acceptance_length, measured_k),) * k


def preset_row(preset: str, kind: str | None) -> PresetRow:
    rows = load_presets()[preset]
    want = kind or DEFAULT_KIND
    if want not in rows:
        raise InputError(
            f"deployment.speculative.preset: {preset} has no published figure for workload kind "
            f"{want!r} (it has: {', '.join(rows)}); set workload.kind or give acceptance_length"
        )
    return rows[want]
