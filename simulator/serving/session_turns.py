"""The sessions of a run as the request source sees them: which turn follows which and after
what pause (workload/sessions.py drew them; serving/simulation.py sends them)."""

from __future__ import annotations

import numpy as np

from simulator.workload.stream import RequestStream


class SessionTurns:
    """The sessions of a run: which turn follows which, how long before it is sent, and which
    sessions ended early (a turn dropped on arrival ends its session: the rest are dropped)."""

    def __init__(self, stream: RequestStream) -> None:
        assert stream.session is not None and stream.think_s is not None
        session = stream.session
        n = len(session)
        last = np.r_[session[1:] != session[:-1], True] if n else np.zeros(0, dtype=bool)
        # Per request, the index of its session's next turn (-1: the last turn).
        self._next = np.where(last, -1, np.arange(1, n + 1)).tolist()
        self._think = stream.think_s.tolist()
        self._first = np.flatnonzero(np.r_[True, session[1:] != session[:-1]]).tolist() if n \
            else []
        self.count = len(self._first)
        self.started = 0  # closed loop: sessions started so far

    def first_turns(self) -> list[int]:
        return self._first

    def start_next(self) -> int:
        """The first turn of the next session not yet started."""
        i = self._first[self.started]
        self.started += 1
        return i

    def next_of(self, i: int) -> int:
        return int(self._next[i])

    def think_at(self, j: int) -> float:
        return float(self._think[j])

    def close(self, i: int) -> None:
        """Turn i's session is over early: it has no next turn."""
        self._next[i] = -1
