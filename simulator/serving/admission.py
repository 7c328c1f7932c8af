"""Who joins and who leaves a scheduler's running set: waiting requests are admitted while the
seats, the step's token budget, SGLang's prefill cap and free KV blocks allow, and when a
running request needs a KV block that is not free, the newest running request is preempted and
goes back to the front of the queue to be recomputed (vLLM's recompute preemption). Mixed into
`Scheduler`, whose state it reads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.serving.decode_set import DecodeSet
from simulator.serving.prefix_cache import cached_prefix, sequence_names

if TYPE_CHECKING:
    from simulator.serving.prefix_cache import PrefixCache
    from simulator.serving.request import Request
    from simulator.serving.sched_types import _Waiting


class Admission(DecodeSet):
    """Admission and recompute preemption (see Scheduler for the state)."""

    waiting: _Waiting
    prefilling: list[Request]
    free_blocks: int
    cache: PrefixCache | None
    step_reload_s: float
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
            self._free(victim, self._leave_decode(victim, self.step), False)
            victim.decode_start_step = -1
            victim.last_token_s = now_s  # its last token came at the end of the previous step
            # Its whole context (prompt and outputs so far) is prefilled again; `computed`
            # stopped counting when it began to decode.
            self.outstanding_tokens += victim.input_tokens + victim.generated
        else:
            self.prefilling.remove(victim)
            self._free(victim, victim.blocks, False)
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
        cache = self.cache
        while len(waiting) and budget > 0 and len(running) < cfg.max_num_seqs:
            r = waiting.peek()
            if cache is None:
                cached = idle = load = 0
            else:
                cached, idle, load = cached_prefix(cache, r, block_size)
            # A request whose KV arrived from a prefill replica starts with `computed` > 0.
            left = r.target - r.computed - cached
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
            held = self._full_tokens(r) if cfg.reserve_full else r.computed + cached + chunk
            blocks = -(-held // block_size) + cfg.state_blocks  # blocks_for(held), state
            # Cached blocks held by others cost nothing; idle cached ones leave the free pool;
            # those on the host are loaded into new blocks.
            need = blocks - cached // block_size + idle + load
            if need > self.free_blocks:
                break
            waiting.pop()
            if cached:
                self._take_cached(r, cached)
                if load:
                    self.step_reload_s += load * cfg.reload_s_per_block
            self.free_blocks -= need
            if cache is not None:
                cache.trim(self.free_blocks)
            r.blocks = blocks
            if r.scheduled_s != r.scheduled_s:  # NaN: never scheduled before
                r.scheduled_s = now_s
            running[r.index] = r
            self.prefilling.append(r)
            admitted.append((r, chunk))
            budget -= chunk
            if cap_left is not None:
                cap_left -= chunk
        return admitted

    def _take_cached(self, r: Request, cached: int) -> None:
        """An admitted request takes its cached prefix: those blocks are referenced, and its
        prefill starts after them."""
        assert self.cache is not None and r.names is not None
        hit = cached // self.cfg.block_size
        held = r.names[:hit]
        self.cache.acquire(held)
        r.held_names = held
        r.named = hit
        r.computed = cached
        self.outstanding_tokens -= cached
        if not r.preemptions:
            r.cached_tokens = cached

    def _register(self, r: Request) -> None:
        """After a prefill chunk: the prompt blocks it filled are cached under their names."""
        names = r.names  # set by the first look-up (cached_prefix)
        if names is None or self.cache is None:
            return
        full = min(r.computed // self.cfg.block_size, len(names))
        if full > r.named:
            fresh = self.cache.register(names[r.named:full])
            if r.held_names is None:
                r.held_names = fresh
            else:
                r.held_names.extend(fresh)
            r.named = full

    def _free(self, r: Request, blocks: int, finished: bool) -> None:
        """A request leaving (finished or preempted) gives back its `blocks`: those cached
        blocks other requests still hold stay taken; the rest are free, its cached ones idle
        (a finished request's answer is cached too, for whoever continues the session)."""
        cache = self.cache
        if cache is None or r.content is None:
            self.free_blocks += blocks
            return
        held = r.held_names or ()
        kept: list[int] | tuple[()] = ()
        if finished:
            kept = sequence_names(r.content, self.cfg.block_size, r.input_tokens,
                                  r.output_tokens)
        shared = cache.release(held, kept) if held or kept else 0
        r.held_names = None
        r.named = 0
        self.free_blocks += blocks - shared

    @staticmethod
    def _full_tokens(r: Request) -> int:
        """KV tokens a request holds at its largest: context plus every remaining output but
        the last (whose KV is never written)."""
        return r.input_tokens + r.output_tokens - 1
