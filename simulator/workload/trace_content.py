"""What a trace says its prompts hold: block hashes (a Mooncake trace, or a `hash_ids`
column) or session ids (a turn's prompt continues its session's last prompt and answer), as
the content a prefix cache matches on (workload/content.py).

Segment ids: a hash h names a block segment 2h (the trace's hashes depend on everything before
them, so equal hashes at equal positions are equal prefixes); request i's own tokens are
segment 2(i + base) + 1 and its answer 2(i + base + n) + 1, odd so never a hash's.
"""

from __future__ import annotations

from simulator.errors import InputError
from simulator.workload.content import Content
from simulator.workload.trace_files import Trace


def trace_contents(trace: Trace, block_tokens: int, path: str
                   ) -> tuple[tuple[Content, ...] | None, list[str]]:
    """Each request's content (None: the trace gives none) and warnings worth showing."""
    if trace.hashes is None and trace.sessions is None:
        return None, []
    if trace.turns is not None:
        _check_turns(trace, path)
    n = len(trace.input_tokens)
    inputs, outputs = trace.input_tokens.tolist(), trace.output_tokens.tolist()

    def own(i: int) -> int:
        return 2 * i + 1

    def answer(i: int) -> int:
        return 2 * (i + n) + 1

    contents: list[Content] = []
    warnings: list[str] = []
    if trace.hashes is not None:
        for i, hashes in enumerate(trace.hashes):
            segs = _hash_segments(hashes, block_tokens, inputs[i], own(i))
            contents.append(Content(segs, len(segs), answer(i)))
        return tuple(contents), warnings
    assert trace.sessions is not None
    last: dict[str, tuple[tuple[tuple[int, int], ...], int]] = {}  # session -> (segs, tokens)
    fresh = 0
    for i, sid in enumerate(trace.sessions):
        prompt = inputs[i]
        prev = last.get(sid) if sid else None
        if prev is not None and prompt > prev[1]:
            segs = (*prev[0], (own(i), prompt - prev[1]))
        else:
            fresh += prev is not None
            segs = ((own(i), prompt),)
        contents.append(Content(segs, len(segs), answer(i)))
        if sid:
            last[sid] = ((*segs, (answer(i), outputs[i])), prompt + outputs[i])
    if fresh:
        warnings.append(f"{path}: {fresh} turn{'s' if fresh > 1 else ''} no longer than "
                        f"their session's earlier prompt and answer: taken as fresh prompts "
                        f"(the history was cut), sharing nothing")
    return tuple(contents), warnings


def _hash_segments(hashes: tuple[int, ...], block: int, prompt: int,
                   own_id: int) -> tuple[tuple[int, int], ...]:
    """The prompt as hashed blocks of `block` tokens (the last one partial), cut at the
    prompt's length; tokens past the hashes are the request's own."""
    segs: list[tuple[int, int]] = []
    left = prompt
    for h in hashes:
        if left <= 0:
            break
        take = min(block, left)
        segs.append((2 * h, take))
        left -= take
    if left > 0:
        segs.append((own_id, left))
    return tuple(segs)


def _check_turns(trace: Trace, path: str) -> None:
    """The turns of each session rise with time: a repeated or earlier turn is refused."""
    assert trace.sessions is not None and trace.turns is not None
    seen: dict[str, int] = {}
    for sid, turn, line in zip(trace.sessions, trace.turns, trace.lines, strict=True):
        if not sid:
            continue
        prev = seen.get(sid)
        if prev is not None and turn <= prev:
            raise InputError(
                f"{path}: line {line}: session {sid!r} turn {turn} comes after its turn {prev} "
                f"(a session's turns must rise with arrival time)")
        seen[sid] = turn
