"""The workload part of a scenario: arrivals, prompt and output lengths, priorities.

Public keys (docs/architecture.md); `simulator.inputs.scenario` re-exports every name here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from simulator.inputs.common import (
    AsTuple,
    Int32,
    PosFloat,
    PosInt,
    Tokens,
    _invalid,
    _kind_checker,
    _Strict,
    _tag_of,
)
from simulator.inputs.speculative import WorkloadKind


class OfflineArrival(_Strict):
    """Every request is present at time zero."""

    kind: Literal["offline"] = "offline"


class PoissonArrival(_Strict):
    kind: Literal["poisson"] = "poisson"
    # Mean arrivals per second (exponential gaps).
    rate_per_s: PosFloat


class GammaArrival(_Strict):
    """Renewal process with gamma gaps: cv 1 is Poisson, cv > 1 is burstier."""

    kind: Literal["gamma"] = "gamma"
    # Mean arrivals per second.
    rate_per_s: PosFloat
    # coefficient of variation of the gaps; past these bounds the gamma's shape 1/cv^2
    # underflows or overflows a float (use kind: constant for evenly spaced arrivals)
    cv: Annotated[float, Field(ge=1e-3, le=1e3)]


class ConstantArrival(_Strict):
    kind: Literal["constant"] = "constant"
    # Arrivals per second, evenly spaced.
    rate_per_s: PosFloat


class ClosedLoopArrival(_Strict):
    """`concurrency` requests in flight; a new one is sent when one finishes."""

    kind: Literal["closed_loop"] = "closed_loop"
    # Requests in flight at once (clients that each wait for their answer).
    concurrency: PosInt
    # When the clients send their first request: `together` at t = 0, as a benchmark client
    # starts; `random_phase` each at a seeded random instant within one request cycle
    # (concurrency / the closed-form throughput). Identical requests that start together stay
    # in lockstep in the simulation, which measured engines do not (docs/closed-loops.md).
    start: Literal["together", "random_phase"] = "together"


class TraceArrival(_Strict):
    """Arrival times and lengths from a trace file (path relative to the scenario file),
    replayed at its times."""

    kind: Literal["trace"] = "trace"
    # CSV with arrival_s, input_tokens, output_tokens (and optional kind, session_id, turn,
    # hash_ids) columns, the Azure layout, or a Mooncake .jsonl (docs/sessions.md).
    path: Annotated[str, Field(min_length=1)]
    time_scale: PosFloat = 1.0  # multiplies the trace's times: 0.5 replays twice as fast
    # Tokens per block of the trace's hash_ids (Mooncake's traces: 512).
    hash_block_tokens: Annotated[int, Field(ge=1, le=1_000_000)] = 512


ARRIVAL_KINDS: dict[str, type[BaseModel]] = {
    "offline": OfflineArrival,
    "poisson": PoissonArrival,
    "gamma": GammaArrival,
    "constant": ConstantArrival,
    "closed_loop": ClosedLoopArrival,
    "trace": TraceArrival,
}
ArrivalSpec = Annotated[
    Annotated[OfflineArrival, Tag("offline-tag")]
    | Annotated[PoissonArrival, Tag("poisson-tag")]
    | Annotated[GammaArrival, Tag("gamma-tag")]
    | Annotated[ConstantArrival, Tag("constant-tag")]
    | Annotated[ClosedLoopArrival, Tag("closed_loop-tag")]
    | Annotated[TraceArrival, Tag("trace-tag")],
    Discriminator(_tag_of),
    BeforeValidator(_kind_checker("arrival", ARRIVAL_KINDS)),
]


class _Clipped(_Strict):
    """Optional clipping of samples to [min, max] tokens."""

    # Clip samples below this length up to it, tokens.
    min: Tokens | None = None
    # Clip samples above this length down to it, tokens.
    max: Tokens | None = None

    @field_validator("max")
    @classmethod
    def _min_le_max(cls, v: int | None, info: ValidationInfo) -> int | None:
        lo = info.data.get("min")
        if v is not None and lo is not None and v < lo:
            raise _invalid(f"max {v} is below min {lo}")
        return v


class FixedLengths(_Strict):
    kind: Literal["fixed"] = "fixed"
    # Every request has this many tokens.
    value: Tokens


class UniformLengths(_Strict):
    """Integers uniform on [min, max], both included."""

    kind: Literal["uniform"] = "uniform"
    # Smallest length, tokens.
    min: Tokens
    # Largest length, tokens.
    max: Tokens

    @field_validator("max")
    @classmethod
    def _min_le_max(cls, v: int, info: ValidationInfo) -> int:
        lo = info.data.get("min")
        if lo is not None and v < lo:
            raise _invalid(f"max {v} is below min {lo}")
        return v


class NormalLengths(_Clipped):
    kind: Literal["normal"] = "normal"
    # Mean length, tokens.
    mean: PosFloat
    # Standard deviation, tokens.
    std: Annotated[float, Field(ge=0)]


class LognormalLengths(_Clipped):
    """Lognormal lengths, given by exactly one of: {median, sigma}, {median, p90}, {mean, sigma}.

    `sigma` is the standard deviation of log(length); `mean` is the mean of the lengths
    themselves (not of their logarithm).
    """

    kind: Literal["lognormal"] = "lognormal"
    # Median length, tokens.
    median: PosFloat | None = None
    # 90th-percentile length, tokens.
    p90: PosFloat | None = None
    # Mean of the lengths (not of their logarithm), tokens.
    mean: PosFloat | None = None
    # Standard deviation of log(length).
    sigma: PosFloat | None = None

    @model_validator(mode="after")
    def _one_parametrization(self) -> LognormalLengths:
        given = {k for k in ("median", "p90", "mean", "sigma") if getattr(self, k) is not None}
        if given not in ({"median", "sigma"}, {"median", "p90"}, {"mean", "sigma"}):
            got = "+".join(k for k in ("median", "p90", "mean", "sigma") if k in given)
            raise _invalid(
                "lognormal takes exactly one of median+sigma, median+p90 or mean+sigma "
                f"(got {got or 'none of them'})"
            )
        if self.p90 is not None and self.median is not None and self.p90 <= self.median:
            raise _invalid(f"lognormal p90 {self.p90} must be above median {self.median}")
        return self


class EmpiricalLengths(_Clipped):
    """Resampled (with replacement) from inline `values` or from a CSV `column` at `path`."""

    kind: Literal["empirical"] = "empirical"
    # Lengths to resample from, inline.
    values: Annotated[tuple[Tokens, ...], Field(min_length=1), AsTuple] | None = None
    # CSV file to read the lengths from (relative to the scenario file).
    path: Annotated[str, Field(min_length=1)] | None = None
    # Column of that CSV.
    column: Annotated[str, Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> EmpiricalLengths:
        has_file = self.path is not None or self.column is not None
        if self.values is not None and has_file:
            raise _invalid("empirical takes either values or path+column, not both")
        if self.values is None and (self.path is None or self.column is None):
            raise _invalid("empirical needs values, or both path and column (a CSV column)")
        return self


LENGTH_KINDS: dict[str, type[BaseModel]] = {
    "fixed": FixedLengths,
    "uniform": UniformLengths,
    "normal": NormalLengths,
    "lognormal": LognormalLengths,
    "empirical": EmpiricalLengths,
}
LengthSpec = Annotated[
    Annotated[FixedLengths, Tag("fixed-tag")]
    | Annotated[UniformLengths, Tag("uniform-tag")]
    | Annotated[NormalLengths, Tag("normal-tag")]
    | Annotated[LognormalLengths, Tag("lognormal-tag")]
    | Annotated[EmpiricalLengths, Tag("empirical-tag")],
    Discriminator(_tag_of),
    BeforeValidator(_kind_checker("lengths", LENGTH_KINDS)),
]


class Priorities(_Strict):
    """Each request draws a priority; lower value is served first (vLLM convention)."""

    # The priority values requests draw from.
    values: Annotated[tuple[Int32, ...], Field(min_length=1), AsTuple]
    # Relative weight of each value (one per value).
    weights: Annotated[tuple[PosFloat, ...], Field(min_length=1), AsTuple]

    @field_validator("weights")
    @classmethod
    def _same_length(cls, v: tuple[float, ...], info: ValidationInfo) -> tuple[float, ...]:
        values = info.data.get("values")
        if values is not None and len(values) != len(v):
            raise _invalid(f"{len(v)} weights for {len(values)} values; give one weight each")
        return v


class FixedSeconds(_Strict):
    kind: Literal["fixed"] = "fixed"
    # Every draw is this many seconds.
    value_s: Annotated[float, Field(ge=0, le=1e6)]


class ExponentialSeconds(_Strict):
    kind: Literal["exponential"] = "exponential"
    # Mean seconds (memoryless: a user's pause, a tool's latency with a long tail).
    mean_s: Annotated[float, Field(gt=0, le=1e6)]


class LognormalSeconds(_Strict):
    kind: Literal["lognormal"] = "lognormal"
    # Median seconds.
    median_s: Annotated[float, Field(gt=0, le=1e6)]
    # Standard deviation of log(seconds).
    sigma: Annotated[float, Field(gt=0, le=10)]


DURATION_KINDS: dict[str, type[BaseModel]] = {
    "fixed": FixedSeconds,
    "exponential": ExponentialSeconds,
    "lognormal": LognormalSeconds,
}
DurationSpec = Annotated[
    Annotated[FixedSeconds, Tag("fixed-tag")]
    | Annotated[ExponentialSeconds, Tag("exponential-tag")]
    | Annotated[LognormalSeconds, Tag("lognormal-tag")],
    Discriminator(_tag_of),
    BeforeValidator(_kind_checker("think_time_s", DURATION_KINDS)),
]


class SharedPrefix(_Strict):
    """Prompts that open every request (or every session): system prompts, tool definitions.
    Each request draws one of `count` such prompts, uniformly; its prompt is that prefix plus
    its own input."""

    # Tokens of each shared prompt.
    tokens: Tokens
    # Distinct shared prompts (applications, tenants) the requests draw from.
    count: Annotated[int, Field(ge=1, le=1_000_000)] = 1


class Sessions(_Strict):
    """Multi-turn sessions: chat or an agent's loop. A turn's prompt is the session's whole
    history (earlier inputs and answers, after any shared prefix) plus its new input
    (`workload.input_tokens`); after its answer the session waits `think_time_s` (a user
    reading and typing, or a tool call) and sends the next turn. Arrivals start sessions:
    closed_loop keeps `concurrency` sessions going, an open arrival process starts one per
    arrival. `num_requests` counts turns (the last session is cut short to fit)."""

    # Turns per session (integer lengths: fixed, uniform, lognormal, ...; at least 1).
    turns: LengthSpec
    # Pause between a turn's last token and the session's next prompt.
    think_time_s: DurationSpec = FixedSeconds(value_s=0.0)
    # New tokens of a session's first turn (an agent's task and tool context), if unlike the
    # later turns' `input_tokens`.
    first_input_tokens: LengthSpec | None = None


class Workload(_Strict):
    # When requests arrive: offline, poisson, gamma, constant, closed_loop or trace.
    arrival: ArrivalSpec
    # Prompt length distribution (not with a trace, which carries its own).
    input_tokens: LengthSpec | None = Field(default=None, validate_default=True)
    # Output length distribution (not with a trace).
    output_tokens: LengthSpec | None = Field(default=None, validate_default=True)
    # Requests in the run (a trace's first this many).
    num_requests: Annotated[int, Field(ge=1, le=100_000_000)] = 1000
    # Seed of every random draw: the same seed gives the same run.
    seed: Annotated[int, Field(ge=0)] = 0
    # Per-request priorities (with scheduler.policy priority).
    priorities: Priorities | None = None
    # What the traffic is, for speculative presets (acceptance differs by kind); None: chat.
    kind: WorkloadKind | None = None
    # A mixed workload: each request's kind drawn with these weights (a trace may instead
    # carry a `kind` column). Exclusive with `kind`.
    kind_mix: dict[WorkloadKind, PosFloat] | None = None
    # A prompt every request (or session) begins with, shared and so cacheable.
    shared_prefix: SharedPrefix | None = None
    # Multi-turn sessions instead of independent requests (docs/sessions.md).
    sessions: Sessions | None = None

    @field_validator("sessions", "shared_prefix")
    @classmethod
    def _not_with_trace(cls, v: Any, info: ValidationInfo) -> Any:
        if v is not None and isinstance(info.data.get("arrival"), TraceArrival):
            raise _invalid(
                f"{info.field_name} must be left out with trace arrivals (a trace gives each "
                f"request's length, not its content)"
            )
        return v

    @field_validator("kind_mix")
    @classmethod
    def _mix_alone(
        cls, v: dict[str, float] | None, info: ValidationInfo
    ) -> dict[str, float] | None:
        if v is None:
            return v
        if not v:
            raise _invalid("give at least one kind with a weight, e.g. {code: 0.3, chat: 0.7}")
        if info.data.get("kind") is not None:
            raise _invalid("give kind (one kind for every request) or kind_mix, not both")
        if isinstance(info.data.get("arrival"), TraceArrival):
            raise _invalid(
                "kind_mix must be left out with trace arrivals (give the trace a kind column)"
            )
        return v

    @field_validator("input_tokens", "output_tokens")
    @classmethod
    def _lengths_unless_trace(cls, v: Any, info: ValidationInfo) -> Any:
        arrival = info.data.get("arrival")
        if arrival is None:  # arrival itself failed; that error is reported
            return v
        if isinstance(arrival, TraceArrival) and v is not None:
            raise _invalid(
                f"{info.field_name} must be left out with trace arrivals (the trace gives lengths)"
            )
        if not isinstance(arrival, TraceArrival) and v is None:
            raise _invalid(
                "required (e.g. {kind: fixed, value: 1000}) unless arrival.kind is trace",
                "missing",
            )
        return v
