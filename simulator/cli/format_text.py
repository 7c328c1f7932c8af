"""Text lines for a result's formats: its quality beside its speed, and the KV-format chain."""

from __future__ import annotations

from typing import Any


def quality_line(q: dict[str, Any] | None) -> str | None:
    if not q:
        return None
    if q["delta_pct"] is None:
        return f"quality ({q['formats']}): unknown ({q['note']})"
    line = (f"quality ({q['formats']}): {q['delta_pct']:+.2f} % vs the published checkpoint "
            f"[{q['basis']}; {q['benchmark']}; {q['source']}]")
    return f"{line}; {q['note']}" if q.get("note") else line


def kv_chain_line(c: dict[str, Any] | None) -> str | None:
    if not c:
        return None
    queue = c["queue_s_p99"]
    return (
        f"KV chain: {c['kv_format']} ({c['kv_bits_per_element']:.4g} bits) -> "
        f"{c['kv_bytes_per_token_per_gpu'] / 1e3:.1f} kB/token/GPU -> "
        f"{c['kv_capacity_tokens']:,} tokens -> {c['max_batch_that_fits']:,} sequences of "
        f"{c['mean_sequence_tokens']:.0f} tokens fit (limited by {c['batch_limited_by']}) -> "
        f"{c['preemptions']} preemptions, queue p99 "
        f"{'-' if queue is None else f'{queue * 1e3:.1f} ms'}, "
        f"{c['output_tokens_per_s'] or 0:.0f} output tok/s"
    )
