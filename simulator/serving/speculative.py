"""Speculative decoding over time: seeded accepted-token draws and the step schedule they imply.

Each verify step a decoding sequence emits 1 + (accepted drafts) tokens: draft position i is
accepted with probability a_i given positions before it were, and the target's bonus token
always comes, so P(emit j+1) = a_1…a_j (1 − a_{j+1}) and the mean is 1 + a_1 + a_1a_2 + ….
When a request starts to decode, its whole sequence of per-step emissions is drawn at once from
a generator seeded by (workload seed, request, decode epoch), so every run is reproducible and a
request's finish step is known in advance, as the scheduler's finish buckets need.

`SpecSchedule` keeps, per global decode step, what all decoders together emit, the KV blocks
their accepted tokens newly fill, and the transient blocks the k draft tokens occupy during the
verify (freed when the rejected tokens are discarded). That keeps a step O(changes), not
O(batch), exactly as the plain decode aggregates do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from simulator.serving.request import Request

IntArray = npt.NDArray[np.int64]


def emission_pmf(rates: tuple[float, ...]) -> list[float]:
    """P(a step emits j tokens) for j = 1 .. k+1 under per-position rates (chain drafts)."""
    pmf, reach = [], 1.0
    for a in rates:
        pmf.append(reach * (1.0 - a))
        reach *= a
    pmf.append(reach)
    return pmf


@dataclass(frozen=True, eq=False)  # an array field: compare by identity
class SpecDecoding:
    """How one replica speculates: k drafts, their acceptance, and the auto-policy cut-off."""

    k: int
    rates: tuple[float, ...]  # per-position acceptance of requests of the workload's own kind
    seed: int
    off_above_batch: int | None = None  # policy auto: no drafts while more decoders than this
    crossover_batch: int | None = None  # smallest batch where drafting stops paying (None: never)
    crossover_context_tokens: float = 0.0  # the per-sequence context it was judged at
    # DSpark: the verify length follows the drafter's confidence, a variable k per sequence
    # and step (see `drafts_verified`); every other method verifies all k drafts.
    confidence_scheduled: bool = False
    # Mixed traffic: per-position rates by kind code (WORKLOAD_KINDS order) and each request's
    # code, by request index (-1: `rates`). None: every request draws from `rates`.
    kind_rates: tuple[tuple[float, ...], ...] | None = None
    request_kind: IntArray | None = None
    tree_tokens: int = 0  # tree drafting: positions each decoder verifies (0: its k + 1)

    @property
    def mean_emitted(self) -> float:
        return mean_emitted(self.rates)

    def rates_of(self, request: int) -> tuple[float, ...]:
        """The per-position rates request `request` draws its acceptance from."""
        if self.request_kind is None or self.kind_rates is None:
            return self.rates
        code = int(self.request_kind[request])
        return self.rates if code < 0 else self.kind_rates[code]

    def drafts_verified(self, emitted: IntArray, k_on: bool) -> IntArray:
        """Drafts each step verifies. Fixed k, or under confidence scheduling the prefix up to
        and including the first rejected draft: min(k, emitted). That takes the confidence
        head as exact, the bound on what scheduling saves (the DSpark paper reports no
        miscalibration figure to model one with)."""
        if not k_on:
            return np.zeros_like(emitted)
        if self.confidence_scheduled:
            return np.minimum(emitted, self.k)
        return np.full_like(emitted, self.k)

    def draw(self, request: int, epoch: int, remaining: int, k_on: bool) -> IntArray:
        """Tokens emitted at each of a request's verify steps until `remaining` are out (the
        last step emits only what is left: generation stops at the output length)."""
        if not k_on or remaining <= 1:
            return np.ones(remaining, dtype=np.int64)
        rates = self.rates_of(request)
        per_step = mean_emitted(rates)
        rng = np.random.default_rng((self.seed, request, epoch))
        cdf = np.cumsum(emission_pmf(rates))
        cdf[-1] = 1.0
        parts: list[IntArray] = []
        total = 0
        while total < remaining:
            n = math.ceil((remaining - total) / per_step * 1.1) + 8
            e = np.searchsorted(cdf, rng.random(n), side="right").astype(np.int64) + 1
            parts.append(e)
            total += int(e.sum())
        e = np.concatenate(parts)
        cum = np.cumsum(e)
        steps = int(np.searchsorted(cum, remaining, side="left")) + 1
        e = e[:steps].copy()
        e[-1] = remaining - (int(cum[steps - 2]) if steps > 1 else 0)
        return e


def mean_emitted(rates: tuple[float, ...]) -> float:
    return sum((j + 1) * p for j, p in enumerate(emission_pmf(rates)))


def close_decode_run(r: Request, step: int) -> None:
    """r leaves the decode set at global `step`: keep what its run emitted (for token times)
    and tally its verify steps and their tokens (for acceptance by request kind)."""
    n = step - r.decode_start_step
    done = np.diff(r.spec_cum)[:n]
    if done.size:
        r.spec_done = [*(r.spec_done or ()), done]
        verified = r.spec_drafts[:n] > 0
        r.spec_verify_steps += int(np.count_nonzero(verified))
        r.spec_verify_emitted += int(done[verified].sum())
    r.spec_cum = None


class SpecSchedule:
    """Per global decode step: tokens emitted, KV blocks newly filled, transient draft blocks."""

    def __init__(self, block_size: int, reserve_full: bool = False) -> None:
        self.bs = block_size
        self.reserve_full = reserve_full  # blocks for every output are held from admission
        self.emit = np.zeros(1024, dtype=np.int64)
        self.grow = np.zeros(1024, dtype=np.int64)
        self.extra = np.zeros(1024, dtype=np.int64)
        self.drafts = np.zeros(1024, dtype=np.int64)  # drafts all decoders verify, per step

    def _ensure(self, end: int) -> None:
        size = self.emit.size
        if end <= size:
            return
        new = max(end, 2 * size)
        for name in ("emit", "grow", "extra", "drafts"):
            old = getattr(self, name)
            arr = np.zeros(new, dtype=np.int64)
            arr[:size] = old
            setattr(self, name, arr)

    def _rows(self, r: Request) -> tuple[IntArray, IntArray, IntArray]:
        """(emitted, new blocks, transient blocks) of each of r's verify steps."""
        cum = r.spec_cum
        assert cum is not None
        bs = self.bs
        before = r.decode_start_kv + cum[:-1]
        after = r.decode_start_kv + cum[1:]
        held = -(-before // bs)
        grow = -(-after // bs) - held
        verify = -(-(before + 1 + r.spec_drafts) // bs)  # KV written by the verify pass
        extra = np.maximum(verify - -(-after // bs), 0)
        if self.reserve_full:
            grow, extra = grow * 0, extra * 0
        return np.diff(cum), grow, extra

    def add(self, r: Request, sign: int, from_step: int) -> None:
        """Add (sign 1) or remove (sign -1) r's rows for global steps >= from_step."""
        e, g, x = self._rows(r)
        s0 = r.decode_start_step
        skip = max(0, from_step - s0)
        if skip >= e.size:
            return
        self._ensure(s0 + e.size)
        sl = slice(s0 + skip, s0 + e.size)
        self.emit[sl] += sign * e[skip:]
        self.grow[sl] += sign * g[skip:]
        self.extra[sl] += sign * x[skip:]
        self.drafts[sl] += sign * r.spec_drafts[skip:]

    def row_at(self, r: Request, step: int) -> tuple[int, int]:
        """(new, transient) blocks r needs at global `step` (0, 0 outside its steps)."""
        j = step - r.decode_start_step
        _, g, x = self._rows(r)
        if not 0 <= j < g.size:
            return 0, 0
        return int(g[j]), int(x[j])

    def need(self, step: int) -> int:
        self._ensure(step + 1)
        return int(self.grow[step] + self.extra[step])
