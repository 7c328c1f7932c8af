"""Mooncake traces (kvcache-ai/Mooncake, FAST'25): one JSON object a line with `timestamp`
(milliseconds), `input_length`, `output_length` and `hash_ids`, the prompt's block hashes (the
trace's blocks are 512 tokens; a block's hash depends on every token before it, so equal ids
at equal positions are equal prefixes). Read into the rows of a plain trace."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from simulator.workload.trace_rows import TraceRows


def read_mooncake_rows(path: Path, max_model_len: int | None) -> TraceRows:
    """The trace's rows, bad ones (not JSON, a field missing or malformed) with their reason."""
    rows = TraceRows(False, [], [], [], [], [], None, hashes=[])
    assert rows.hashes is not None
    with path.open() as f:
        for line, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                t, n_in, n_out, hashes = _fields(text, max_model_len)
            except ValueError as exc:
                rows.bad.append((line, str(exc)))
                continue
            rows.seconds.append(t)
            rows.fractions.append(0.0)
            rows.inputs.append(n_in)
            rows.outputs.append(n_out)
            rows.lines.append(line)
            rows.hashes.append(hashes)
    return rows


def _fields(text: str, max_model_len: int | None) -> tuple[float, int, int, tuple[int, ...]]:
    try:
        obj: Any = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError("not a JSON object") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    t = _number(obj, "timestamp") / 1000.0
    n_in, n_out = int(_number(obj, "input_length")), int(_number(obj, "output_length"))
    if n_in < 1 or n_out < 1 or n_in != _number(obj, "input_length") \
            or n_out != _number(obj, "output_length"):
        raise ValueError("input_length and output_length must be whole numbers >= 1")
    if max_model_len is not None and n_in + n_out > max_model_len:
        raise ValueError(f"input_length {n_in} + output_length {n_out} passes the context "
                         f"window of {max_model_len} tokens")
    hashes = obj.get("hash_ids", [])
    if not isinstance(hashes, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in hashes):
        raise ValueError("hash_ids must be a list of whole numbers")
    return t, n_in, n_out, tuple(hashes)


def _number(obj: dict[str, Any], key: str) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value < 0:
        raise ValueError(f"{key} {value!r} is not a number >= 0")
    return float(value)
