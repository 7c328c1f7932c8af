"""The decoding requests of a scheduler kept as aggregates: their count, summed context, the
block-boundary phases that say how many need a new KV block at each step, and finish buckets
keyed by the step in which each finishes. A request enters when its prompt is cached and leaves
when it finishes or is preempted, so a step costs O(requests that change), not O(batch).
Speculative decoders book their drawn emissions in the step schedule instead of a phase.
Mixed into `Scheduler`, whose state it reads."""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

import numpy as np

from simulator.serving.speculative import close_decode_run

if TYPE_CHECKING:
    from simulator.serving.request import Request
    from simulator.serving.sched_types import SchedulerConfig
    from simulator.serving.speculative import SpecDecoding, SpecSchedule


class DecodeSet:
    """Entering and leaving the decode aggregates (see Scheduler for the state)."""

    cfg: SchedulerConfig
    spec: SpecDecoding | None
    _spec: SpecSchedule | None
    spec_on: bool
    spec_switches: int
    step: int
    num_decoding: int
    decode_kv_sum: int
    running: dict[int, Request]
    _phase: list[int]
    _finish: dict[int, list[tuple[Request, int]]]
    _finish_steps: list[int]

    def _leave_decode(self, r: Request, step: int) -> int:
        """Remove a decoding request from the aggregates; return the blocks it held."""
        kv = r.kv_tokens_at(step)
        self.num_decoding -= 1
        self.decode_kv_sum -= kv
        r.decode_epoch += 1
        cfg = self.cfg
        if self._spec is not None:
            self._spec.add(r, -1, step)
            close_decode_run(r, step)
        if cfg.reserve_full:
            held, r.blocks = r.blocks, 0
            return held
        if self._spec is None:
            self._phase[(r.decode_start_step - r.decode_start_kv) % cfg.block_size] -= 1
        return -(-kv // cfg.block_size) + cfg.state_blocks  # blocks_for(kv), its state

    def _enter_decode(self, r: Request, start_step: int) -> None:
        computed = r.computed
        r.decode_start_step = start_step
        r.decode_start_kv = computed
        r.decode_start_generated = r.generated
        self.num_decoding += 1
        self.decode_kv_sum += computed
        if self._spec is not None:
            last = self._enter_speculative(r, start_step)
        else:
            cfg = self.cfg
            if not cfg.reserve_full:
                # from now on implicit: blocks_for(kv) (one more per block boundary) + state
                r.blocks = 0
                self._phase[(start_step - computed) % cfg.block_size] += 1
            last = start_step + (r.output_tokens - r.generated) - 1
        bucket = self._finish.get(last)
        if bucket is None:
            self._finish[last] = [(r, r.decode_epoch)]
            heapq.heappush(self._finish_steps, last)
        else:
            bucket.append((r, r.decode_epoch))

    def _enter_speculative(self, r: Request, start_step: int) -> int:
        """Draw r's emissions per verify step, book them in the schedule; its last step."""
        spec, sched = self.spec, self._spec
        assert spec is not None and sched is not None
        on = self.spec_on
        e = spec.draw(r.index, r.decode_epoch, r.output_tokens - r.generated, on)
        cum = np.zeros(e.size + 1, dtype=np.int64)
        np.cumsum(e, out=cum[1:])
        r.spec_cum = cum
        r.spec_drafts = spec.drafts_verified(e, on)
        if not self.cfg.reserve_full:
            r.blocks = 0  # implicit from now on: blocks_for(kv) at each step
        sched.add(r, 1, start_step)
        return start_step + int(e.size) - 1

    def _spec_policy(self) -> None:
        """policy auto: drafts off above the cut-off batch, on again at or below it; the
        decoders' remaining steps are redrawn under the new mode from this step on."""
        spec = self.spec
        assert spec is not None
        want = spec.off_above_batch is None or self.num_decoding <= spec.off_above_batch
        if want == self.spec_on:
            return
        self.spec_on = want
        self.spec_switches += 1
        step = self.step
        for r in list(self.running.values()):
            if r.spec_cum is None:
                continue
            if step > r.decode_start_step:  # its token clock goes on in a new decode run
                r.past_segments = [*(r.past_segments or ()), (r.decode_start_step, step - 1)]
            generated, kv = r.generated_at(step), r.kv_tokens_at(step)
            held = self._leave_decode(r, step)
            r.generated, r.computed = generated, kv
            self._enter_decode(r, step)
            if self.cfg.reserve_full:
                r.blocks = held
