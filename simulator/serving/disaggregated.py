"""Prefill/decode disaggregation: a prefill pool, a KV transfer, a decode pool.

A request prefills on a prefill replica (its own queue, prefill-only steps under that pool's
scheduler limits) and is done there once its prompt is cached. Its KV then moves to a decode
replica chosen by the router: transfers queue FIFO for the sending replica's link and the
receiving replica's link, so concurrent transfers share them. On arrival the request waits in
the decode replica's queue for KV blocks, then joins its batch with all but the last prompt
token cached: like vLLM's P/D connectors, the decode side recomputes that token to sample the
first output token, so TTFT = prefill queue + prefill + exposed transfer + decode queue + the
first decode step. An engine style whose prefill replica emits the first token (DistServe)
ends TTFT with the prefill instead: the decode side then makes the other outputs, its first
step processing the first token to sample the second. (Layer-wise streaming: the part of a
transfer hidden under the prefill is taken to use the link while the prefill runs; only the
exposed remainder holds it.)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import simpy

from simulator.cost.draft import SpeculativeStepModel
from simulator.cost.kv_transfer import KVLinkCost
from simulator.cost.step import StepModel
from simulator.engines.style import EngineStyle
from simulator.inputs.deployment import WorkerPool
from simulator.serving.clock import Clock
from simulator.serving.ranks_setup import make_replicas
from simulator.serving.replica import Replica, StepLog
from simulator.serving.request import Request
from simulator.serving.router import Router
from simulator.serving.sched_types import SchedulerConfig


@dataclass(frozen=True)
class PoolSpec:
    """What one pool's replicas are built from."""

    replicas: int
    gpus_per_replica: int
    cfg: SchedulerConfig
    model: StepModel | SpeculativeStepModel  # a speculating decode pool: target and drafter
    style: EngineStyle
    kv_capacity_tokens: int
    pool: WorkerPool  # its layout picks the replica kind: plain, pipelined, attention-DP ranks

    @property
    def step_model(self) -> StepModel:
        """The target's step model (a speculating pool's, without its drafter)."""
        model = self.model
        return model.target if isinstance(model, SpeculativeStepModel) else model

    def build(
        self,
        env: Clock,
        on_finish: Callable[[Request], None],
        log: StepLog,
        check: Callable[[Replica, Any, float], None] | None = None,
    ) -> list[Replica]:
        """The pool's replicas, of the same kinds an aggregated deployment of this layout runs
        (pipeline stages with micro-batches in flight, attention-DP ranks)."""
        arch = self.step_model.arch
        return make_replicas(self.pool, arch, (self.model, self.style, self.cfg), env, on_finish,
                             log, check)


class DisaggregatedPools:
    """The two pools and the transfers between them, inside one SimPy environment."""

    def __init__(
        self,
        env: Clock,
        prefill: PoolSpec,
        decode: PoolSpec,
        link: KVLinkCost,
        route: Router,
        output_tokens: npt.NDArray[np.int64],
        on_finish: Callable[[Request], None],
        log: StepLog,
        check: Callable[[Replica, Any, float], None] | None = None,
    ) -> None:
        self.env, self.link, self.route = env, link, route
        self.spec = {"prefill": prefill, "decode": decode}
        self.output_tokens = output_tokens
        self.on_finish = on_finish
        self.prefill_emits_first = prefill.style.prefill_emits_first_token
        self.first_gaps_s: list[float] = []  # first to second token across pools (for ITL)
        n = len(output_tokens)
        nan = np.full(n, math.nan)
        self.prefill_scheduled_s = nan.copy()
        self.prefill_end_s = nan.copy()
        self.transfer_s = nan.copy()  # prefill end to KV landed (link waits included)
        self.link_wait_s = nan.copy()
        self.decode_arrival_s = nan.copy()
        self.decode_scheduled_s = nan.copy()
        self.prefill_preemptions = np.zeros(n, dtype=np.int64)
        self.prefill = prefill.build(env, self._prefilled, StepLog(False))
        for rep in self.prefill:  # a ranked replica numbers a request by its rank, not itself
            rep.on_finish = functools.partial(self._prefilled, src=rep.index)
        self.decode = decode.build(env, self._decoded, log, check)
        self._send_links = [simpy.Resource(env, 1) for _ in self.prefill]
        self._recv_links = [simpy.Resource(env, 1) for _ in self.decode]

    def fits_ever(self, input_tokens: int, output_tokens: int) -> bool:
        """The prompt fits one prefill replica's cache and the whole request a decode one's."""
        p, d = self.prefill[0].sched, self.decode[0].sched
        return p.blocks_for(input_tokens) <= p.cfg.num_blocks and d.fits_ever(
            Request(0, 0.0, input_tokens, output_tokens, 0)
        )

    @staticmethod
    def entry_request(
        index: int, now_s: float, input_tokens: int, output_tokens: int, priority: int
    ) -> Request:
        """The prefill pool's part of a request: its prompt, done once the prompt is cached."""
        del output_tokens  # decoded on the other pool
        return Request(index, now_s, input_tokens, 1, priority)

    def _prefilled(self, r: Request, src: int = 0) -> None:
        i = r.index
        self.prefill_scheduled_s[i] = r.scheduled_s
        self.prefill_end_s[i] = self.env.now
        self.prefill_preemptions[i] = r.preemptions
        if self.prefill_emits_first and self.output_tokens[i] == 1:
            self.on_finish(r)  # its only output came with the prefill: nothing to move
            return
        target = self.route(self.decode, i, r)
        assert isinstance(target, Replica)
        target.assigned += 1  # counted now, so routers see transfers in flight
        self.env.process(self._transfer(r, src, target))

    def _transfer(self, r: Request, src: int, dst: Replica) -> Any:
        env, i = self.env, r.index
        start = env.now
        with self._send_links[src].request() as send:
            yield send
            with self._recv_links[dst.index].request() as recv:
                yield recv
                waited = env.now - start
                # Streaming could only overlap while the link was free for this request.
                overlap_s = max(0.0, start - self.prefill_scheduled_s[i] - waited)
                yield env.timeout(self.link.exposed_s(r.input_tokens, overlap_s))
        self.link_wait_s[i] = waited
        self.transfer_s[i] = env.now - start
        self.decode_arrival_s[i] = env.now
        outputs = int(self.output_tokens[i]) - (1 if self.prefill_emits_first else 0)
        d = Request(i, r.arrival_s, r.input_tokens, outputs, r.priority)
        # The decode side recomputes the last prompt token to sample; when the prefill already
        # emitted the first output, that same one-token step processes it to sample the second.
        d.computed = r.input_tokens - 1
        d.cached_tokens = r.cached_tokens  # what the prefill replica found in its cache
        dst.submit(d, routed=True)

    def _decoded(self, r: Request) -> None:
        i = r.index
        self.decode_scheduled_s[i] = r.scheduled_s
        r.scheduled_s = self.prefill_scheduled_s[i]  # the result's queue_s is the prefill queue
        r.preemptions += int(self.prefill_preemptions[i])
        if self.prefill_emits_first:
            # The decode side's first sample is the request's second token.
            r.resume_tokens_s = [r.first_token_s, *(r.resume_tokens_s or [])]
            self.first_gaps_s.append(r.first_token_s - float(self.prefill_end_s[i]))
            r.first_token_s = float(self.prefill_end_s[i])
            r.output_tokens += 1
            r.generated += 1
        self.on_finish(r)

    @property
    def replicas(self) -> list[Replica]:
        return [*self.prefill, *self.decode]

    @property
    def preemptions(self) -> int:
        return sum(rep.preemptions for rep in self.replicas)

    def busy_fraction(self, pool: Sequence[Replica], end_s: float) -> float:
        span_s = end_s * len(pool)
        return min(1.0, sum(rep.busy_s for rep in pool) / span_s) if span_s > 0 else 0.0

    def gpu_busy_s(self) -> float:
        """GPU-seconds spent in steps, both pools (each replica's busy time × its GPUs)."""
        p, d = self.spec["prefill"], self.spec["decode"]
        # A dense pool's attention-DP ranks run as replicas of their share of the GPUs.
        return (
            sum(rep.busy_s for rep in self.prefill) * p.pool.num_gpus / len(self.prefill)
            + sum(rep.busy_s for rep in self.decode) * d.pool.num_gpus / len(self.decode)
        )
