"""What a scheduler is configured with, what it plans for one step, and its waiting queue
(FCFS, or priority with FCFS among equals)."""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Literal, Protocol

from simulator.cost.shape import BatchShape
from simulator.serving.request import Request
from simulator.serving.speculative import SpecDecoding


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool
    policy: Literal["fcfs", "priority"]
    block_size: int
    num_blocks: int
    reserve_full: bool = False  # admit only with blocks for prompt + every output reserved
    # False: a step carries prefill chunks or decodes, never both; prefill goes first whenever
    # a chunk can run (SGLang's default, no --enable-mixed-chunk). True: chunks ride along with
    # the decode batch (vLLM, TensorRT-LLM). Without chunked prefill steps mix only where
    # `mix_whole_prompts` (TensorRT-LLM: whole contexts beside the generations).
    mix_prefill_decode: bool = True
    speculative: SpecDecoding | None = None  # draft-and-verify decoding (serving/speculative)
    # The engine takes new requests into its scheduler only every this many steps (SGLang's
    # --scheduler-recv-interval; 1 everywhere else). See serving/intake.py.
    recv_interval_steps: int = 1
    # Cap on the prompt tokens of one step's prefill work (SGLang's --max-prefill-tokens, its
    # PrefillAdder rem_input_tokens): once a step holds prefill work, a waiting request is
    # taken only if its whole remaining prompt fits under the cap (the first request of a step
    # always enters, cut by the step budget). None: no cap beyond max_num_batched_tokens.
    max_prefill_tokens: int | None = None
    # With chunked prefill off, whole prompts still ride beside the decode batch (the style's
    # mix_whole_prompts: TensorRT-LLM's in-flight batching); else they run alone (vLLM V0).
    mix_whole_prompts: bool = False
    # KV blocks each running request holds for a hybrid model's recurrent state, taken with its
    # first chunk and given back when it leaves (vLLM's hybrid KV manager pages states in the
    # KV pool); 0 for a model without one or an engine with a state pool of its own.
    state_blocks: int = 0
    # Keep computed KV blocks by content and reuse them for prompts that start alike
    # (serving/prefix_cache.py): vLLM's automatic prefix caching, SGLang's radix cache,
    # TensorRT-LLM's KV block reuse. Only requests whose prompts carry content use it.
    prefix_caching: bool = False
    # Host tier of the prefix cache (deployment.kv_offload): blocks it holds for this KV pool
    # (0: none) and the seconds to load one block back to the GPU.
    offload_blocks: int = 0
    reload_s_per_block: float = 0.0
    # Derived once (the scheduler reads it every step): prefill work runs in steps of its own,
    # the decodes waiting.
    separate_prefill: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        mixes = self.mix_prefill_decode and (self.chunked_prefill or self.mix_whole_prompts)
        object.__setattr__(self, "separate_prefill", not mixes)


@dataclass(slots=True)
class PlannedStep:
    """What one step runs, and the prefill chunks to commit when it ends."""

    batch: BatchShape
    chunks: list[tuple[Request, int]]
    num_seqs: int
    # Seconds loading host-tier KV blocks the step's admissions found (deployment.kv_offload):
    # the step waits for them before it runs.
    reload_s: float = 0.0


class _Waiting(Protocol):
    """The waiting queue: FCFS, or by (priority, arrival order) when the policy is `priority`."""

    def __len__(self) -> int: ...

    def push(self, r: Request) -> None: ...

    def push_front(self, r: Request) -> None:
        """A preempted request goes back ahead of the others (its priority keeps its place)."""

    def peek(self) -> Request: ...

    def pop(self) -> Request: ...


class _FcfsWaiting(deque[Request]):
    """FCFS: a deque itself, so the scheduler's `len()` of it, asked a few times every step,
    is a C call."""

    push = deque.append
    push_front = deque.appendleft
    pop = deque.popleft

    def peek(self) -> Request:
        return self[0]


class _PriorityWaiting:
    """A heap by (priority, arrival order); a preempted request keeps its place by both."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Request]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, r: Request) -> None:
        heapq.heappush(self._heap, (r.priority, r.index, r))

    push_front = push

    def peek(self) -> Request:
        return self._heap[0][2]

    def pop(self) -> Request:
        return heapq.heappop(self._heap)[2]


def waiting_queue(policy: str) -> _Waiting:
    """The waiting queue of a scheduling policy (fcfs or priority)."""
    return _PriorityWaiting() if policy == "priority" else _FcfsWaiting()
