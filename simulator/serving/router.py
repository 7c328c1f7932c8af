"""Routers that pick a replica (or an attention-DP rank, or a decode replica) for each
request (a plain registry of functions). Each sees the candidates' load and, for prompts with
shared content, how much of the prompt each already holds in its prefix cache.

Cache-aware routing trades two things: sending a session back where its history is cached
saves that prefill, and piling sessions on the replicas that hold the popular prefixes loads
them unevenly. `prefix_affinity` takes only the first into account, `cache_aware` weighs both
in one unit, tokens of work (the idea of llm-d's prefix-cache and load scorers and of Dynamo's
KV router, which weigh the overlap against the load; the weighting here is our own)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from simulator.serving.request import Request


class RoutableReplica(Protocol):
    index: int

    @property
    def outstanding_requests(self) -> int: ...

    @property
    def outstanding_tokens(self) -> int: ...

    def prefix_hit_tokens(self, r: Request) -> int:
        """Prompt tokens of `r` this target would find in its prefix cache now."""


Router = Callable[[Sequence[RoutableReplica], int, Request], RoutableReplica]


def round_robin(replicas: Sequence[RoutableReplica], request_number: int,
                r: Request) -> RoutableReplica:
    return replicas[request_number % len(replicas)]


def least_outstanding(replicas: Sequence[RoutableReplica], request_number: int,
                      r: Request) -> RoutableReplica:
    """Fewest requests assigned and not yet finished; ties go to the lowest index."""
    return min(replicas, key=lambda t: (t.outstanding_requests, t.index))


def shortest_expected_latency(replicas: Sequence[RoutableReplica], request_number: int,
                              r: Request) -> RoutableReplica:
    """Least work queued: prompt and output tokens not yet processed, a proxy for the wait
    (every replica runs the same model on the same GPUs, so work maps to time alike)."""
    return min(replicas, key=lambda t: (t.outstanding_tokens, t.outstanding_requests, t.index))


def prefix_affinity(replicas: Sequence[RoutableReplica], request_number: int,
                    r: Request) -> RoutableReplica:
    """The replica holding the longest cached prefix of the prompt, whatever its load; among
    equals (a prompt no replica holds, or without shared content) the least loaded."""
    if r.content is None:
        return least_outstanding(replicas, request_number, r)
    return min(replicas, key=lambda t: (-t.prefix_hit_tokens(r), t.outstanding_requests,
                                        t.index))


def cache_aware(replicas: Sequence[RoutableReplica], request_number: int,
                r: Request) -> RoutableReplica:
    """Least work in tokens: the work queued there plus this prompt's prefill there (the
    prompt less what that replica has cached). A long cached history outweighs a short queue;
    a long queue outweighs a short history."""
    if r.content is None:
        return shortest_expected_latency(replicas, request_number, r)
    left = r.target - r.computed
    return min(replicas, key=lambda t: (t.outstanding_tokens + left - t.prefix_hit_tokens(r),
                                        t.outstanding_requests, t.index))


ROUTERS: dict[str, Router] = {
    "round_robin": round_robin,
    "least_outstanding": least_outstanding,
    "shortest_expected_latency": shortest_expected_latency,
    "prefix_affinity": prefix_affinity,
    "cache_aware": cache_aware,
}
