"""Lesson sessions: agent sessions on the same GPUs without and with prefix caching, then
cache-aware routing, then a host-memory tier; how many sessions each holds at an SLO tier and
what the cache figures say about why."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simulator.lessons.core import Findings, col
from simulator.lessons.traffic import Tier, tiers
from simulator.sweep.table import Row, number

LOAD = "workload.arrival.rate_per_s"
STAGE = "stage"  # derived: what the stage adds
IN_FLIGHT = "sessions_in_progress"  # derived: Little's law, rate x mean session length
STAGES = ("no cache", "prefix cache", "+ cache-aware routing", "+ host tier")
HIT = "prefix_cache.token_hit_rate"
EVICTED = "prefix_cache.evicted_tokens"
RELOADED = "prefix_cache.offload.reloaded_tokens"


def derive(r: Row) -> dict[str, Any]:
    """The row's stage (from its caching, router and host tier) and its sessions in progress
    at once (sessions starting per second x their mean length, Little's law)."""
    cached = str(r.get("deployment.scheduler.prefix_caching")).lower() == "true"
    routed = r.get("deployment.router") == "cache_aware"
    offload = bool(r.get("deployment.kv_offload"))
    stage = STAGES[0] if not cached else STAGES[3] if offload else STAGES[2] if routed \
        else STAGES[1]
    rate, length = number(r, LOAD), number(r, "sessions.session_s.mean")
    return {STAGE: stage, IN_FLIGHT: rate * length if rate and length else None}


def _at_tier(rows: Sequence[Row], tier: Tier) -> Row | None:
    """The highest load of a stage whose every metric of the tier holds."""
    ok = [r for r in rows if tier.meets(r) and number(r, IN_FLIGHT) is not None]
    return max(ok, key=lambda r: col(r, LOAD)) if ok else None


def analyze(rows: list[Row], spec: Mapping[str, Any], out_dir: Path) -> Findings:
    by_stage = {s: sorted((r for r in rows if r[STAGE] == s), key=lambda r: col(r, LOAD))
                for s in STAGES}
    by_stage = {s: rs for s, rs in by_stage.items() if rs}
    tier = tiers(spec)[0]
    gpus = col(rows[0], "num_gpus")
    figures: dict[str, float] = {"GPUs": gpus, "TTFT p99 bound (s)": tier.ttft_p99_s,
                                 "TPOT p99 bound (s)": tier.tpot_p99_s}
    cited: list[Row] = []
    said = []
    for stage, group in by_stage.items():
        best = _at_tier(group, tier)
        if best is None:
            said.append(f"{stage}: none of the loads swept")
            continue
        per_gpu = col(best, IN_FLIGHT) / gpus
        figures[f"{stage}: sessions in progress at the tier"] = col(best, IN_FLIGHT)
        figures[f"{stage}: sessions per GPU at the tier"] = per_gpu
        cited.append(best)
        said.append(f"{stage}: {per_gpu:.1f} sessions per GPU ({col(best, LOAD):g} starting "
                    f"per second, {col(best, IN_FLIGHT):.0f} in progress)")
    lines = [f"At the SLO tier (TTFT p99 ≤ {tier.ttft_p99_s:g} s, TPOT p99 ≤ "
             f"{tier.tpot_p99_s * 1e3:g} ms), these {gpus:.0f} GPUs hold — " + "; ".join(said)
             + "."]
    at_tier = list(cited)  # each stage's point at the tier: their steps side by side
    lines += _why(by_stage, cited)
    return Findings(lines, at_tier, [], cited=cited, figures=figures)


def _why(by_stage: Mapping[str, list[Row]], cited: list[Row]) -> list[str]:
    """The cache figures behind the counts: hits and evictions at a shared load, then the
    load where the host tier changes the most."""
    out = []
    plain, routed = by_stage.get(STAGES[1], []), by_stage.get(STAGES[2], [])
    pairs = [(a, b) for a in plain for b in routed if col(a, LOAD) == col(b, LOAD)]
    if pairs:
        a, b = pairs[len(pairs) // 2]
        cited += [a, b]
        out.append(
            f"Why routing matters: at {col(a, LOAD):g} sessions starting per second, least-"
            f"loaded routing scatters a session's turns over the replicas, so each turn finds "
            f"its history only where an earlier one landed: {col(a, HIT) * 100:.0f} % of "
            f"prompt tokens cached, {col(a, EVICTED) / 1e6:.1f}M tokens evicted as the replicas' "
            f"caches hold copies of the same histories. Cache-aware routing sends it back: "
            f"{col(b, HIT) * 100:.0f} % cached, {col(b, EVICTED) / 1e6:.1f}M tokens evicted, "
            f"TPOT p99 {col(a, 'tpot_s.p99') * 1e3:.0f} → {col(b, 'tpot_s.p99') * 1e3:.0f} ms "
            f"(less prefill in every step).")
    tiered = by_stage.get(STAGES[3], [])
    pairs = [(a, b) for a in routed for b in tiered if col(a, LOAD) == col(b, LOAD)]
    if pairs:
        a, b = max(pairs, key=lambda p: col(p[1], HIT) - col(p[0], HIT))
        if col(b, HIT) - col(a, HIT) < 0.01:  # no gain: say so at the load evicting most
            a, b = max(pairs, key=lambda p: col(p[0], EVICTED))
            cited += [a, b]
            out.append(
                f"The host tier changed nothing here: at every load swept the GPU caches "
                f"evicted only what no prompt asked for again (finished sessions; at "
                f"{col(b, LOAD):g} sessions starting per second {col(a, EVICTED) / 1e6:.1f}M "
                f"tokens evicted, {col(b, HIT) * 100:.0f} % of prompt tokens cached either "
                f"way). It pays when the sessions in progress outgrow the GPUs' KV.")
        else:
            cited += [a, b]
            out.append(
                f"The host tier pays where the GPU caches overflow: at {col(b, LOAD):g} "
                f"sessions starting per second the GPU caches alone find "
                f"{col(a, HIT) * 100:.0f} % of prompt tokens, with the host tier "
                f"{col(b, HIT) * 100:.0f} % ({(number(b, RELOADED) or 0) / 1e6:.1f}M tokens "
                f"loaded back over the host link), TPOT p99 {col(a, 'tpot_s.p99') * 1e3:.0f} "
                f"→ {col(b, 'tpot_s.p99') * 1e3:.0f} ms. At light load what the GPU evicts "
                f"is mostly finished sessions, which no one asks for again.")
    return out
