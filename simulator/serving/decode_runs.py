"""What a scheduler answers about runs of pure decode steps (nothing arrives, finishes or
prefills), so a replica can cost and commit many of them at once: whether such a run can
start, how long it may last before a request finishes or the KV pool runs out, and the commit
of the whole run. Mixed into `Scheduler`, whose state it reads."""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

import numpy as np

from simulator.serving.prefix_cache import cached_prefix

if TYPE_CHECKING:
    from simulator.serving.prefix_cache import PrefixCache
    from simulator.serving.request import Request
    from simulator.serving.sched_types import SchedulerConfig, _Waiting
    from simulator.serving.speculative import SpecDecoding


class DecodeRuns:
    """The decode-run queries and commit of a scheduler (see Scheduler for the state)."""

    cfg: SchedulerConfig
    spec: SpecDecoding | None
    waiting: _Waiting
    prefilling: list[Request]
    free_blocks: int
    cache: PrefixCache | None
    step: int
    num_decoding: int
    decode_kv_sum: int
    outstanding_tokens: int
    _phase: list[int]
    _finish: dict[int, list[tuple[Request, int]]]
    _finish_steps: list[int]
    running: dict[int, Request]

    def can_fast_forward(self) -> bool:
        """Only decoders run and no waiting request can join: the next steps differ only in
        context length. A waiting request that cannot be admitted now cannot be later in
        the run either (the seats stay taken, the free KV blocks only shrink)."""
        return (
            self.spec is None
            and self.num_decoding > 0
            and not self.prefilling
            and (not len(self.waiting) or self._admission_blocked())
        )

    def _can_admit_prefill(self) -> bool:
        """A waiting request fits a prefill now (the seats and KV blocks its prompt needs)."""
        if not len(self.waiting) or len(self.running) >= self.cfg.max_num_seqs:
            return False
        r = self.waiting.peek()
        bs = self.cfg.block_size
        cached, idle, load = (0, 0, 0) if self.cache is None else cached_prefix(self.cache, r, bs)
        need = r.input_tokens + r.output_tokens - 1 if self.cfg.reserve_full else r.target
        blocks = -(-need // bs) + self.cfg.state_blocks - cached // bs + idle + load
        return blocks <= self.free_blocks

    def _admission_blocked(self) -> bool:
        """The first admission check of Scheduler.plan fails for the waiting queue's head
        in a pure decode step (mirrors _can_admit_prefill and _admit)."""
        cfg = self.cfg
        if len(self.running) >= cfg.max_num_seqs:
            return True
        r = self.waiting.peek()
        if cfg.separate_prefill and self._can_admit_prefill():
            return False  # a prefill-only step comes next
        budget = cfg.max_num_batched_tokens - self.num_decoding
        if budget <= 0:
            return True
        bs = cfg.block_size
        cached, idle, load = (0, 0, 0) if self.cache is None else cached_prefix(self.cache, r, bs)
        left = r.target - r.computed - cached
        if not cfg.chunked_prefill and left > budget:
            return True  # a whole prompt waits beside decodes until it fits (Admission._admit)
        chunk = min(left, budget) if cfg.chunked_prefill else left
        held = (r.input_tokens + r.output_tokens - 1 if cfg.reserve_full
                else r.computed + cached + chunk)
        return -(-held // bs) + cfg.state_blocks - cached // bs + idle + load > self.free_blocks

    def steps_before_next_finish(self) -> int:
        """Decode steps that can run before the first one in which a request finishes."""
        heap = self._finish_steps
        while heap and heap[0] not in self._finish:
            heapq.heappop(heap)
        return (heap[0] - self.step) if heap else 0

    def blocks_needed(self, steps: int) -> int:
        """New KV blocks the decode set needs over its next `steps` decode steps."""
        if self.cfg.reserve_full:
            return 0
        bs, phase = self.cfg.block_size, self._phase
        cycles, rest = divmod(steps, bs)
        total = cycles * self.num_decoding if cycles else 0
        if rest:
            first = self.step % bs
            end = first + rest
            total += sum(phase[first:end]) + (sum(phase[: end - bs]) if end > bs else 0)
        return total

    def steps_within_blocks(self, steps: int) -> tuple[int, int]:
        """The first of the next `steps` decode steps whose new blocks fit in the free pool
        (the step after them would preempt), and the blocks they take."""
        used = self.blocks_needed(steps)
        if used <= self.free_blocks:
            return steps, used
        phases = np.asarray(self._phase, dtype=np.int64)
        needs = np.cumsum(phases[(self.step + np.arange(steps)) % self.cfg.block_size])
        steps = min(steps, int(np.searchsorted(needs, self.free_blocks, side="right")))
        return steps, int(needs[steps - 1]) if steps else 0

    def fast_forward(self, steps: int, blocks: int) -> None:
        """Commit `steps` pure decode steps at once: every decoder gained `steps` tokens."""
        n = self.num_decoding
        self.step += steps
        self.decode_kv_sum += n * steps
        self.outstanding_tokens -= n * steps
        self.free_blocks -= blocks
        if self.cache is not None:
            self.cache.trim(self.free_blocks)
