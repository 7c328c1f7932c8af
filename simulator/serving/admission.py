"""Who joins and who leaves a scheduler's running set: waiting requests are admitted while the
seats, the step's token budget, SGLang's prefill cap and free KV blocks allow, and when a
running request needs a KV block that is not free, the newest running request is preempted and
goes back to the front of the queue to be recomputed (vLLM's recompute preemption). Mixed into
`Scheduler`, whose state it reads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.serving.decode_set import DecodeSet

if TYPE_CHECKING:
    from simulator.serving.request import Request
    from simulator.serving.sched_types import _Waiting


class Admission(DecodeSet):
    """Admission and recompute preemption (see Scheduler for the state)."""

    waiting: _Waiting
    prefilling: list[Request]
    free_blocks: int
    preemptions: int
    outstanding_tokens: int
    _reserved_phase: int
    _spec_reserved: int

    def _preempt_newest(self, now_s: float) -> Request:
        """Recompute preemption of the most recently admitted running request."""
        _, victim = self.running.popitem()
        if victim.decode_start_step >= 0:
            victim.generated = victim.generated_at(self.step)
            if self.step > victim.decode_start_step:
                if victim.past_segments is None:
                    victim.past_segments = []
                victim.past_segments.append((victim.decode_start_step, self.step - 1))
            phase = (victim.decode_start_step - victim.decode_start_kv) % self.cfg.block_size
            if self._spec is not None:
                if self._spec_reserved == self.step:  # its blocks for this step are not needed
                    self.free_blocks += sum(self._spec.row_at(victim, self.step))
            elif phase == self._reserved_phase and not self.cfg.reserve_full:
                self.free_blocks += 1  # the block reserved for it this step is not needed
            self.free_blocks += self._leave_decode(victim, self.step)
            victim.decode_start_step = -1
            victim.last_token_s = now_s  # its last token came at the end of the previous step
            # Its whole context (prompt and outputs so far) is prefilled again; `computed`
            # stopped counting when it began to decode.
            self.outstanding_tokens += victim.input_tokens + victim.generated
        else:
            self.prefilling.remove(victim)
            self.free_blocks += victim.blocks
            self.outstanding_tokens += victim.computed
        victim.blocks = 0
        victim.computed = 0
        victim.target = victim.input_tokens + victim.generated
        victim.preemptions += 1
        self.preemptions += 1
        self.waiting.push_front(victim)
        return victim

    def _admit(self, now_s: float, budget: int, decode_seqs: int,
               running_chunks: list[tuple[Request, int]]) -> list[tuple[Request, int]]:
        """Admit waiting requests in queue order into this step's leftover `budget`; their
        first chunks."""
        cfg = self.cfg
        admitted: list[tuple[Request, int]] = []
        # SGLang's prefill input cap counts the step's continuing chunks and, when mixed, its
        # decodes; past the first request, one enters only if its whole remainder fits.
        cap = cfg.max_prefill_tokens
        cap_left = None if cap is None else cap - decode_seqs - sum(c for _, c in running_chunks)
        waiting, running, block_size = self.waiting, self.running, cfg.block_size
        while len(waiting) and budget > 0 and len(running) < cfg.max_num_seqs:
            r = waiting.peek()
            # A request whose KV arrived from a prefill replica starts with `computed` > 0.
            left = r.target - r.computed
            if cap_left is not None and left > cap_left and (admitted or running_chunks):
                break
            if cfg.chunked_prefill:
                chunk = left if left < budget else budget
            elif left <= budget or (not admitted and not decode_seqs):
                # Whole prompts only; the first may exceed the budget when it is a recomputed
                # context (prompt plus outputs), which vLLM also prefills alone. Beside decodes
                # (TensorRT-LLM's whole contexts) it waits until it fits the step's budget.
                chunk = left
            else:
                break
            held = self._full_tokens(r) if cfg.reserve_full else r.computed + chunk
            need = -(-held // block_size) + cfg.state_blocks  # blocks_for(held), state
            if need > self.free_blocks:
                break
            waiting.pop()
            self.free_blocks -= need
            r.blocks = need
            if r.scheduled_s != r.scheduled_s:  # NaN: never scheduled before
                r.scheduled_s = now_s
            running[r.index] = r
            self.prefilling.append(r)
            admitted.append((r, chunk))
            budget -= chunk
            if cap_left is not None:
                cap_left -= chunk
        return admitted

    @staticmethod
    def _full_tokens(r: Request) -> int:
        """KV tokens a request holds at its largest: context plus every remaining output but
        the last (whose KV is never written)."""
        return r.input_tokens + r.output_tokens - 1
