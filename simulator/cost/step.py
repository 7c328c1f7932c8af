"""The cost of one engine step for a batch described by aggregates: the physics/simulation seam.

`StepModel` is built once per (model, GPU, layout, formats) and answers two questions:
`cost(batch)` gives the full per-operator breakdown (the teaching view), `time_s(batch)` the
same total through a fast path that memoizes the parts that depend only on the token count.
Both sum the same operator functions (`operators`), so they cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from simulator.cost import operators
from simulator.cost.kernels import Kernels
from simulator.cost.linear_attention import (
    LinearConsts,
    linear_consts_of,
    linear_decode_terms,
    linear_rates,
    linear_terms,
)
from simulator.cost.operators import (
    AttentionConsts,
    IndexerConsts,
    attention_fixed_s,
    attention_terms,
    indexer_terms,
)
from simulator.cost.ops import OpCost
from simulator.cost.shape import BatchShape, StepCost
from simulator.model.architecture import Architecture

FloatArray = npt.NDArray[np.float64]


def _sum_time(ops: list[OpCost]) -> float:
    return sum(o.time_s for o in ops)


@dataclass(frozen=True)
class StepModel(Kernels):
    """A configured chip that costs whole steps: by operator (`cost`) or fast (`time_s`)."""

    _token_cache: dict[int, float] = field(default_factory=dict, repr=False, compare=False)
    _head_cache: dict[int, float] = field(default_factory=dict, repr=False, compare=False)
    _rank_cache: dict[tuple[int, int, int], float] = field(
        default_factory=dict, repr=False, compare=False
    )
    _group_cache: dict[tuple[int, int], float] = field(
        default_factory=dict, repr=False, compare=False
    )

    @cached_property
    def _attn_consts(self) -> AttentionConsts:
        return operators.attention_consts(self)

    @cached_property
    def _idx_consts(self) -> IndexerConsts:
        return operators.indexer_consts(self)

    @cached_property
    def _attn_fixed(self) -> tuple[float, float]:
        return attention_fixed_s(self)

    @cached_property
    def _lin_consts(self) -> LinearConsts | None:
        return linear_consts_of(self)

    @cached_property
    def _lin_rates(self) -> tuple[float, float, float]:
        """(FLOP/s, bytes/s, launch seconds of all linear layers) of a Gated DeltaNet row."""
        rate, bw = linear_rates(self)
        layers = 0 if self._lin_consts is None else self._lin_consts.layers
        return rate, bw, layers * self.hw.kernel_launch_overhead_s

    def _linear_s(self, terms: tuple[float, float] | None) -> float:
        """Time of one Gated DeltaNet row (linear_attention.linear_terms), as attention_ops
        prices it; 0 for an empty part."""
        if terms is None:
            return 0.0
        rate, bw, launches = self._lin_rates
        return max(terms[0] / rate, terms[1] / bw) + launches

    def _linear_decode_s(self, decode_seqs: int, ranks: int | None = None) -> float:
        """A hybrid model's recurrence in a pure decode step of `decode_seqs` sequences (their
        contexts do not matter); 0 for a model without linear layers."""
        if self._lin_consts is None:
            return 0.0
        dp = self.layout.attention_data_parallel if ranks is None else ranks
        return self._linear_s(linear_decode_terms(self._lin_consts, decode_seqs, 1, dp))

    def with_arch(self, arch: Architecture) -> StepModel:
        """This chip and layout costing `arch` instead."""
        return self.with_changes(arch=arch)

    def with_changes(self, **changes: Any) -> StepModel:
        """This step model with `changes` to its fields (fresh memo caches: they hold the old
        fields' step times)."""
        return replace(self, **changes, _token_cache={}, _head_cache={}, _rank_cache={},
                       _group_cache={})

    def token_ops(self, tokens: int) -> list[OpCost]:
        """Projections, MLP/MoE, norms and collectives of `tokens` tokens through all layers."""
        return operators.token_ops(self, tokens)

    def head_ops(self, rows: int) -> list[OpCost]:
        """LM head, logits gather and sampling for `rows` sampled positions."""
        return operators.head_ops(self, rows)

    def attention_ops(self, b: BatchShape) -> list[OpCost]:
        """Attention rows: compute at the attention kernels' rate, KV at their bandwidth."""
        return operators.attention_ops(self, self._attn_consts, b)

    def _attention_time_s(self, b: BatchShape, ranks: int | None = None) -> float:
        """sum(op.time_s for op in attention_ops(b)) without building rows (the hot path);
        `ranks`: split `b` over that many attention-DP ranks (default: the layout's)."""
        consts = self._attn_consts
        rate, bw, layers, decode_rate, decode_bw = consts[4], consts[5], consts[8], *consts[9:]
        prefill_fixed, decode_fixed = self._attn_fixed
        prefill, decode = attention_terms(self, consts, b, ranks)
        t = 0.0
        if prefill is not None:
            t += max(prefill[0] / rate, prefill[1] / bw) + layers * prefill_fixed
        if decode is not None:
            t += max(decode[0] / decode_rate, decode[1] / decode_bw) + layers * decode_fixed
        if self._idx_consts is not None:
            idx = indexer_terms(self, self._idx_consts, b, ranks)
            if idx is not None:
                t += max(idx[0] / decode_rate, idx[1] / decode_bw) + (
                    layers * self.hw.kernel_launch_overhead_s)
        if self._lin_consts is not None:
            dp = self.layout.attention_data_parallel if ranks is None else ranks
            lin_prefill, lin_decode = linear_terms(self._lin_consts, b, dp)
            t += self._linear_s(lin_prefill)
            t += self._linear_s(lin_decode)
        return t

    def cost(self, b: BatchShape) -> StepCost:
        """Full per-operator breakdown of one step."""
        ops = self.token_ops(b.tokens)
        ops[1:1] = self.attention_ops(b)
        ops.extend(self.head_ops(b.sampled_rows))
        return StepCost.from_ops(ops)

    def _token_and_head_s(self, tokens: int, rows: int) -> float:
        """Time of everything but attention: memoized, it depends only on the two counts."""
        t = self._token_cache.get(tokens)
        if t is None:
            t = self._token_cache[tokens] = _sum_time(self.token_ops(tokens))
        h = self._head_cache.get(rows)
        if h is None:
            h = self._head_cache[rows] = _sum_time(self.head_ops(rows))
        return t + h

    def _group_time_s(self, tokens: int, rank_tokens: int) -> float:
        """Time of the replica-wide part of a step (collectives, MLP/MoE, pipeline sends)."""
        key = (tokens, rank_tokens)
        t = self._group_cache.get(key)
        if t is None:
            t = self._group_cache[key] = _sum_time(operators.group_ops(self, tokens, rank_tokens))
        return t

    def time_s(self, b: BatchShape) -> float:
        """Same total as cost(b).step_time_s, memoizing the token-count-only parts."""
        return self._token_and_head_s(b.tokens, b.sampled_rows) + self._attention_time_s(b)

    def decode_times_s(self, decode_seqs: int, context_tokens: FloatArray) -> FloatArray:
        """time_s of pure decode steps of `decode_seqs` sequences, one per summed context in
        `context_tokens`, vectorized (the serving engine's runs of unchanged batches). Same
        operations in the same order as the scalar path, so the floats agree."""
        base = self._token_and_head_s(decode_seqs, decode_seqs)
        result: FloatArray = base + self.decode_attention_s(decode_seqs, context_tokens)
        return result

    def decode_step_times_s(self, decode_seqs: int, context_tokens: int, steps: int) -> list[float]:
        """decode_times_s of `steps` consecutive pure decode steps from `context_tokens`
        summed context (each step adds one token per sequence), one float at a time: for
        short runs, where numpy's per-call cost exceeds the arithmetic. The same operations
        in the same order as decode_attention_s, so the floats agree (tests/test_cost.py)."""
        base = self._token_and_head_s(decode_seqs, decode_seqs)
        consts = self._attn_consts
        per_pair_d, kv_tok, n_full, n_sw, layers = (consts[i] for i in (1, 2, 6, 7, 8))
        rate, bw = consts[9], consts[10]
        dp = self.layout.attention_data_parallel
        fixed = layers * self.hw.attention_decode_fixed_s
        per_pair = per_pair_d * 1
        window = self.arch.attention_window if n_sw else None
        cap_sw = decode_seqs / dp * window if window is not None else 0.0
        out = []
        sparse = self._idx_consts is not None
        lin = self._linear_decode_s(decode_seqs)
        for i in range(steps):
            ctx = (float(context_tokens + decode_seqs * i) + decode_seqs * 1) / dp
            work = n_full * ctx + (n_sw * min(ctx, cap_sw) if window is not None else 0.0)
            t = max(per_pair * work / rate, kv_tok * work / bw) + fixed
            if sparse:
                t += self._indexer_decode_s(ctx)
            out.append(base + (t + lin))
        return out

    def _indexer_decode_s(self, ctx: Any) -> Any:
        """The indexer's time in a pure decode step of summed per-rank context `ctx` (a float
        or an array), by indexer_terms' arithmetic in its order (the floats agree)."""
        assert self._idx_consts is not None
        per_pair, key = self._idx_consts
        consts = self._attn_consts
        rate, bw, layers = consts[9], consts[10], consts[8]
        pairs = 0.0 + ctx * 1
        tokens = 0.0 + ctx
        flops = per_pair * pairs * layers
        nbytes = key * tokens * layers
        a, b = flops / rate, nbytes / bw
        top = np.maximum(a, b) if isinstance(a, np.ndarray) else max(a, b)  # scalar: no numpy
        return top + layers * self.hw.kernel_launch_overhead_s

    def decode_attention_s(
        self, decode_seqs: int, context_tokens: FloatArray, ranks: int | None = None
    ) -> FloatArray:
        """_attention_time_s of pure decode batches, one per summed context, vectorized;
        `ranks` as there (1: one attention-DP rank's own batch)."""
        consts = self._attn_consts
        per_pair_d, kv_tok, n_full, n_sw, layers = (consts[i] for i in (1, 2, 6, 7, 8))
        rate, bw = consts[9], consts[10]  # the decode kernel's
        dp = self.layout.attention_data_parallel if ranks is None else ranks
        ctx = (context_tokens + decode_seqs * 1) / dp
        window = self.arch.attention_window
        if n_sw and window is not None:
            ctx_sw = np.minimum(ctx, decode_seqs / dp * window)
            work = n_full * ctx + n_sw * ctx_sw
        else:
            work = n_full * ctx + 0.0  # the scalar path adds n_sw * 0.0
        flops = per_pair_d * 1 * work
        nbytes = kv_tok * work
        fixed = layers * self.hw.attention_decode_fixed_s
        # The scalar path starts from 0.0 and adds this term: the same float.
        attention: FloatArray = np.maximum(flops / rate, nbytes / bw) + fixed
        if self._idx_consts is not None:
            attention = attention + self._indexer_decode_s(ctx)
        if self._lin_consts is not None:
            attention = attention + self._linear_decode_s(decode_seqs, ranks)
        return attention
