"""What a request's prompt holds, as named pieces: the segments a prefix cache matches on.

A prompt is a sequence of segments, each a run of tokens with an id: a shared system prompt, a
session's earlier inputs and answers, this turn's new input (workload/sessions.py). An id
fixes every segment before it (a session's history is its own; a shared prompt only ever opens
a sequence), so equal ids at equal positions mean equal tokens up to there.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Content:
    """A request's prompt, `segments[:prompt_segments]` in order, then its answer (segment
    `output_id`) for whoever continues it. The segments tuple is shared by every turn of a
    session (turn k's prompt is a prefix of turn k+1's)."""

    segments: tuple[tuple[int, int], ...]  # (segment id, tokens)
    prompt_segments: int
    output_id: int
