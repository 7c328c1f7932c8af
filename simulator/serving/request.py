"""A request in flight: what the scheduler needs to know, in slots, nothing per token."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulator.workload.content import Content


class Request:
    """Mutable state of one request inside a replica.

    While decoding, a request's progress is implicit in the replica's global step counter: it
    entered the decode set at step `decode_start_step` with `decode_start_kv` cached tokens and
    `decode_start_generated` output tokens, and gains one of each per step. That keeps the
    per-step work O(changes), not O(batch).
    """

    __slots__ = (
        "arrival_s",
        "blocks",
        "cached_tokens",
        "computed",
        "content",
        "decode_epoch",
        "decode_last_step",
        "decode_start_generated",
        "decode_start_kv",
        "decode_start_step",
        "finish_s",
        "first_token_s",
        "generated",
        "held_names",
        "hit_memo",
        "index",
        "input_tokens",
        "last_token_s",
        "named",
        "names",
        "output_tokens",
        "past_segments",
        "preemptions",
        "priority",
        "replica",
        "resume_tokens_s",
        "scheduled_s",
        "spec_cum",
        "spec_done",
        "spec_drafts",
        "spec_verify_emitted",
        "spec_verify_steps",
        "target",
    )

    def __init__(
        self, index: int, arrival_s: float, input_tokens: int, output_tokens: int, priority: int
    ) -> None:
        self.index = index
        self.arrival_s = arrival_s
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.priority = priority
        self.replica = -1
        self.computed = 0  # tokens of `target` already in the KV cache (prefill progress)
        self.target = input_tokens  # tokens to prefill: the prompt, plus outputs after a recompute
        self.generated = 0  # output tokens produced so far
        self.blocks = 0  # KV blocks held while prefilling (decoders' blocks are implicit)
        self.preemptions = 0
        self.scheduled_s = math.nan
        self.first_token_s = math.nan
        self.last_token_s = math.nan
        self.finish_s = math.nan
        self.decode_start_step = -1
        self.decode_start_kv = 0
        self.decode_start_generated = 0
        self.decode_epoch = 0  # bumps when the request leaves the decode set (stale bucket entries)
        self.decode_last_step = -1  # decode step of its last token when it finished decoding
        # Token history beyond the common case, kept only for preempted requests: decode-step
        # ranges served before each preemption, and the tokens sampled by re-prefills.
        self.past_segments: list[tuple[int, int]] | None = None
        self.resume_tokens_s: list[float] | None = None
        # Speculative decoding: tokens emitted before each of its verify steps since it began
        # to decode (cumulative, starting at 0), and the drafts it verified per step.
        self.spec_cum: Any = None
        self.spec_drafts: Any = None  # drafts it verifies at each of its steps
        self.spec_done: list[Any] | None = None  # tokens emitted per step of past decode runs
        self.spec_verify_steps = 0  # steps of finished decode runs that verified drafts
        self.spec_verify_emitted = 0  # tokens those steps emitted
        # Prefix caching (serving/prefix_cache.py): what its prompt holds (None: its own
        # tokens, never looked up) and the prompt tokens it found cached when first admitted.
        # The rest of its cache state is set by `attach`, for a request with content only.
        self.content: Content | None = None
        self.cached_tokens = 0

    def attach(self, content: Content) -> None:
        """Give the request its prompt's content: its prompt's block names (worked out on
        the first look-up), the cached blocks it holds a reference to, and how many of its
        prompt blocks have been looked up or registered."""
        self.content = content
        self.names: list[int] | None = None
        self.held_names: list[int] | None = None
        self.named = 0
        # The last prefix-cache look-up: (cache, its version then, the answer).
        self.hit_memo: tuple[Any, int, tuple[int, int, int]] | None = None

    @property
    def tokens_left(self) -> int:
        """Prompt tokens still to prefill and outputs still to make, as it waits: the work a
        router weighs (a scheduler's and an intake's outstanding tokens)."""
        return self.target - self.computed + self.output_tokens

    def kv_tokens_at(self, step: int) -> int:
        """Cached tokens of a decoding request at the start of global step `step`."""
        if self.spec_cum is not None:
            return self.decode_start_kv + int(self.spec_cum[step - self.decode_start_step])
        return self.decode_start_kv + (step - self.decode_start_step)

    def generated_at(self, step: int) -> int:
        if self.spec_cum is not None:
            return self.decode_start_generated + int(self.spec_cum[step - self.decode_start_step])
        return self.decode_start_generated + (step - self.decode_start_step)
