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

from simulator.serving.request import Request


class Intake:
    """Requests that arrived during a step, held until the boundary that may schedule them."""

    def __init__(self, lookahead: bool, recv_interval_steps: int = 1) -> None:
        self.lookahead = lookahead
        self.interval = recv_interval_steps
        self.held: list[Request] = []  # arrived, not yet polled
        self.ready: list[Request] = []  # polled at the last step start, for the step after it

    @property
    def delays(self) -> bool:
        """Whether this intake ever holds a request past the step boundary it arrived before."""
        return self.lookahead or self.interval > 1

    def __bool__(self) -> bool:
        return bool(self.held or self.ready)

    def hold(self, r: Request) -> None:
        self.held.append(r)

    def at_step_start(self, step: int) -> list[Request]:
        """The requests the scheduler takes in before planning step `step` (0-based)."""
        polled = step % self.interval == 0
        if not self.lookahead:
            if not polled:
                return []
            out, self.held = self.held, []
            return out
        out = self.ready  # polled when the step before this one started
        self.ready = []
        if polled:
            self.ready, self.held = self.held, []
        return out

    def drain(self) -> list[Request]:
        """Everything held: the engine has nothing planned, so its loop polls right away."""
        out = self.ready + self.held
        self.ready, self.held = [], []
        return out
