"""Software style of a serving engine (vLLM, SGLang, TensorRT-LLM): host-side cost per step
and per request (the API front end a client measures through).

Real engines spend CPU time every step (scheduling, input preparation, output processing).
Engines that overlap it with the GPU's previous step expose only the part that is longer than
the GPU step. The figures live in engine_styles.yaml with their sources, not in code.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Annotated, Any, Literal, overload

import numpy as np
import numpy.typing as npt
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from simulator.errors import InputError, format_validation_error
from simulator.hardware.provenance import Provenance, check_keys, schema_paths
from simulator.yamlsafe import safe_load_bounded

STYLES_PATH = Path(__file__).parent / "engine_styles.yaml"
# The rounds a closed loop's start-up burst may set TTFT for (closed_loop_burst_rounds): from the
# first round alone to the 20 measured rounds of the calibration file's runs.
BURST_ROUNDS_RANGE = (1.0, 20.0)


class _StyleFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    description: str
    cpu_step_us: Annotated[float, Field(ge=0)]  # fixed host time per engine step
    cpu_per_seq_us: Annotated[float, Field(ge=0)]  # host time per scheduled sequence per step
    overlap_cpu_with_gpu: bool  # async/overlap scheduler: host work hides under the GPU step
    # on_demand: blocks allocated as tokens arrive, newest request preempted when out (vLLM,
    # SGLang); reserve_full: a request is admitted only with blocks for its whole prompt plus
    # output reserved, so nothing is ever evicted (TensorRT-LLM's GUARANTEED_NO_EVICT).
    kv_admission: Literal["on_demand", "reserve_full"] = "on_demand"
    # What gpu_memory_utilization is a fraction of: all HBM (vLLM, SGLang), or the memory
    # left free after weights and activations (TensorRT-LLM's free_gpu_memory_fraction).
    memory_fraction_of: Literal["total", "free"] = "total"
    # Whether one step may carry prefill chunks beside the decode batch (see SchedulerConfig).
    mix_prefill_decode: bool = True
    # With chunked prefill off, whether a step still carries whole prompts beside the decode
    # batch (TensorRT-LLM's in-flight batching of context and generation requests) instead of
    # running prompts in steps of their own (vLLM V0).
    mix_whole_prompts: bool = False
    # The scheduler plans step j+1 while step j runs (a one-step lookahead), so a request that
    # arrives during step j first runs in step j+2 (serving/intake.py).
    schedules_ahead: bool = False
    # Disaggregated: the prefill replica samples and returns the first token (DistServe), so
    # TTFT ends with the prefill and the decode side makes the other outputs; otherwise the
    # decode replica samples it after the KV transfer (vLLM's and SGLang's P/D connectors).
    prefill_emits_first_token: bool = False
    # Client-side costs outside engine steps, on the path a `vllm bench serve` client times:
    # the API server parsing the request and handing it to the engine process, tokenizing the
    # prompt, and detokenizing and streaming the first chunk back. None = unknown (charged 0).
    request_ingest_us: Annotated[float, Field(ge=0)] | None = None
    # A delay on the way between client and engine that holds no serial resource (not the
    # front-end process, not an engine step): the serving stack's hops. None = unknown (0).
    request_latency_us: Annotated[float, Field(ge=0)] | None = None
    # The engine's own all-reduce kernels: what each GPU beyond two adds to a small
    # collective's latency (cost/comm.py), replacing the GPU profile's
    # efficiency.allreduce_latency_per_peer_us. None: the profile's.
    allreduce_latency_per_peer_us: Annotated[float, Field(ge=0, le=1000)] | None = None
    # The engine's FP8 MoE expert path: fixed latency per MoE layer beyond the GPU profile's
    # gemm_classes.grouped.block_fixed_us (which is fitted to TensorRT-LLM's fused MoE kernels),
    # for FP8 expert weights only: the kernels an engine launches around its FP8 grouped GEMMs
    # (activation quantization, token sort, activation, reduce). None: unknown (0).
    moe_fp8_block_fixed_us: Annotated[float, Field(ge=0, le=10_000)] | None = None
    # Whether the engine's dense block-scaled FP4 GEMMs split K when a launch has fewer output
    # tiles than SMs (an autotuned tactic per shape), in place of the GPU profile's
    # gemm_classes.fp4_block_scaled.split_k (MoE expert GEMMs keep it). None: the profile's.
    fp4_gemm_split_k: bool | None = None
    # Rounds of a closed loop of identical requests whose TTFT the start-up burst's queue sets
    # (docs/closed-loops.md): the train of arrivals the burst leaves persists about this many
    # rounds in the engine before it disperses (1: the first round only, then steady state).
    # Read by the closed-form estimate's first wave and by the measured-run mapping's
    # simulated burst; fitted to measured runs (`frontier calibrate --fit burst`).
    closed_loop_burst_rounds: Annotated[float, Field(ge=BURST_ROUNDS_RANGE[0],
                                                     le=BURST_ROUNDS_RANGE[1])] = 1.0
    tokenize_per_input_token_us: Annotated[float, Field(ge=0)] | None = None
    first_chunk_emit_us: Annotated[float, Field(ge=0)] | None = None
    # The front end is one process that ingests and tokenizes requests one at a time, so a
    # burst of arrivals queues for it before reaching the engine (serving/front_end.py).
    serial_front_end: bool = False
    # Default cap on the new prompt tokens one prefill step takes in (SGLang's
    # --max-prefill-tokens): further requests wait for the next step unless they fit whole.
    # None: no cap beyond the step's token budget.
    max_prefill_tokens: Annotated[int, Field(ge=1)] | None = None
    # Host dispatch per transformer layer per step that the GPU runs behind (an eager-mode
    # engine launches each layer's kernels from Python), so a step's GPU part takes at least
    # layers-per-stage x this. None = unknown (no floor).
    dispatch_us_per_layer: Annotated[float, Field(ge=0)] | None = None
    # The same floor when the engine runs without CUDA graphs (vLLM --enforce-eager, SGLang
    # --disable-cuda-graph: deployment.cuda_graphs false), every kernel launched from Python.
    # None = unknown: such a deployment is refused rather than priced at graph speed.
    eager_dispatch_us_per_layer: Annotated[float, Field(ge=0)] | None = None
    # Hybrid models' recurrent states (Gated DeltaNet layers): the engine's ratio of state-pool
    # memory to KV memory (SGLang's --mamba-full-memory-ratio), so r / (1 + r) of the memory
    # left after weights and activations is set aside for states before the KV cache is
    # sized. None: no pool of its own (states paged or reserved, `states_paged`).
    state_memory_ratio: Annotated[float, Field(gt=0)] | None = None
    # State slots the engine holds per running request, which caps running requests at the
    # pool's slots / this (SGLang keeps room for the states its radix cache forks).
    state_slots_per_request: Annotated[int, Field(ge=1)] = 1
    # The same under speculative decoding, where it differs (None: the same): SGLang turns its
    # radix cache off for a hybrid that speculates, so a request holds its one slot.
    state_slots_speculative: Annotated[int, Field(ge=1)] | None = None
    # Whether the host still overlaps the GPU (and schedules a step ahead) for a hybrid
    # model as for any other; SGLang turns its overlap scheduler off for one while its radix
    # cache is on.
    hybrid_overlaps_cpu: bool = True
    # Hybrid models' states taken out of the KV pool as pages by each running request (vLLM's
    # hybrid KV manager) instead of one reserved per schedulable sequence up front (the
    # default, and where no state pool is set).
    states_paged: bool = False
    source: str
    # Status and origin of each value, keyed by its key (hardware/provenance.py); read by
    # tests and reports, never by the simulation.
    provenance: Provenance | None = None
    # Releases whose defaults differ from the ones above (the newest): each range's values
    # replace the style's for a deployment that names a version inside it.
    versions: list[_VersionRange] = Field(default_factory=list)

    @field_validator("provenance")
    @classmethod
    def _provenance_names_values(cls, value: Provenance | None) -> Provenance | None:
        check_keys(value, style_paths(), "engine-style")
        return value

    @model_validator(mode="after")
    def _one_home_for_states(self) -> _StyleFile:
        if self.states_paged and self.state_memory_ratio is not None:
            raise ValueError("states_paged and state_memory_ratio name two homes for a hybrid "
                             "model's states: give one")
        return self


# A release: major.minor[.patch...], then nothing or a PEP 440-style suffix (rc6, .post3, -dev.2,
# -rc0.pre3, +local); a bare number, a commit hash or a date-like string names no release.
_RELEASE = re.compile(r"v?(\d+(?:\.\d+){1,5})(?:[-.+]?(?:a|b|rc|dev|post|pre)[\w.]*|\+[\w.]+)*$")


def release_number(version: str) -> tuple[int, ...] | None:
    """The numeric release of an engine version string ('0.12.0' -> (0, 12, 0); '1.2.0rc6.post3'
    -> (1, 2, 0): a pre- or post-release counts as its release), None when it names none
    ('nightly-dev', 'gpt-oss-dev')."""
    m = _RELEASE.fullmatch(version.strip())
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def _pad(release: tuple[int, ...]) -> tuple[int, ...]:
    return release + (0,) * (6 - len(release))


class _VersionRange(BaseModel):
    """Values a style takes for releases in [since, before), read from those releases."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    since: str | None = None  # first release the values hold for
    before: str | None = None  # first release they no longer hold for
    values: dict[str, Any]  # style keys and their values in the range
    source: str

    @field_validator("since", "before")
    @classmethod
    def _is_release(cls, value: str | None) -> str | None:
        if value is not None and release_number(value) is None:
            raise ValueError(f"{value!r} is not a release number like 0.14.0")
        return value

    @field_validator("values")
    @classmethod
    def _names_style_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - style_paths())
        if unknown or not value:
            raise ValueError(f"values must name style keys (one of {sorted(style_paths())}); "
                             f"got {unknown or 'none'}")
        return value

    def holds_for(self, release: tuple[int, ...]) -> bool:
        r = _pad(release)
        lo = self.since is None or r >= _pad(release_number(self.since) or ())
        hi = self.before is None or r < _pad(release_number(self.before) or ())
        return lo and hi


@functools.cache
def style_paths() -> frozenset[str]:
    """Every key a style's provenance may name: its values, not its description or source."""
    return schema_paths(_StyleFile, skip=("description", "source", "provenance", "versions"))


@dataclass(frozen=True, slots=True)
class FrontEnd:
    """Per-request time the client sees outside engine steps (API server, tokenizer), and a
    delay on the way that holds nothing (`latency_s`: the stack's hops, no queue forms)."""

    ingest_s: float = 0.0
    per_input_token_s: float = 0.0
    first_chunk_s: float = 0.0
    latency_s: float = 0.0

    @overload
    def service_s(self, input_tokens: float) -> float: ...
    @overload
    def service_s(self, input_tokens: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]: ...
    def service_s(self, input_tokens: Any) -> Any:
        """The front-end process's work on a request: ingest and prompt tokenization (what a
        serial front end queues for, serving/front_end.py)."""
        return self.ingest_s + self.per_input_token_s * input_tokens

    @overload
    def client_offset_s(self, input_tokens: float) -> float: ...
    @overload
    def client_offset_s(self, input_tokens: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]: ...
    def client_offset_s(self, input_tokens: Any) -> Any:
        """Time added to engine-side TTFT (and end-to-end latency) per request with nothing
        queued: the service and the delay before the engine sees it, the first chunk's emit
        after."""
        return self.service_s(input_tokens) + self.latency_s + self.first_chunk_s


@dataclass(frozen=True, slots=True)
class EngineStyle:
    name: str
    cpu_step_s: float
    cpu_per_seq_s: float
    overlap_cpu_with_gpu: bool
    kv_admission: str = "on_demand"
    memory_fraction_of: str = "total"
    front_end: FrontEnd = FrontEnd()
    mix_prefill_decode: bool = True
    schedules_ahead: bool = False
    prefill_emits_first_token: bool = False
    serial_front_end: bool = False
    max_prefill_tokens: int | None = None
    dispatch_s_per_layer: float = 0.0
    # layers of one pipeline stage x dispatch_s_per_layer, set when an engine is built
    # (serving/engine_build.py): the least time a step's GPU part can take
    dispatch_floor_s: float = 0.0
    version: str | None = None  # the release whose defaults these are; None: the newest
    eager_dispatch_s_per_layer: float | None = None  # without CUDA graphs; None: unknown
    mix_whole_prompts: bool = False  # with chunked prefill off (see _StyleFile)
    # Share of the memory after weights and activations a hybrid's state pool takes:
    # r / (1 + r) of _StyleFile.state_memory_ratio; None without a pool.
    state_pool_share: float | None = None
    state_slots_per_request: int = 1
    state_slots_speculative: int | None = None
    hybrid_overlaps_cpu: bool = True
    states_paged: bool = False  # hybrid states paged in the KV pool (see _StyleFile)
    # Per GPU beyond two on a small collective's latency (the engine's all-reduce kernels);
    # None: the GPU profile's value.
    allreduce_latency_per_peer_s: float | None = None
    # Per MoE layer with FP8 experts, on top of the GPU profile's block fixed (see _StyleFile).
    moe_fp8_block_fixed_s: float = 0.0
    fp4_gemm_split_k: bool | None = None  # None: the GPU profile's (see _StyleFile)
    # Rounds the start-up burst of a closed loop stands for (see _StyleFile).
    closed_loop_burst_rounds: float = 1.0

    def host_time_s(self, num_seqs: int) -> float:
        return self.cpu_step_s + self.cpu_per_seq_s * num_seqs

    def gpu_part_s(self, gpu_time_s: float) -> float:
        """The GPU part of a step, held up to the dispatch floor when the host launches the
        layers slower than the GPU runs them."""
        floor = self.dispatch_floor_s
        return gpu_time_s if gpu_time_s >= floor else floor

    def step_time_s(self, gpu_time_s: float, num_seqs: int) -> float:
        """Wall time of a step: host and GPU in series, or overlapped (the longer one wins)."""
        host = self.host_time_s(num_seqs)
        gpu = self.gpu_part_s(gpu_time_s)
        return max(gpu, host) if self.overlap_cpu_with_gpu else gpu + host

    def with_host_cost(self, cpu_step_s: float | None = None,
                       cpu_per_seq_s: float | None = None,
                       request_latency_s: float | None = None) -> EngineStyle:
        """This style with its per-step and per-sequence host cost and its request latency
        replaced where given (a scenario's `deployment.overhead`, or a calibration's fitted
        values)."""
        return replace(
            self,
            cpu_step_s=self.cpu_step_s if cpu_step_s is None else cpu_step_s,
            cpu_per_seq_s=self.cpu_per_seq_s if cpu_per_seq_s is None else cpu_per_seq_s,
            front_end=(self.front_end if request_latency_s is None
                       else replace(self.front_end, latency_s=request_latency_s)),
        )

    def with_burst_rounds(self, rounds: float | None) -> EngineStyle:
        """This style with its closed loops' start-up burst standing for `rounds` rounds
        (a scenario's `deployment.overhead.burst_rounds`, a calibration's fitted value);
        unchanged for None."""
        return self if rounds is None else replace(self, closed_loop_burst_rounds=rounds)

    def eager(self) -> EngineStyle:
        """This style run without CUDA graphs: each layer's kernels launched from Python, so a
        step's GPU part takes at least the eager dispatch time of its layers."""
        if self.eager_dispatch_s_per_layer is None:
            raise InputError(
                f"deployment.cuda_graphs: false: engine style {self.name!r} has no published "
                "eager launch cost (eager_dispatch_us_per_layer unknown in "
                "engines/engine_styles.yaml); use an engine with one (vllm, sglang) or CUDA "
                "graphs")
        return replace(self, dispatch_s_per_layer=max(self.dispatch_s_per_layer,
                                                      self.eager_dispatch_s_per_layer))

    def for_hybrid(self, speculative: bool = False) -> EngineStyle:
        """The style serving a hybrid (linear-attention) model: without its overlap scheduler
        and one-step lookahead where the engine turns them off for one, and with its state
        slots a request under speculative decoding where those differ."""
        style = self
        if speculative and self.state_slots_speculative is not None:
            style = replace(style, state_slots_per_request=self.state_slots_speculative)
        if self.hybrid_overlaps_cpu:
            return style
        return replace(style, overlap_cpu_with_gpu=False, schedules_ahead=False)

    def with_layers(self, layers_per_stage: float) -> EngineStyle:
        """The style of one engine whose pipeline stages hold `layers_per_stage` layers."""
        return replace(self, dispatch_floor_s=self.dispatch_s_per_layer * layers_per_stage)


def load_engine_styles(path: Path = STYLES_PATH) -> dict[str, EngineStyle]:
    """Every style in the file at its default (newest) release, parsed once per path (sweeps
    build thousands of engines)."""
    return {name: engine_style(name, None, path) for name in _style_files(path)}


@functools.lru_cache(maxsize=64)
def engine_style(name: str, version: str | None = None, path: Path = STYLES_PATH) -> EngineStyle:
    """Style `name` as release `version` of the engine ships it: the default values with
    those of every version range holding the release; the default when `version` is None or
    names no release."""
    files = _style_files(path)
    if name not in files:
        raise InputError(f"{path}: no engine style {name!r} (styles: {sorted(files)})")
    body, ranges = files[name]
    release = None if version is None else release_number(version)
    if release is None:
        return _style(name, body)
    values: dict[str, Any] = {}
    for r in ranges:
        if r.holds_for(release):
            values.update(r.values)
    if not values:
        return replace(_style(name, body), version=version)
    merged = {**body.model_dump(exclude={"versions"}), **values}
    try:
        f = _StyleFile.model_validate(merged)
    except ValidationError as exc:
        raise InputError(format_validation_error(f"{path}: {name}@{version}", exc)) from None
    return replace(_style(name, f), version=version)


@functools.lru_cache(maxsize=8)
def _style_files(path: Path) -> dict[str, tuple[_StyleFile, tuple[_VersionRange, ...]]]:
    try:
        raw = safe_load_bounded(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: cannot read YAML ({exc})") from None
    if not isinstance(raw, dict):
        raise InputError(f"{path}: top level must map style names to their settings")
    out: dict[str, tuple[_StyleFile, tuple[_VersionRange, ...]]] = {}
    for name, body in raw.items():
        try:
            f = _StyleFile.model_validate(body)
        except ValidationError as exc:
            raise InputError(format_validation_error(f"{path}: {name}", exc)) from None
        out[str(name)] = (f, tuple(f.versions))
    return out


@functools.cache
def _same_keys() -> tuple[str, ...]:
    """Keys a style file and an EngineStyle share with the same meaning and unit: copied
    across as they are (the others are converted in _style)."""
    return tuple(f.name for f in fields(EngineStyle) if f.name in _StyleFile.model_fields)


def _style(name: str, f: _StyleFile) -> EngineStyle:
    ratio = f.state_memory_ratio
    return EngineStyle(
        name=name,
        cpu_step_s=f.cpu_step_us * 1e-6,
        cpu_per_seq_s=f.cpu_per_seq_us * 1e-6,
        front_end=FrontEnd(
            (f.request_ingest_us or 0.0) * 1e-6,
            (f.tokenize_per_input_token_us or 0.0) * 1e-6,
            (f.first_chunk_emit_us or 0.0) * 1e-6,
            (f.request_latency_us or 0.0) * 1e-6,
        ),
        dispatch_s_per_layer=(f.dispatch_us_per_layer or 0.0) * 1e-6,
        eager_dispatch_s_per_layer=(None if f.eager_dispatch_us_per_layer is None
                                    else f.eager_dispatch_us_per_layer * 1e-6),
        state_pool_share=None if ratio is None else ratio / (1.0 + ratio),
        allreduce_latency_per_peer_s=(None if f.allreduce_latency_per_peer_us is None
                                      else f.allreduce_latency_per_peer_us * 1e-6),
        moe_fp8_block_fixed_s=(f.moe_fp8_block_fixed_us or 0.0) * 1e-6,
        **{key: getattr(f, key) for key in _same_keys()},
    )
