"""Requests with content: multi-turn sessions and shared prompt prefixes.

A session's turns are drawn up front like any request (lengths, pauses), so the whole run is
fixed by the seed; only when each turn is sent depends on the engine (after the previous
turn's answer and a think time). Turn k's prompt is the shared prefix (if any), every earlier
turn's input and answer, and its own new input; its content names those pieces as segments
(serving/prefix_cache.py), which is what lets a replica find the history in its cache.

Segment ids: the shared prompts are 0 .. count - 1; request i's new input is count + 2i and
its answer count + 2i + 1. Requests are numbered session by session, turn by turn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from simulator.inputs.common import MAX_TOKENS
from simulator.inputs.workload import Workload
from simulator.workload.content import Content

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
LengthDraw = Callable[[Any, int], IntArray]  # (length spec, n) -> n token counts


@dataclass(frozen=True, eq=False)
class ContentDraw:
    """Per request: its full prompt length, its answer length, its content; for sessions, its
    session, its pause after the previous turn's answer, and its arrival (a session's first
    turn at the session's start, NaN for later turns and in a closed loop)."""

    input_tokens: IntArray
    output_tokens: IntArray
    content: tuple[Content, ...]
    session: IntArray | None = None
    think_s: FloatArray | None = None
    arrival_s: FloatArray | None = None


def draw_seconds(spec: Any, n: int, rng: np.random.Generator) -> FloatArray:
    """`n` durations of a think-time spec (fixed, exponential or lognormal), seconds."""
    if spec.kind == "fixed":
        return np.full(n, float(spec.value_s))
    if spec.kind == "exponential":
        return rng.exponential(spec.mean_s, size=n)
    return np.asarray(rng.lognormal(np.log(spec.median_s), spec.sigma, size=n))


def _prefix_choice(w: Workload, n: int, rng: np.random.Generator) -> IntArray:
    """Which shared prompt each of `n` requests or sessions opens with (uniform)."""
    sp = w.shared_prefix
    if sp is None or sp.count == 1:
        return np.zeros(n, dtype=np.int64)
    return rng.integers(0, sp.count, size=n, dtype=np.int64)


def shared_prefix_requests(w: Workload, inputs: IntArray, outputs: IntArray,
                           rng: np.random.Generator) -> ContentDraw:
    """Independent requests that open with a shared prompt: prompt = prefix + own input."""
    sp = w.shared_prefix
    assert sp is not None
    count, p = sp.count, sp.tokens
    choice = _prefix_choice(w, len(inputs), rng)
    content = tuple(
        Content(((int(c), p), (count + 2 * i, int(x))), 2, count + 2 * i + 1)
        for i, (c, x) in enumerate(zip(choice, inputs, strict=True))
    )
    prompts = np.minimum(inputs + p, MAX_TOKENS)
    return ContentDraw(prompts, outputs, content)


def session_requests(w: Workload, n: int, rng: np.random.Generator, lengths: LengthDraw,
                     arrivals: Callable[[int], FloatArray]) -> ContentDraw:
    """`n` turns of sessions, drawn in this order: turns per session, session starts, new
    inputs, answers, first turns' inputs (if given apart), think times, shared prompts."""
    sp = w.sessions
    assert sp is not None and w.input_tokens is not None and w.output_tokens is not None
    turns = lengths(sp.turns, n)
    ends = np.cumsum(turns)
    sessions = int(np.searchsorted(ends, n)) + 1  # the first session reaching n turns
    turns = turns[:sessions].copy()
    turns[-1] -= int(ends[sessions - 1]) - n
    start_s = arrivals(sessions)
    new_in = lengths(w.input_tokens, n)
    outputs = lengths(w.output_tokens, n)
    first = np.zeros(sessions, dtype=np.int64)
    first[1:] = np.cumsum(turns)[:-1]
    if sp.first_input_tokens is not None:
        new_in[first] = lengths(sp.first_input_tokens, sessions)
    think = draw_seconds(sp.think_time_s, n, rng)
    think[first] = 0.0
    choice = _prefix_choice(w, sessions, rng)
    session = np.repeat(np.arange(sessions, dtype=np.int64), turns)
    # Turn k's prompt: the shared prefix, every earlier turn's input and answer, its input.
    both = new_in + outputs
    done = np.cumsum(both) - both  # input and answer tokens of every earlier request
    history = done - done[first][session]
    prefix = w.shared_prefix
    p = prefix.tokens if prefix is not None else 0
    count = prefix.count if prefix is not None else 0
    prompts = np.minimum(p + history + new_in, MAX_TOKENS)
    arrival_s = np.full(n, np.nan)
    arrival_s[first] = start_s
    return ContentDraw(prompts, outputs,
                       _session_contents(session, new_in, outputs, choice, p, count),
                       session, think, arrival_s)


def _session_contents(session: IntArray, new_in: IntArray, outputs: IntArray,
                      choice: IntArray, p: int, count: int) -> tuple[Content, ...]:
    """Each turn's content: its session's segments (one tuple per session, shared by its
    turns), of which its prompt holds the shared prefix, 2k earlier pieces and its input."""
    contents: list[Content] = []
    n = len(session)
    i = 0
    while i < n:
        s = int(session[i])
        j = i
        while j < n and session[j] == s:
            j += 1
        segs: list[tuple[int, int]] = [(int(choice[s]), p)] if p else []
        for k in range(i, j):
            segs.append((count + 2 * k, int(new_in[k])))
            segs.append((count + 2 * k + 1, int(outputs[k])))
        shared = tuple(segs)
        head = 1 if p else 0
        contents.extend(Content(shared, head + 2 * (k - i) + 1, count + 2 * k + 1)
                        for k in range(i, j))
        i = j
    return tuple(contents)
