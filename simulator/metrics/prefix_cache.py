"""The result's `prefix_cache` and `sessions` blocks: what the cache saved and whom it served,
and how long sessions ran, from the per-request records."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from simulator.metrics.summary import percentiles

if TYPE_CHECKING:
    from simulator.serving.sched_types import SchedulerConfig


def prefix_cache_summary(records: npt.NDArray[Any], ttft_offset_s: Any,
                         stats: Mapping[str, int], cfg: SchedulerConfig) -> dict[str, Any]:
    """Prompt tokens found cached against all prompt tokens of the served requests, the
    prefill that saved, and TTFT of the requests that hit against those that missed (client
    side, as the result's ttft_s); the host tier's traffic where there is one.
    `ttft_offset_s`: the client's offset per record, or 0; `stats`: the caches' counts
    (serving/simulation.py cache_stats); `cfg`: the caching pool's scheduler."""
    block_size = cfg.block_size
    evicted_blocks = stats.get("evicted_blocks", 0)
    done = (records["drop_reason"] == 0) & np.isfinite(records["finish_s"])
    prompt = float(records["input_tokens"][done].sum())
    cached = records["cached_tokens"][done]
    hit = cached > 0
    offset = ttft_offset_s[done] if isinstance(ttft_offset_s, np.ndarray) else ttft_offset_s
    ttft = records["first_token_s"][done] - records["arrival_s"][done] + offset
    saved = float(cached.sum())
    return {
        "prompt_tokens": int(prompt),
        "cached_tokens": int(saved),
        # Share of prompt tokens found cached: the prefill the cache saved.
        "token_hit_rate": saved / prompt if prompt > 0 else 0.0,
        "requests_hit": int(np.count_nonzero(hit)),
        "request_hit_rate": float(np.count_nonzero(hit)) / int(done.sum()) if done.any() else 0.0,
        "saved_prefill_tokens": int(saved),
        "evicted_blocks": evicted_blocks,
        "evicted_tokens": evicted_blocks * block_size,
        "ttft_hit_s": percentiles(ttft[hit]),
        "ttft_miss_s": percentiles(ttft[~hit]),
        "enabled": cfg.prefix_caching,
        "offload": _offload(stats, cfg),
    }


def _offload(stats: Mapping[str, int], cfg: SchedulerConfig) -> dict[str, Any] | None:
    """The host tier's figures: capacity, blocks written, loaded back (and the seconds that
    took on the steps that waited for them), let go; None without one."""
    capacity = stats.get("offload_capacity_blocks", 0)
    if not capacity:
        return None
    reloaded = stats.get("reloaded_blocks", 0)
    return {
        "capacity_tokens": capacity * cfg.block_size,
        "offloaded_tokens": stats.get("offloaded_blocks", 0) * cfg.block_size,
        "reloaded_tokens": reloaded * cfg.block_size,
        "reload_s_per_block": cfg.reload_s_per_block,
        "reload_s_total": reloaded * cfg.reload_s_per_block,
        "dropped_tokens": stats.get("dropped_blocks", 0) * cfg.block_size,
    }


def sessions_summary(records: npt.NDArray[Any], session: npt.NDArray[np.int64],
                     front_end_s: Any) -> dict[str, Any]:
    """Sessions run, those every turn of which was served, turns per session, and each
    served session's length from its first prompt's send to its last answer."""
    count = int(session.max()) + 1 if session.size else 0
    served = (records["drop_reason"] == 0) & np.isfinite(records["finish_s"])
    sent = records["arrival_s"] - front_end_s
    whole = np.ones(count, dtype=bool)
    np.logical_and.at(whole, session, served)
    starts = np.full(count, np.inf)
    np.minimum.at(starts, session, np.where(np.isfinite(sent), sent, np.inf))
    ends = np.full(count, -np.inf)
    np.maximum.at(ends, session, np.where(served, records["finish_s"], -np.inf))
    turns = np.bincount(session, minlength=count)
    return {
        "sessions": count,
        "sessions_completed": int(whole.sum()),
        "turns_per_session": percentiles(turns.astype(np.float64)),
        "session_s": percentiles((ends - starts)[whole]),
    }
