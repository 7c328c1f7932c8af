"""Iteration-level (continuous) batching with chunked prefill, paged KV blocks and preemption.

It follows vLLM v1's scheduler: every step first serves the running requests in admission order
(each decode one token, a partly prefilled prompt its next chunk), then admits waiting requests
while `max_num_seqs`, the token budget and free KV blocks allow. When a running request needs a
KV block and none is free, the newest running request is preempted and later recomputed.
With chunked prefill off, steps are prefill-only (whole prompts) whenever a waiting request can
be admitted, else decode-only, as vLLM v0 scheduled.

This module plans a step (its work, token budget and batch shape) and commits it. Admission and
preemption are `Admission`'s, the decoders' aggregates (a step costs O(requests that change),
not O(batch)) `DecodeSet`'s, runs of pure decode steps `DecodeRuns`'.
"""

from __future__ import annotations

from simulator.cost.attention import prefill_pairs
from simulator.cost.shape import BatchShape
from simulator.serving.admission import Admission
from simulator.serving.decode_runs import DecodeRuns
from simulator.serving.prefix_cache import PrefixCache, cached_prefix
from simulator.serving.request import Request
from simulator.serving.sched_types import PlannedStep, SchedulerConfig, waiting_queue
from simulator.serving.speculative import SpecSchedule


class Scheduler(Admission, DecodeRuns):
    """State of one replica's batch. `plan()` starts a step, `commit()` ends it (admission and
    preemption: `Admission`; the decode aggregates: `DecodeSet`; runs of pure decode steps:
    `DecodeRuns`)."""

    def __init__(self, cfg: SchedulerConfig) -> None:
        self.cfg = cfg
        self.waiting = waiting_queue(cfg.policy)
        self.running: dict[int, Request] = {}  # admission order; popitem() gives the newest
        self.prefilling: list[Request] = []  # running requests whose prompt is not yet cached
        self.free_blocks = cfg.num_blocks  # empty blocks and idle cached ones
        self.cache = PrefixCache(cfg.offload_blocks) if cfg.prefix_caching else None
        self.step_reload_s = 0.0  # host-tier loads of the step being planned
        self.step = 0  # global decode step counter
        self.num_decoding = 0
        self.decode_kv_sum = 0  # summed cached tokens of decoding requests at step start
        self._phase = [0] * cfg.block_size  # decoders needing a new block when step % bs == i
        self._finish: dict[int, list[tuple[Request, int]]] = {}
        self._finish_steps: list[int] = []  # heap of the keys of _finish
        self._reserved_phase = -1  # phase whose decoders got a block this step (-1: none yet)
        self.preemptions = 0
        self.resume_gaps_s: list[float] = []  # token gaps that span a preemption (for ITL)
        self.outstanding_tokens = 0  # prompt + output tokens not yet processed (for routing)
        # Speculative decoding: the per-step schedule, whether drafts run now (policy auto
        # turns them off above a batch size), and what the verify steps emitted.
        self.spec = cfg.speculative
        self._spec = (
            SpecSchedule(cfg.block_size, cfg.reserve_full) if self.spec is not None else None
        )
        self.spec_on = True
        self._spec_reserved = -1  # step whose speculative blocks are reserved (-1: none)
        self.last_emitted = 0  # tokens the decoders emitted in the last committed step
        self.spec_verify_seqs = 0  # decoder-steps that verified drafts
        self.spec_verify_emitted = 0  # tokens those decoder-steps emitted
        self.spec_switches = 0  # policy auto: times speculation was turned on or off

    # ---- queries ----------------------------------------------------------------------

    @property
    def has_work(self) -> bool:
        return bool(self.running) or len(self.waiting) > 0

    @property
    def used_blocks(self) -> int:
        return self.cfg.num_blocks - self.free_blocks

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.cfg.block_size)

    def prefix_hit_tokens(self, r: Request) -> int:
        """Prompt tokens of `r` this scheduler's prefix cache holds now (0 without one)."""
        cache = self.cache
        return 0 if cache is None else cached_prefix(cache, r, self.cfg.block_size)[0]

    def fits_ever(self, r: Request) -> bool:
        """Can the whole request (prompt and every output's KV) ever be cached at once?"""
        return self.fits_ever_tokens(r.input_tokens, r.output_tokens)

    def fits_ever_tokens(self, input_tokens: int, output_tokens: int) -> bool:
        """fits_ever of a request of these lengths (asked on arrival, before it is built)."""
        need = self.blocks_for(input_tokens + output_tokens - 1) + self.cfg.state_blocks
        return need <= self.cfg.num_blocks

    # ---- arrival ----------------------------------------------------------------------

    def add(self, r: Request) -> None:
        self.waiting.push(r)
        self.outstanding_tokens += r.tokens_left

    # ---- one step ---------------------------------------------------------------------

    def plan(self, now_s: float) -> PlannedStep | None:
        """Choose this step's work and reserve its KV blocks; None if nothing can run."""
        cfg = self.cfg
        budget = cfg.max_num_batched_tokens
        preempted = False
        self.step_reload_s = 0.0
        # Decodes first: each needs one token and, on a block boundary, one more block.
        separate = cfg.separate_prefill
        decodes = not (separate and (bool(self.prefilling) or self._can_admit_prefill()))
        if decodes:
            decode_seqs, preempted = self._reserve_decodes(now_s)
        else:
            decode_seqs = 0  # a prefill-only step (chunked prefill off, or no mixing)
        if self._spec is not None:
            budget -= decode_seqs * self._verify_per_seq(decode_seqs)  # verify feeds drafts
        else:
            budget -= decode_seqs
        chunks: list[tuple[Request, int]] = []
        # Prompts already running continue with their next chunk.
        for r in list(self.prefilling) if self.prefilling else ():
            if budget <= 0:
                break
            if r.index not in self.running:
                continue  # preempted below while serving an earlier one
            chunk = min(r.target - r.computed, budget)
            need = max(0, self.blocks_for(r.computed + chunk) + cfg.state_blocks - r.blocks)
            while need > self.free_blocks and r.index in self.running:
                preempted = True
                if self._preempt_newest(now_s) is r:
                    break
            if r.index not in self.running:
                continue
            self.free_blocks -= need
            if self.cache is not None:
                self.cache.trim(self.free_blocks)
            r.blocks += need
            chunks.append((r, chunk))
            budget -= chunk
        if decode_seqs and decode_seqs != self.num_decoding:
            # Preempting for a prefill chunk removed decoders after their blocks were counted.
            decode_seqs = self.num_decoding
            budget = cfg.max_num_batched_tokens - decode_seqs * self._verify_per_seq(decode_seqs)
            budget -= sum(c for _, c in chunks)
        # Admit waiting requests, unless this step had to preempt (vLLM v1 does the same).
        if not preempted:
            chunks.extend(self._admit(now_s, budget, decode_seqs, chunks))
        if not chunks and not decodes and self.num_decoding:
            # The prefill-only step lost its prompt (preempted for want of blocks) while
            # requests are decoding: they take the step instead of the engine idling with work.
            decode_seqs, _ = self._reserve_decodes(now_s)
        if not chunks and decode_seqs == 0:
            return None
        return PlannedStep(self._shape(chunks, decode_seqs), chunks, decode_seqs + len(chunks),
                           self.step_reload_s)

    def _reserve_decodes(self, now_s: float) -> tuple[int, bool]:
        """Reserve this step's KV blocks for the decoding requests, preempting the newest until
        they fit: (decoding requests left, whether any was preempted)."""
        preempted = False
        if self._spec is not None:
            self._spec_policy()
            need = self._spec.need(self.step)
            while need > self.free_blocks and self.running:
                self._preempt_newest(now_s)
                preempted = True
                need = self._spec.need(self.step)
            self.free_blocks -= need
            self._spec_reserved = self.step
        else:
            phase = self.step % self.cfg.block_size
            need = self._phase[phase]
            while need > self.free_blocks and self.running:
                self._preempt_newest(now_s)
                preempted = True
                need = self._phase[phase]
            self.free_blocks -= need
            self._reserved_phase = phase
        if self.cache is not None:
            self.cache.trim(self.free_blocks)
        return self.num_decoding, preempted

    def _shape(self, chunks: list[tuple[Request, int]], decode_seqs: int) -> BatchShape:
        tokens = context = sampled = 0
        pairs_f = 0.0
        for r, c in chunks:
            tokens += c
            pairs_f += prefill_pairs(c, r.computed)
            context += r.computed
            if r.computed + c == r.target:
                sampled += 1
        return BatchShape(
            tokens,
            len(chunks),
            pairs_f,
            context,
            sampled,
            decode_seqs,
            self.decode_kv_sum if decode_seqs else 0,
            self._drafts_per_seq(decode_seqs) if self._spec is not None else 0,
        )

    def _drafts_per_seq(self, decode_seqs: int) -> int:
        """Draft tokens each decoder verifies this step: k, or under confidence scheduling the
        decoders' mean, rounded up (the batch shape has one count per sequence)."""
        if self._spec is None or not decode_seqs:
            return 0
        return -(-int(self._spec.drafts[self.step]) // decode_seqs)

    def _verify_per_seq(self, decode_seqs: int) -> int:
        """Positions each decoder feeds the target this step: 1, its drafts + 1, or a tree."""
        drafts = self._drafts_per_seq(decode_seqs)
        if drafts and self.spec is not None and self.spec.tree_tokens:
            return self.spec.tree_tokens
        return 1 + drafts

    def commit(self, planned: PlannedStep, end_s: float) -> list[Request]:
        """Apply the step's results at `end_s`; return the requests that finished."""
        decoded = planned.batch.decode_seqs
        self._reserved_phase = -1
        self._spec_reserved = -1
        # Decoders' progress is implicit in the decode-step counter, so it advances only when
        # they were served: a prefill-only step (chunked prefill off) leaves them in place.
        if decoded:
            finished = self._commit_decoders(
                decoded, planned.batch.speculative_tokens_per_seq > 0, end_s)
            next_step = self.step + 1
        else:
            finished = []
            next_step = self.step
        for r, chunk in planned.chunks:
            r.computed += chunk
            self.outstanding_tokens -= chunk
            if self.cache is not None and r.content is not None:
                self._register(r)
            if r.computed < r.target:
                continue
            # The prompt (or recomputed context) is cached: this step sampled a token.
            self.prefilling.remove(r)
            r.generated += 1
            self.outstanding_tokens -= 1
            if r.first_token_s != r.first_token_s:  # NaN: its first token
                r.first_token_s = end_s
            else:
                self.resume_gaps_s.append(end_s - r.last_token_s)
                if r.resume_tokens_s is None:
                    r.resume_tokens_s = []
                r.resume_tokens_s.append(end_s)
            r.last_token_s = end_s
            if r.generated >= r.output_tokens:
                if self.cache is None:
                    self.free_blocks += r.blocks
                else:
                    self._free(r, r.blocks, True)
                r.blocks = 0
                r.finish_s = end_s
                del self.running[r.index]
                finished.append(r)
                continue
            self._enter_decode(r, next_step)
        self.step = next_step
        return finished

    def commit_decode_step(self, decoded: int, end_s: float) -> list[Request]:
        """commit() of a pure decode step of `decoded` sequences (no chunks, no drafts),
        without building its PlannedStep: the last step of a decode walk."""
        self._reserved_phase = -1
        self._spec_reserved = -1
        finished = self._commit_decoders(decoded, False, end_s)
        self.step += 1
        return finished

    def _commit_decoders(self, decoded: int, verified: bool, end_s: float) -> list[Request]:
        """The decoders' part of a step's commit: their tokens, and those that finished."""
        # Every decoder gained one cached and one output token, or under speculation the
        # tokens its verify step accepted, bonus included; the blocks that held the
        # rejected drafts' KV are free again.
        step = self.step
        emitted = decoded
        if self._spec is not None:
            emitted = int(self._spec.emit[step])
            self.free_blocks += int(self._spec.extra[step])
            if verified:
                self.spec_verify_seqs += decoded
                self.spec_verify_emitted += emitted
        self.last_emitted = emitted
        self.decode_kv_sum += emitted
        self.outstanding_tokens -= emitted
        finished: list[Request] = []
        bucket = self._finish.pop(step, None)
        if bucket is not None:
            running, cache = self.running, self.cache
            for r, epoch in bucket:
                if epoch != r.decode_epoch:
                    continue  # it was preempted after this bucket entry was made
                if cache is None:
                    self.free_blocks += self._leave_decode(r, step + 1)
                else:
                    self._free(r, self._leave_decode(r, step + 1), True)
                r.generated = r.output_tokens
                r.decode_last_step = step
                r.finish_s = end_s
                del running[r.index]
                finished.append(r)
        return finished
