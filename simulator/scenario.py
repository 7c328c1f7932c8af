"""Scenario files: one deployment under one workload, as a strict, versioned pydantic schema.

Every key here is public (DESIGN.md, "Scenario file"). Tagged unions (`deployment`,
`workload.arrival`, `workload.input_tokens`, `workload.output_tokens`) choose their variant by
`kind`. Their pydantic tags end in `-tag` so that `format_validation_error` can drop them from
error locations: a user reads `workload.arrival.rate_per_s`, not `workload.arrival.poisson...`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from simulator.errors import InputError, format_validation_error

PosInt = Annotated[int, Field(ge=1)]
PosFloat = Annotated[float, Field(gt=0)]
# Token counts: beyond any context window (such requests are dropped), but within int64 math.
MAX_TOKENS = 1_000_000_000
Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
NumberFormat = Literal["bf16", "fp16", "fp8", "mxfp4", "nvfp4", "int8", "int4"]
WEIGHT_ONLY_FORMATS = frozenset({"int4"})  # group-quantized (AWQ/GPTQ): no int4 activations


def _invalid(message: str, kind: str = "invalid_value") -> PydanticCustomError:
    """A validation error whose message is exactly `message` (no 'Value error, ' prefix)."""
    return PydanticCustomError(kind, "{message}", {"message": message})


class _Strict(BaseModel):
    # allow_inf_nan=False: no key means anything at .inf or .nan (rates, lengths, times)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# ---------------------------------------------------------------------------- tagged unions


def _tag_of(value: Any) -> str | None:
    kind = value.get("kind") if isinstance(value, Mapping) else getattr(value, "kind", None)
    return f"{kind}-tag" if isinstance(kind, str) else None


def _kind_checker(
    where: str, variants: Mapping[str, type[BaseModel]], default: str | None = None
) -> Callable[[Any], Any]:
    """Before-validator: a clear sentence for a missing or unknown `kind`; fills the default."""
    valid = ", ".join(variants)

    def check(value: Any) -> Any:
        if isinstance(value, BaseModel):
            return value
        if not isinstance(value, Mapping):
            raise _invalid(f"{where} must be a mapping with a kind (one of: {valid})")
        kind = value.get("kind", default)
        if kind is None:
            raise _invalid(f"{where} needs a kind (one of: {valid})", "missing")
        if not isinstance(kind, str) or kind not in variants:  # a list or dict is unhashable
            raise _invalid(f"{where} kind {kind!r} is not one of: {valid}")
        return value if "kind" in value else {**value, "kind": kind}

    return check


# ------------------------------------------------------------------------------- deployment


class Precision(_Strict):
    """Number format of weights, activations (GEMM inputs) and the KV cache."""

    weights: NumberFormat = "bf16"
    activations: NumberFormat = "bf16"
    kv_cache: NumberFormat = "bf16"

    @field_validator("activations")
    @classmethod
    def _activations_not_weight_only(cls, v: str) -> str:
        if v in WEIGHT_ONLY_FORMATS:
            raise _invalid(
                f"{v} is a weight-only format; activations may be bf16, fp16, fp8, mxfp4, "
                "nvfp4 or int8"
            )
        return v


class Scheduler(_Strict):
    max_num_seqs: PosInt = 256
    max_num_batched_tokens: PosInt = 8192
    chunked_prefill: bool = True
    policy: Literal["fcfs", "priority"] = "fcfs"
    block_size: Annotated[int, Field(ge=1, le=1024)] = 16  # KV cache page, tokens

    @field_validator("max_num_batched_tokens")
    @classmethod
    def _room_for_every_decode(cls, v: int, info: ValidationInfo) -> int:
        # vLLM refuses the same: every running sequence must be able to decode in one step.
        seqs = info.data.get("max_num_seqs")
        if isinstance(seqs, int) and v < seqs:
            raise _invalid(
                f"max_num_batched_tokens {v} is below max_num_seqs {seqs}; it must be at least "
                f"max_num_seqs so every running sequence can decode each step"
            )
        return v


class Overhead(_Strict):
    """Per-step CPU overhead; overrides the defaults of the chosen engine style."""

    step_s: Annotated[float, Field(ge=0)]
    per_seq_s: Annotated[float, Field(ge=0)]


class SpeculativeConfig(_Strict):
    method: Literal["draft_model", "eagle3", "mtp", "dflash", "dspark", "ngram"]
    num_speculative_tokens: Annotated[int, Field(ge=1, le=16)]
    # mean tokens emitted per verification step, bonus token included: 1 .. k+1
    acceptance_length: float | None = None

    @field_validator("acceptance_length")
    @classmethod
    def _acceptance_in_range(cls, v: float | None, info: ValidationInfo) -> float | None:
        k = info.data.get("num_speculative_tokens")
        if v is not None and k is not None and not 1.0 <= v <= k + 1:
            raise _invalid(
                f"acceptance_length {v} must lie in [1, num_speculative_tokens + 1] = [1, {k + 1}]"
            )
        return v


class _Worker(_Strict):
    """Fields of one engine type: an aggregated deployment, or a prefill or decode pool."""

    replicas: PosInt = 1
    tensor_parallel: PosInt = 1
    pipeline_parallel: PosInt = 1
    attention_data_parallel: PosInt = 1
    expert_parallel: PosInt = 1
    precision: Precision = Precision()
    scheduler: Scheduler = Scheduler()
    engine: Literal["vllm", "sglang", "trtllm"] = "vllm"  # software style: overhead defaults
    overhead: Overhead | None = None
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.9

    @field_validator("expert_parallel")
    @classmethod
    def _ep_fits(cls, v: int, info: ValidationInfo) -> int:
        tp = info.data.get("tensor_parallel")
        dp = info.data.get("attention_data_parallel")
        if tp is not None and dp is not None and v > tp * dp:
            raise _invalid(
                f"expert_parallel {v} exceeds tensor_parallel {tp} × attention_data_parallel "
                f"{dp} = {tp * dp}; experts are spread over the GPUs of one replica"
            )
        return v

    @property
    def gpus_per_replica(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel * self.attention_data_parallel

    @property
    def num_gpus(self) -> int:
        return self.replicas * self.gpus_per_replica

    def describe_replica(self) -> str:
        """'tp 8 × pp 2': the factors of one replica's GPUs (pp and dp left out when 1)."""
        parts = [f"tp {self.tensor_parallel}"]
        if self.pipeline_parallel > 1:
            parts.append(f"pp {self.pipeline_parallel}")
        if self.attention_data_parallel > 1:
            parts.append(f"attention_dp {self.attention_data_parallel}")
        return " × ".join(parts)


Router = Literal["round_robin", "least_outstanding", "shortest_expected_latency"]


class _AggregatedKind(_Strict):
    kind: Literal["aggregated"] = "aggregated"


class AggregatedDeployment(_Worker, _AggregatedKind):  # this base order puts `kind` first
    comm_overlap: Annotated[float, Field(ge=0, le=1)] = 0.0  # communication hidden by compute
    router: Router = "round_robin"
    speculative: SpeculativeConfig | None = None


class WorkerPool(_Worker):
    """A prefill or decode pool of a disaggregated deployment."""


class KVTransfer(_Strict):
    link: Literal["nvlink", "network"] = "network"
    gb_per_s: PosFloat | None = None  # None: the hardware profile's link bandwidth


class DisaggregatedDeployment(_Strict):
    kind: Literal["disaggregated"] = "disaggregated"
    prefill: WorkerPool = WorkerPool()
    decode: WorkerPool = WorkerPool()
    kv_transfer: KVTransfer = KVTransfer()
    router: Router = "round_robin"

    @property
    def gpus_per_replica(self) -> int:
        """One prefill replica plus one decode replica."""
        return self.prefill.gpus_per_replica + self.decode.gpus_per_replica

    @property
    def num_gpus(self) -> int:
        return self.prefill.num_gpus + self.decode.num_gpus


DEPLOYMENT_KINDS: dict[str, type[BaseModel]] = {
    "aggregated": AggregatedDeployment,
    "disaggregated": DisaggregatedDeployment,
}
DeploymentSpec = Annotated[
    Annotated[AggregatedDeployment, Tag("aggregated-tag")]
    | Annotated[DisaggregatedDeployment, Tag("disaggregated-tag")],
    Discriminator(_tag_of),
    BeforeValidator(_kind_checker("deployment", DEPLOYMENT_KINDS, default="aggregated")),
]


class HardwareConfig(_Strict):
    """Which GPU and how many: the profile name and the machine shape."""

    gpu: Annotated[str, Field(min_length=1)]  # hardware profile name, e.g. h200-sxm
    gpus_per_node: Annotated[int, Field(ge=1, le=72)] = 8
    nodes: Annotated[int, Field(ge=1, le=100_000)] = 1


# --------------------------------------------------------------------------------- workload


class OfflineArrival(_Strict):
    """Every request is present at time zero."""

    kind: Literal["offline"] = "offline"


class PoissonArrival(_Strict):
    kind: Literal["poisson"] = "poisson"
    rate_per_s: PosFloat


class GammaArrival(_Strict):
    """Renewal process with gamma gaps: cv 1 is Poisson, cv > 1 is burstier."""

    kind: Literal["gamma"] = "gamma"
    rate_per_s: PosFloat
    cv: PosFloat  # coefficient of variation of the gaps


class ConstantArrival(_Strict):
    kind: Literal["constant"] = "constant"
    rate_per_s: PosFloat


class ClosedLoopArrival(_Strict):
    """`concurrency` requests in flight; a new one is sent when one finishes."""

    kind: Literal["closed_loop"] = "closed_loop"
    concurrency: PosInt


class TraceArrival(_Strict):
    """Arrival times and lengths from a CSV (path relative to the scenario file)."""

    kind: Literal["trace"] = "trace"
    path: Annotated[str, Field(min_length=1)]
    time_scale: PosFloat = 1.0  # multiplies the trace's times: 0.5 replays twice as fast


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

    min: Tokens | None = None
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
    value: Tokens


class UniformLengths(_Strict):
    """Integers uniform on [min, max], both included."""

    kind: Literal["uniform"] = "uniform"
    min: Tokens
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
    mean: PosFloat
    std: Annotated[float, Field(ge=0)]


class LognormalLengths(_Clipped):
    """Lognormal lengths, given by exactly one of: {median, sigma}, {median, p90}, {mean, sigma}.

    `sigma` is the standard deviation of log(length); `mean` is the mean of the lengths
    themselves (not of their logarithm).
    """

    kind: Literal["lognormal"] = "lognormal"
    median: PosFloat | None = None
    p90: PosFloat | None = None
    mean: PosFloat | None = None
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
    values: Annotated[tuple[Tokens, ...], Field(min_length=1)] | None = None
    path: Annotated[str, Field(min_length=1)] | None = None
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

    values: Annotated[tuple[Int32, ...], Field(min_length=1)]
    weights: Annotated[tuple[PosFloat, ...], Field(min_length=1)]

    @field_validator("weights")
    @classmethod
    def _same_length(cls, v: tuple[float, ...], info: ValidationInfo) -> tuple[float, ...]:
        values = info.data.get("values")
        if values is not None and len(values) != len(v):
            raise _invalid(f"{len(v)} weights for {len(values)} values; give one weight each")
        return v


class Workload(_Strict):
    arrival: ArrivalSpec
    input_tokens: LengthSpec | None = Field(default=None, validate_default=True)
    output_tokens: LengthSpec | None = Field(default=None, validate_default=True)
    num_requests: Annotated[int, Field(ge=1, le=100_000_000)] = 1000
    seed: Annotated[int, Field(ge=0)] = 0
    priorities: Priorities | None = None

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


class SLO(_Strict):
    ttft_p99_s: PosFloat | None = None
    tpot_p99_s: PosFloat | None = None
    e2e_p99_s: PosFloat | None = None

    @model_validator(mode="after")
    def _at_least_one(self) -> SLO:
        if self.ttft_p99_s is None and self.tpot_p99_s is None and self.e2e_p99_s is None:
            raise _invalid("slo needs at least one of ttft_p99_s, tpot_p99_s, e2e_p99_s")
        return self


class Limits(_Strict):
    """Caps that end unstable runs (a queue that grows without bound) early."""

    max_simulated_time_s: PosFloat | None = None
    max_waiting_requests: PosInt | None = None


# --------------------------------------------------------------------------------- scenario


class Scenario(_Strict):
    schema_version: Literal[1] = 1
    name: str = ""
    model: Annotated[str, Field(min_length=1)]  # catalog name or path to an HF config.json
    hardware: HardwareConfig
    deployment: DeploymentSpec = AggregatedDeployment()
    workload: Workload
    slo: SLO | None = None
    limits: Limits = Limits()

    @field_validator("deployment")
    @classmethod
    def _gpus_exist(cls, v: Any, info: ValidationInfo) -> Any:
        hw = info.data.get("hardware")
        if not isinstance(hw, HardwareConfig):
            return v
        have = hw.gpus_per_node * hw.nodes
        have_text = f"{have} (gpus_per_node {hw.gpus_per_node} × nodes {hw.nodes})"
        workers: list[tuple[str, _Worker]]
        if isinstance(v, AggregatedDeployment):
            workers = [("", v)]
        else:
            workers = [("prefill ", v.prefill), ("decode ", v.decode)]
        for label, w in workers:
            one = w.gpus_per_replica
            if one > have:
                nodes_needed = -(-one // hw.gpus_per_node)
                raise _invalid(
                    f"one {label}replica needs {one} GPUs ({w.describe_replica()})"
                    f" but hardware has {have_text}; a replica may span nodes, so it needs "
                    f"nodes >= {nodes_needed} at gpus_per_node {hw.gpus_per_node}"
                )
        total = sum(w.num_gpus for _, w in workers)
        if total > have:
            used = " + ".join(
                f"{label}replicas {w.replicas} × {w.describe_replica()}" for label, w in workers
            )
            raise _invalid(f"deployment uses {total} GPUs ({used}) but hardware has {have_text}")
        return v

    @property
    def gpus_per_replica(self) -> int:
        """GPUs of one engine copy (disaggregated: one prefill plus one decode replica)."""
        return self.deployment.gpus_per_replica

    @property
    def num_gpus(self) -> int:
        """All GPUs the deployment uses: replicas × per replica, summed over pools."""
        return self.deployment.num_gpus


# ------------------------------------------------------------------------ loading and --set

# Where tagged unions live, with the kind a missing `kind` means (for override handling).
_UNIONS: dict[tuple[str, ...], tuple[Mapping[str, type[BaseModel]], str | None]] = {
    ("deployment",): (DEPLOYMENT_KINDS, "aggregated"),
    ("workload", "arrival"): (ARRIVAL_KINDS, None),
    ("workload", "input_tokens"): (LENGTH_KINDS, None),
    ("workload", "output_tokens"): (LENGTH_KINDS, None),
}


def _parse_override(item: str) -> tuple[tuple[str, ...], Any]:
    path, sep, raw = item.partition("=")
    parts = tuple(p.strip() for p in path.split("."))
    if not sep or not path.strip() or any(not p for p in parts):
        raise InputError(
            f"--set {item!r}: expected key.path=value, e.g. deployment.tensor_parallel=4"
        )
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise InputError(
            f"--set {item!r}: value is not valid YAML ({str(exc).splitlines()[0]})"
        ) from None
    return parts, value


def apply_overrides(data: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of `data` with each `key.path=value` override applied, in order.

    Values are parsed as YAML (`4`, `0.5`, `true`, `fp8`, `[1, 2]`, `{kind: poisson, ...}`);
    typing is left to the schema. Missing or null intermediate mappings are created.

    Changing a tagged union's `kind` (e.g. `workload.arrival.kind=closed_loop`) drops the keys
    of the old variant that the new variant does not define, so `rate_per_s` from the file does
    not make `closed_loop` fail; keys set by an override are never dropped, so a wrong one is
    still reported.
    """
    root: dict[str, Any] = copy.deepcopy(dict(data))
    explicit: list[tuple[str, ...]] = []
    kind_changed: set[tuple[str, ...]] = set()
    for item in overrides:
        parts, value = _parse_override(item)
        node = root
        for i, key in enumerate(parts[:-1]):
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            elif not isinstance(child, dict):
                where = ".".join(parts[: i + 1])
                raise InputError(
                    f"--set {item!r}: {where} is {child!r}, not a mapping, so it has no "
                    f"key {parts[i + 1]!r}"
                )
            node = child
        last = parts[-1]
        if last == "kind" and parts[:-1] in _UNIONS:
            default = _UNIONS[parts[:-1]][1]
            if node.get("kind", default) != value:
                kind_changed.add(parts[:-1])
        node[last] = value
        explicit.append(parts)

    for loc in kind_changed:
        node = _get(root, loc)
        if not isinstance(node, dict):
            continue
        kind = node.get("kind")
        variant = _UNIONS[loc][0].get(kind) if isinstance(kind, str) else None
        if variant is None:  # unknown kind: the schema reports it
            continue
        for key in list(node):
            path = (*loc, key)
            set_here = any(path[: len(p)] == p for p in explicit)
            if key not in variant.model_fields and not set_here:
                del node[key]
    return root


def _get(root: Mapping[str, Any], loc: tuple[str, ...]) -> Any:
    node: Any = root
    for key in loc:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def load_scenario_file(
    path_or_dict: str | Path | Mapping[str, Any], overrides: Sequence[str] = ()
) -> tuple[Scenario, Path | None]:
    """Read, override and validate a scenario; return it with its folder (None for a dict).

    The folder is where relative trace and CSV paths are resolved. Every problem becomes an
    `InputError` with one line: `FILE: key.path: problem (got value)`.
    """
    if isinstance(path_or_dict, Mapping):
        source, base_dir, data = "scenario", None, dict(path_or_dict)
    else:
        path = Path(path_or_dict)
        source, base_dir = str(path), path.resolve().parent
        if not path.is_file():
            raise InputError(f"{path}: scenario file not found")
        try:
            loaded = yaml.safe_load(path.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise InputError(f"{path}: cannot read YAML ({str(exc).splitlines()[0]})") from None
        if not isinstance(loaded, dict):
            got = "an empty file" if loaded is None else f"a {type(loaded).__name__}"
            raise InputError(
                f"{path}: a scenario must be a YAML mapping of keys (model, hardware, "
                f"workload, ...); got {got}"
            )
        data = loaded
    data = apply_overrides(data, overrides)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise InputError(format_validation_error(source, exc)) from None
    return scenario, base_dir


def scenario_to_dict(scenario: Scenario) -> dict[str, Any]:
    """Plain JSON-able dict of every key, defaults included (feeds it back in unchanged)."""
    return scenario.model_dump(mode="json")
