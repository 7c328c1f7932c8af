"""Routers that pick a replica for each arriving request (a plain registry of functions)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol


class RoutableReplica(Protocol):
    index: int

    @property
    def outstanding_requests(self) -> int: ...

    @property
    def outstanding_tokens(self) -> int: ...


Router = Callable[[Sequence[RoutableReplica], int], RoutableReplica]


def round_robin(replicas: Sequence[RoutableReplica], request_number: int) -> RoutableReplica:
    return replicas[request_number % len(replicas)]


def least_outstanding(replicas: Sequence[RoutableReplica], request_number: int) -> RoutableReplica:
    """Fewest requests assigned and not yet finished; ties go to the lowest index."""
    return min(replicas, key=lambda r: (r.outstanding_requests, r.index))


def shortest_expected_latency(
    replicas: Sequence[RoutableReplica], request_number: int
) -> RoutableReplica:
    """Least work queued: prompt and output tokens not yet processed, a proxy for the wait
    (every replica runs the same model on the same GPUs, so work maps to time alike)."""
    return min(replicas, key=lambda r: (r.outstanding_tokens, r.outstanding_requests, r.index))


ROUTERS: dict[str, Router] = {
    "round_robin": round_robin,
    "least_outstanding": least_outstanding,
    "shortest_expected_latency": shortest_expected_latency,
}
