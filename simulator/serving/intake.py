"""When a request that reaches a busy engine can first be scheduled.

A request arriving while a step runs waits at least for that step to end. Engines that overlap
scheduling with the GPU (vLLM async scheduling, SGLang's overlap scheduler, TensorRT-LLM's
overlap scheduler: a one-step lookahead) have already planned the next step when the running
one started, so a request arriving during step j first runs in step j + 2. SGLang also polls
its input queue only every `--scheduler-recv-interval` steps. An engine with nothing to run
polls at once, so an idle replica takes a request the moment it arrives.

Timeline with step starts s_0, s_1, ... (poll interval n, lookahead L = 1 or 0): a request
arriving at t is polled at the first s_j >= t with j % n == 0 and runs in step j + L.
"""

from __future__ import annotations

from collections import deque

from simulator.serving.request import Request


class Intake:
    """Requests that arrived during a step, held until the boundary that may schedule them.

    Each held request carries the step whose planning takes it in (its release step), so the
    intake needs no call at the boundaries in between: a run of decode steps may pass them.
    """

    def __init__(self, lookahead: bool, recv_interval_steps: int = 1) -> None:
        self.lookahead = lookahead
        self.interval = recv_interval_steps
        self.held: deque[tuple[int, Request]] = deque()  # (release step, request), arrival order
        self.held_tokens = 0  # prompt and output tokens of the held requests (routers see them)

    @property
    def delays(self) -> bool:
        """Whether this intake ever holds a request past the step boundary it arrived before."""
        return self.lookahead or self.interval > 1

    def __bool__(self) -> bool:
        return bool(self.held)

    def release_step(self, boundary: int) -> int:
        """The step that first runs a request arriving before step `boundary` starts: the
        first polled boundary at or after it, one more with the lookahead."""
        n = self.interval
        return -(-boundary // n) * n + (1 if self.lookahead else 0)

    def hold(self, r: Request, boundary: int) -> None:
        """Hold `r`, which arrived before the start of step `boundary` (0-based)."""
        self.held.append((self.release_step(boundary), r))
        self.held_tokens += r.tokens_left

    @property
    def first_release(self) -> int:
        """The release step of the earliest held request (the intake is not empty)."""
        return self.held[0][0]

    def at_step_start(self, step: int) -> list[Request]:
        """The requests the scheduler takes in before planning step `step` (0-based)."""
        held, out = self.held, []
        while held and held[0][0] <= step:
            r = held.popleft()[1]
            self.held_tokens -= r.tokens_left
            out.append(r)
        return out

    def drain(self) -> list[Request]:
        """Everything held: the engine has nothing planned, so its loop polls right away."""
        out = [r for _, r in self.held]
        self.held.clear()
        self.held_tokens = 0
        return out
