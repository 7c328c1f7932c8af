"""The rows of a trace file as read, before sorting: what every trace reader fills in."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TraceRows:
    """One list per column, one entry per kept row; the bad rows with their reasons."""

    azure: bool
    seconds: list[float]  # plain: arrival_s; Azure: whole POSIX seconds
    fractions: list[float]  # Azure only: fraction of the second
    inputs: list[int]
    outputs: list[int]
    bad: list[tuple[int, str]]  # (line number, reason)
    kinds: list[int] | None  # optional `kind` column: code into WORKLOAD_KINDS, -1 for blank
    lines: list[int] = field(default_factory=list)  # each kept row's line in the file
    # Optional content columns (workload/trace_content.py): `session_id` (text, blank: none),
    # `turn` (whole number), `hash_ids` (the prompt's block hashes, space separated).
    sessions: list[str] | None = None
    turns: list[int] | None = None
    hashes: list[tuple[int, ...]] | None = None
