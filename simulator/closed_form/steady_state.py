"""The fluid limit of continuous batching: the steady state one scheduling unit settles into.

A unit is what one scheduler serves (a replica, or one attention-DP rank / pipeline slot of
it). Parametrized by its mean decode batch B, everything follows in closed form from Little's
law and the step cost: each step every decoder emits τ tokens (τ = 1 without speculation), so
a request decodes for D = (O - 1) / τ steps and B / D requests finish (and as many must be
prefilled) per step. Prefill rides in the steps as chunks (engines that mix them, vLLM and
TensorRT-LLM) or runs in steps of its own (SGLang's default, chunked prefill off); either way
the extra time per step is the prefill of B / D prompts, and the rate the batch sustains is
λ(B) = B / (D t(B)). The open-loop solve inverts λ(B) by bisection; the capacity is λ at the
largest batch the unit allows (max_num_seqs, the KV blocks, the token budget).

Queueing uses the standard approximations: Kingman's G/G/1 formula for the prefill channel
(Kingman 1961, "The single server queue in heavy traffic") and Allen-Cunneen's G/G/c
correction of Erlang C for the batch seats (Allen, "Probability, Statistics and Queueing
Theory", 1990, §6; Whitt 1993, "Approximations for the GI/G/m queue"), with the exponential
tail P(W > w) ≈ P(wait) exp(-P(wait) w / E[W]) for percentiles (Kingman's heavy-traffic
limit). All pure functions of frozen inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

# (decode seqs, prefill tokens, prefill seqs, mean cached prefix of the chunks) -> wall s of
# one step of the unit, host time included.
StepFn = Callable[[float, float, float, float], float]

Z99 = 2.3263478740408408  # standard normal quantile at 0.99
BISECT_STEPS = 40


@dataclass(frozen=True, slots=True)
class Unit:
    """One scheduler's limits and how its steps are built."""

    step_s: StepFn
    max_seqs: int
    budget_tokens: int  # max_num_batched_tokens
    kv_tokens: int  # KV cache of this unit, in tokens
    mixes: bool  # prefill chunks ride along with decodes (else prefill-only steps)
    chunked: bool  # chunked prefill on (else a prompt is prefilled whole)
    tokens_per_step: float = 1.0  # τ: tokens one decoder emits per step (speculation: > 1)
    verify_tokens: int = 0  # k: draft tokens verified per decoder (they use token budget)
    reserve_full: bool = False  # KV reserved for prompt + whole output at admission
    block_tokens: int = 16
    decodes_first_token: bool = False  # disaggregated decode pool: prefill happened elsewhere
    prefills_only: bool = False  # disaggregated prefill pool: no decoding here
    # Attention-DP ranks stepping in lockstep (the unit is one rank): a step carrying a chunk
    # on any rank holds every rank for it (chunk_step_s costs it).
    lockstep_ranks: int = 1
    # Whole steps a busy engine makes an arrival wait beyond the rest of the step under way
    # (serving/intake.py): 1 for a one-step lookahead, plus (n - 1) / 2 on average for a poll
    # every n steps.
    wait_steps: float = 0.0
    tree_tokens: int = 0  # tree drafting: positions each decoder feeds the verify (0: k + 1)
    # Disaggregated decode pool whose prefill pool emitted the first token (DistServe): it
    # decodes the other outputs only, and adds nothing to TTFT.
    first_token_from_prefill: bool = False
    # KV tokens a running request's recurrent state takes when the engine pages states in its
    # KV pool (a hybrid model under vLLM: SchedulerConfig.state_blocks x block size).
    state_tokens: int = 0
    # Attention-DP: a step in which one rank carries the prompt chunk and the others decode
    # (the ranks step together); None: as step_s costs it (one rank).
    chunk_on_one_rank_s: StepFn | None = None
    # SGLang's --max-prefill-tokens: past a step's first prompt, another enters only if it fits
    # what is left of this cap (serving/admission.py, which also counts a mixed step's
    # decodes); None where only the token budget limits a step's prompts.
    max_prefill_tokens: int | None = None

    def chunk_step_s(self, decode: float, prefill: float, prefill_seqs: float,
                     offset: float) -> float:
        """A step carrying one chunk on one rank (of lockstep_ranks), the others decoding."""
        step = self.chunk_on_one_rank_s or self.step_s
        return step(decode, prefill, prefill_seqs, offset)

    def burst_tokens_per_step(self, input_tokens: float) -> float:
        """Prompt tokens one step of a burst of identical prompts takes: the token budget, or
        under a max_prefill_tokens cap the whole prompts that fit it (at least one, chunked
        to the budget), as serving/admission.py admits them; a burst's steps carry no
        decoders yet, so none are taken off the cap."""
        budget = float(self.budget_tokens)
        cap = self.max_prefill_tokens
        if cap is None or input_tokens >= budget:
            return budget
        whole = max(1.0, math.floor(cap / max(input_tokens, 1.0)))
        return min(budget, whole * input_tokens)

    @property
    def fed_per_decoder(self) -> int:
        """Budget tokens one decoder takes per step: 1, its k drafts + 1, or its tree."""
        return self.tree_tokens or 1 + self.verify_tokens


@dataclass(frozen=True, slots=True)
class Traffic:
    """What the requests ask for, as the moments the fluid model needs."""

    input_mean: float
    output_mean: float
    input_p99: float
    output_p10: float
    input_cv2: float  # squared coefficient of variation of prompt lengths
    output_cv2: float  # and of output lengths
    arrival_cv2: float  # of the gaps between arrivals (Poisson 1, constant 0)
    # Time-weighted cached context of a decoding sequence, E[O (I + O/2)] / E[O]; and the KV
    # one request holds on average over its stay (prompt + half its output, or all of it).
    decode_context: float
    kv_per_request: float


@dataclass(frozen=True, slots=True)
class Operating:
    """The steady state at one batch: its step, what it sustains, and the prefill channel."""

    batch: float  # mean decoders in the step
    rate_per_s: float  # arrivals the unit sustains at this batch
    step_s: float  # mean wall time between a decoder's tokens (prefill work included)
    decode_step_s: float  # a step carrying no prefill
    prefill_s: float  # one request's prefill (all its chunks), engine side
    prefill_load: float  # utilisation of the prefill channel (token budget / prefill steps)


def decode_steps(traffic: Traffic, unit: Unit) -> float:
    """D: steps a request decodes for (its first token comes from prefill unless it is a
    disaggregated decode pool, which samples it in its first step, or whose prefill pool did)."""
    samples_first = unit.decodes_first_token and not unit.first_token_from_prefill
    tokens = traffic.output_mean if samples_first else traffic.output_mean - 1.0
    return max(tokens, 0.0) / unit.tokens_per_step


def kv_batch_limit(unit: Unit, traffic: Traffic) -> float:
    """Sequences the KV cache holds at once, each at its average footprint (half a block of
    rounding each)."""
    per_seq = traffic.kv_per_request + unit.block_tokens / 2 + unit.state_tokens
    return unit.kv_tokens / per_seq if per_seq > 0 else math.inf


def batch_limit(unit: Unit, traffic: Traffic) -> tuple[float, str]:
    """The largest mean batch and what sets it: max_num_seqs, the KV cache or the budget."""
    limits = {"max_num_seqs": float(unit.max_seqs), "kv_cache": kv_batch_limit(unit, traffic)}
    d = decode_steps(traffic, unit)
    if unit.mixes and d > 0 and not unit.decodes_first_token:
        # Every step carries its share of prefill: B (1 + k) + B I / D <= budget. (A P/D
        # decode unit prefills nothing: its requests arrive with their KV computed.)
        limits["token_budget"] = unit.budget_tokens / (unit.fed_per_decoder
                                                       + traffic.input_mean / d)
    elif d > 0:
        limits["token_budget"] = unit.budget_tokens / unit.fed_per_decoder
    name = min(limits, key=lambda k: limits[k])
    return limits[name], name


def _prefill_chunks(tokens: float, room: float, chunked: bool) -> tuple[float, float]:
    """(chunks, tokens per chunk) of a prompt given `room` tokens per step."""
    if not chunked or room >= tokens:
        return 1.0, tokens
    n = math.ceil(tokens / max(room, 1.0))
    return float(n), tokens / n


def operating_point(unit: Unit, traffic: Traffic, batch: float) -> Operating:
    """The steady state with a mean decode batch of `batch` sequences (closed form)."""
    i = traffic.input_mean
    d = decode_steps(traffic, unit)
    seen = max(1.0, batch)  # a decoder alone still pays a whole step
    if unit.prefills_only:
        n, c = _prefill_chunks(i, unit.budget_tokens, True)
        alone = n * unit.step_s(0.0, c, 1.0, c * (n - 1) / 2)
        return Operating(0.0, 0.0, 0.0, 0.0, alone, 0.0)
    t0 = unit.step_s(seen, 0.0, 0.0, 0.0)
    new = batch / d if d > 0 else 0.0  # prompts to prefill per step
    if unit.decodes_first_token:
        return Operating(batch, batch / (d * t0) if d > 0 else 0.0, t0, t0, 0.0,
                         batch / max(1.0, unit.max_seqs))
    if unit.mixes:
        room = unit.budget_tokens - seen * unit.fed_per_decoder
        n, c = _prefill_chunks(i, room, unit.chunked)
        offset = c * (n - 1) / 2
        chunks = new * n  # chunks per step on this rank
        busy = chunks * unit.lockstep_ranks  # chunks per step on any rank
        if chunks <= 1.0:
            # One chunk in a share of the steps (on any lockstep rank), the others decode only.
            t1 = unit.chunk_step_s(seen, c, 1.0, offset)
            t = t0 + min(1.0, busy) * (t1 - t0)
        else:  # every step carries B I / D prompt tokens
            t1 = t = unit.step_s(seen, new * i, chunks, offset)
        load = new * i / max(room, 1.0)
        return Operating(batch, batch / (d * t) if d > 0 else 0.0, t, t0, n * t1, load)
    # Prefill-only steps, prefill first: the decoders wait through them.
    n, c = _prefill_chunks(i, unit.budget_tokens, unit.chunked)
    alone = n * unit.chunk_step_s(0.0, c, 1.0, c * (n - 1) / 2)
    if new <= 1.0:
        per_step = min(1.0, new * unit.lockstep_ranks) * alone
    else:  # several prompts per prefill step, up to the budget
        steps = max(1.0, math.ceil(new * i / unit.budget_tokens))
        per_step = steps * unit.step_s(0.0, new * i / steps, new / steps, 0.0)
    t = t0 + per_step
    return Operating(batch, batch / (d * t) if d > 0 else 0.0, t, t0, alone, per_step / t)


def prefill_capacity_per_s(unit: Unit, traffic: Traffic) -> float:
    """Requests/s a prefill-only unit sustains: full budget steps back to back."""
    i = traffic.input_mean
    if i >= unit.budget_tokens:
        return 1.0 / operating_point(unit, traffic, 0.0).prefill_s
    per_step = math.floor(unit.budget_tokens / i)
    return per_step / unit.step_s(0.0, per_step * i, per_step, 0.0)


def capacity(unit: Unit, traffic: Traffic) -> tuple[Operating, str]:
    """The most load the unit sustains, the operating point there and what binds."""
    cap, why = batch_limit(unit, traffic)
    best = operating_point(unit, traffic, cap)
    return best, why


def solve_rate(unit: Unit, traffic: Traffic, rate_per_s: float) -> Operating | None:
    """The steady state at `rate_per_s` arrivals, or None when the unit cannot sustain it."""
    top, _ = capacity(unit, traffic)
    if rate_per_s >= top.rate_per_s:
        return None
    lo, hi = 0.0, top.batch
    for _ in range(BISECT_STEPS):
        mid = (lo + hi) / 2
        if operating_point(unit, traffic, mid).rate_per_s < rate_per_s:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-3 * max(1.0, hi):
            break
    return operating_point(unit, traffic, hi)


def solve_population(unit: Unit, traffic: Traffic, population: float,
                     extra_s: float = 0.0) -> tuple[Operating, float]:
    """Closed loop: the steady state with `population` requests in the unit (each also spends
    `extra_s` outside it, e.g. the client front end), and the seat wait of those that find
    the batch full. Little's law: population = λ (prefill + D t + extra)."""
    d = decode_steps(traffic, unit)
    top, _ = capacity(unit, traffic)

    def people(op: Operating) -> float:
        return op.rate_per_s * (op.prefill_s + d * op.step_s + extra_s)

    full = people(top)
    if full <= population:
        wait = (population - full) / top.rate_per_s if top.rate_per_s > 0 else math.inf
        return top, wait
    lo, hi = 0.0, top.batch
    for _ in range(BISECT_STEPS):
        mid = (lo + hi) / 2
        if people(operating_point(unit, traffic, mid)) < population:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-3 * max(1.0, hi):
            break
    return operating_point(unit, traffic, hi), 0.0


def kingman_wait_s(load: float, service_s: float, arrival_cv2: float, service_cv2: float
                   ) -> float:
    """Mean wait of a G/G/1 queue (Kingman): ρ/(1-ρ) · (ca² + cs²)/2 · E[S]."""
    if load <= 0:
        return 0.0
    if load >= 1:
        return math.inf
    return load / (1 - load) * (arrival_cv2 + service_cv2) / 2 * service_s


def erlang_c(servers: int, load: float) -> float:
    """Probability that an arrival waits in an M/M/c queue at utilisation `load`
    (Erlang B by its stable recursion, then C = B / (1 - ρ (1 - B)))."""
    if load <= 0:
        return 0.0
    if load >= 1:
        return 1.0
    a = load * servers
    b = 1.0
    for k in range(1, servers + 1):
        b = a * b / (k + a * b)
    return b / (1 - load * (1 - b))


def seat_wait_s(seats: int, load: float, residence_s: float, arrival_cv2: float,
                service_cv2: float) -> tuple[float, float]:
    """Allen-Cunneen G/G/c wait for one of `seats` batch slots held `residence_s` each:
    (P(wait), mean wait) = (C, C · (ca² + cs²)/2 · E[S] / (c (1 - ρ)))."""
    if load >= 1:
        return 1.0, math.inf
    c = erlang_c(seats, load)
    return c, c * (arrival_cv2 + service_cv2) / 2 * residence_s / (seats * (1 - load))


def tail_s(mean_s: float, p_wait: float, q: float = 0.99) -> float:
    """The q-quantile of a wait with an exponential tail: P(W > w) = p exp(-p w / E[W])."""
    if mean_s <= 0 or p_wait <= 0:
        return 0.0
    if math.isinf(mean_s):
        return math.inf
    if p_wait <= 1 - q:
        return 0.0
    return mean_s / p_wait * math.log(p_wait / (1 - q))


def batch_p99(batch: float, cap: float) -> float:
    """The 99th percentile of a Poisson-like batch of mean `batch`, within its cap."""
    return min(cap, batch + Z99 * math.sqrt(max(batch, 0.0)))
