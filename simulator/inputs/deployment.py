"""The `deployment` block of a scenario: how the model is laid out over GPUs and served.

An aggregated deployment is one engine type; a disaggregated one has a prefill and a decode
pool. Every key here is public (docs/architecture.md, public names).
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

from simulator.engines.style import BURST_ROUNDS_RANGE, release_number
from simulator.inputs.common import (
    WEIGHT_ONLY_FORMATS,
    HardwareConfig,
    NumberFormat,
    PosFloat,
    PosInt,
    _invalid,
    _kind_checker,
    _Strict,
    _tag_of,
)
from simulator.inputs.speculative import SpeculativeConfig

# model/architecture.py MODULE_GROUPS, spelled out for the schema (tests check they agree).
ModuleGroup = Literal["attention_in", "attention_out", "dense_mlp", "shared_experts"]


class Precision(_Strict):
    """Number format of weights, activations (GEMM inputs) and the KV cache."""

    weights: NumberFormat = "bf16"
    activations: NumberFormat = "bf16"
    kv_cache: NumberFormat = "bf16"
    # Attention projections kept in BF16 whatever `weights` says: None follows the checkpoint
    # (quantization_config.modules_to_not_convert, as gpt-oss names self_attn); true or false
    # overrides it, in step cost and weight memory alike.
    keep_attention_bf16: bool | None = None
    # The module groups kept in BF16, in full (attention_in: q/k/v or MLA's q and kv
    # projections; attention_out: o_proj; dense_mlp; shared_experts): None follows the
    # checkpoint; a list replaces its choice (nvidia's DeepSeek-R1 FP4-v2: [attention_in]).
    keep_bf16: list[ModuleGroup] | None = None

    @field_validator("keep_bf16")
    @classmethod
    def _one_way_to_say_it(cls, v: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if v is not None and info.data.get("keep_attention_bf16") is not None:
            raise _invalid(
                "give keep_bf16 or keep_attention_bf16, not both (keep_bf16 lists every "
                "group kept in BF16, attention_in and attention_out included)"
            )
        return v

    @field_validator("activations")
    @classmethod
    def _activations_not_weight_only(cls, v: str) -> str:
        if v in WEIGHT_ONLY_FORMATS:
            raise _invalid(
                f"{v} is a weight-only format; activations may be bf16, fp16, fp8, mxfp4, "
                "nvfp4 or int8"
            )
        return v


def _precision_shorthand(value: Any) -> Any:
    """`precision: fp8` stands for weights and activations in FP8 with the default KV cache
    (activations stay BF16 for a weight-only format such as int4)."""
    if isinstance(value, str):
        return {"weights": value, "activations": "bf16" if value in WEIGHT_ONLY_FORMATS else value}
    return value


PrecisionSpec = Annotated[
    Precision,
    BeforeValidator(_precision_shorthand, json_schema_input_type=Precision | NumberFormat),
]


class Scheduler(_Strict):
    # Most sequences in one engine step's batch (vLLM --max-num-seqs).
    max_num_seqs: PosInt = 256
    # Token budget of one step: prompt chunks plus one token per decoding sequence (vLLM --max-num-
    # batched-tokens).
    max_num_batched_tokens: PosInt = 8192
    # Split long prompts across steps within the token budget and mix them with decodes; false: a
    # prompt is prefilled whole, in a step of its own, except on an engine that batches whole
    # prompts with its decodes (TensorRT-LLM's in-flight batching).
    chunked_prefill: bool = True
    # Order of the waiting queue: first come first served, or by `workload.priorities` (lower
    # first).
    policy: Literal["fcfs", "priority"] = "fcfs"
    block_size: Annotated[int, Field(ge=1, le=1024)] = 16  # KV cache page, tokens
    # Poll the input queue every this many steps (SGLang --scheduler-recv-interval, default 1:
    # "The interval to poll requests in scheduler"); a request arriving between polls waits.
    recv_interval_steps: Annotated[int, Field(ge=1, le=1024)] = 1
    # New prompt tokens one prefill step admits (SGLang --max-prefill-tokens); None takes the
    # engine style's default (engines/engine_styles.yaml; SGLang 16384, others no cap).
    max_prefill_tokens: PosInt | None = None
    # Whether a step may carry prefill beside the running decodes (SGLang --enable-mixed-chunk,
    # off by default there; vLLM and TensorRT-LLM always mix); None takes the engine style's
    # default (engines/engine_styles.yaml mix_prefill_decode).
    mix_prefill_decode: bool | None = None
    # Keep computed KV blocks by content and reuse them for prompts that begin alike (vLLM's
    # automatic prefix caching, SGLang's radix cache, TensorRT-LLM's KV block reuse: each on
    # by default). Only prompts with known content share: workload.sessions and
    # workload.shared_prefix (docs/sessions.md).
    prefix_caching: bool = True

    @field_validator("block_size")
    @classmethod
    def _chunk_holds_a_block(cls, v: int, info: ValidationInfo) -> int:
        # A prefill chunk smaller than one KV page cannot fill a block in a step; engines
        # align chunks to pages (SGLang's chunked_prefill_size, TRT-LLM's tokens_per_block).
        budget = info.data.get("max_num_batched_tokens")
        if isinstance(budget, int) and budget < v:
            raise _invalid(
                f"block_size {v} is above max_num_batched_tokens {budget}; a step's token "
                f"budget must hold at least one KV block"
            )
        return v

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
    """The engine's costs outside the GPU profile: per-step host time, per-request latency, its
    all-reduce kernels' per-peer latency, its FP8 MoE path's fixed latency and how many rounds
    a closed loop's start-up burst lasts in it; each key given overrides the chosen engine
    style's value (one left out keeps it)."""

    # Host (CPU) time per engine step, seconds.
    step_s: Annotated[float, Field(ge=0)] | None = None
    # Host time per sequence in the step, seconds.
    per_seq_s: Annotated[float, Field(ge=0)] | None = None
    # Delay between client and engine per request that holds no queue (the serving stack's
    # hops), seconds; 0 for a harness that drives the engine in process.
    request_latency_s: Annotated[float, Field(ge=0, le=3600)] | None = None
    # What each GPU beyond two adds to a small all-reduce's latency with this engine's
    # kernels, seconds (cost/comm.py; replaces the style's and the GPU profile's value).
    allreduce_latency_per_peer_s: Annotated[float, Field(ge=0, le=1e-3)] | None = None
    # Fixed latency per MoE layer of this engine's FP8 expert path beyond the GPU profile's
    # grouped block_fixed_us, seconds (replaces the style's moe_fp8_block_fixed_us).
    moe_fp8_block_fixed_s: Annotated[float, Field(ge=0, le=1e-2)] | None = None
    # Rounds of a closed loop whose TTFT its start-up burst's queue sets, as this engine
    # disperses the train of arrivals the burst leaves (replaces the style's
    # closed_loop_burst_rounds; docs/closed-loops.md).
    burst_rounds: Annotated[float, Field(ge=BURST_ROUNDS_RANGE[0],
                                         le=BURST_ROUNDS_RANGE[1])] | None = None


class MoeRouting(_Strict):
    """How routed tokens spread over the experts (cost/moe_routing.py). Uniform by default:
    trained routers aim at balance; `zipf` with exponent `s`, or a measured `profile` file (one
    load per expert, in expert order), makes the busiest expert's GPU set the MoE time.
    `redundant_experts` adds EPLB-style copies of the hottest experts (a multiple of
    expert_parallel)."""

    # Load of the experts: even, or Zipf-skewed with exponent `s`.
    skew: Literal["uniform", "zipf"] = "uniform"
    # Zipf exponent: load of the i-th expert ∝ 1/i^s (at 50 the first expert takes all; above,
    # i^s overflows a float)
    s: Annotated[float, Field(ge=0, le=50)] = 1.0
    profile: str | None = None  # path to a per-expert load file (CSV/whitespace numbers)
    # Extra copies of the hottest experts (EPLB), spread over the EP ranks.
    redundant_experts: Annotated[int, Field(ge=0, le=100_000)] = 0


RankRouter = Literal["round_robin", "least_outstanding", "shortest_expected_latency",
                     "prefix_affinity", "cache_aware"]


class KVOffload(_Strict):
    """A second KV tier in host memory: blocks the prefix cache evicts from the GPU are kept
    there (least recently used first out) and loaded back when a prompt finds them, the load
    on its first step's time (LMCache's CPU backend, vLLM's CPU offloading, SGLang's
    hierarchical cache)."""

    # Host memory the engine keeps offloaded KV in, per GPU, GB (LMCache max_local_cpu_size
    # over the GPUs; vLLM --kv-offloading-size); at most the profile's host memory per GPU.
    cpu_gb_per_gpu: Annotated[float, Field(gt=0, le=100_000)]
    # Host-to-GPU bandwidth per GPU, GB/s; None: the GPU profile's host link (its line rate).
    link_gb_per_s: Annotated[float, Field(gt=0, le=100_000)] | None = None


class _Worker(_Strict):
    """Fields of one engine type: an aggregated deployment, or a prefill or decode pool."""

    # Independent copies of the engine, each on its own GPUs, behind the router.
    replicas: PosInt = 1
    # GPUs that split every layer's weights and heads (all-reduce per layer).
    tensor_parallel: PosInt = 1
    # Stages that split the layers (micro-batches flow through them).
    pipeline_parallel: PosInt = 1
    # Attention-DP ranks: each holds its own sequences and KV; MoE layers join them (SGLang --dp
    # with DP attention).
    attention_data_parallel: PosInt = 1
    # GPUs the experts of a MoE layer are spread over (at most tensor_parallel x
    # attention_data_parallel).
    expert_parallel: PosInt = 1
    # How an attention-DP replica's MoE layers exchange tokens: `gather` (all-gather before the
    # experts, reduce-scatter after: SGLang's default --moe-a2a-backend none, vLLM's
    # allgather_reducescatter) or `all_to_all` (dispatch and combine each token to its experts'
    # GPUs only: DeepEP-style kernels). With attention TP every GPU already holds every token
    # and the layer's all-reduce combines the experts, so neither applies there.
    moe_dispatch: Literal["gather", "all_to_all"] = "gather"
    # In-engine balancer of requests over attention-DP ranks (SGLang's load-balance method).
    attention_dp_router: RankRouter = "round_robin"
    # How routed tokens spread over the experts.
    moe_routing: MoeRouting = MoeRouting()
    # Number formats of weights, activations and the KV cache; one format name is shorthand
    # for weights and activations in it (`precision: fp8`), the KV cache at its default.
    precision: PrecisionSpec = Precision()
    # The engine's batching limits and queue policy.
    scheduler: Scheduler = Scheduler()
    # software style (engines/engine_styles.yaml): host overheads, scheduling, front end;
    # `vllm@0.12.0` is shorthand for the engine and its engine_version
    engine: Literal["vllm", "sglang", "trtllm", "vllm-0.2", "distserve"] = "vllm"
    # The engine's release (e.g. 0.12.0): its defaults where they differ from the newest
    # (the style file's version ranges); None: the newest release's defaults.
    engine_version: Annotated[str, Field(min_length=1, max_length=40)] | None = None
    # False: the engine runs without CUDA graphs (vLLM --enforce-eager, SGLang
    # --disable-cuda-graph), launching every layer's kernels from Python each step.
    cuda_graphs: bool = True
    # The prefill attention kernel (e.g. flashattention-2), one the GPU profile's
    # attention_kernels block has a figure for; None: the profile's default kernel.
    attention_kernel: Annotated[str, Field(min_length=1, max_length=40)] | None = None
    # fused: each expert a grouped GEMM over the tokens routed to it (vLLM's fused_moe and
    # every current engine); unfused: each expert its own MLP over every token of the step,
    # masked by its routing weight (vLLM's Mixtral before the fused kernel, PR #2542).
    moe_kernel: Literal["fused", "unfused"] = "fused"
    # Host cost per step and per sequence; None: the engine style's (or a calibration's).
    overhead: Overhead | None = None
    # Share of GPU memory the engine may use (weights, activations, KV cache), of the memory
    # CUDA reports (the profile's memory.device_gib: an H100 has 79.65 GiB = 85.5 GB).
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.9
    # the engine's context window (vLLM --max-model-len); None: the model's
    max_model_len: PosInt | None = None
    # Offload evicted prefix-cache blocks to host memory and reload them on a hit (with
    # scheduler.prefix_caching; docs/sessions.md); None: evicted blocks are lost.
    kv_offload: KVOffload | None = None

    @model_validator(mode="before")
    @classmethod
    def _split_engine_at_version(cls, data: Any) -> Any:
        """`engine: vllm@0.12.0` is `engine: vllm` with `engine_version: 0.12.0`."""
        if not isinstance(data, dict) or not isinstance(data.get("engine"), str):
            return data
        name, at, version = data["engine"].partition("@")
        if not at:
            return data
        given = data.get("engine_version")
        if given is not None and given != version:
            raise _invalid(f"engine {data['engine']!r} names version {version!r} but "
                           f"engine_version is {given!r}; give the version once")
        return {**data, "engine": name, "engine_version": version}

    @field_validator("engine_version")
    @classmethod
    def _is_release(cls, v: str | None) -> str | None:
        if v is not None and release_number(v) is None:
            raise _invalid(f"engine_version {v!r} is not a release number (like 0.12.0 or "
                           f"1.2.0rc6); leave it out for the newest release's defaults")
        return v

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

    @field_validator("moe_dispatch")
    @classmethod
    def _dispatch_needs_ranks(cls, v: str, info: ValidationInfo) -> str:
        dp, ep = info.data.get("attention_data_parallel"), info.data.get("expert_parallel")
        if v == "all_to_all" and (dp == 1 or ep == 1):
            raise _invalid(
                f"moe_dispatch all_to_all needs attention_data_parallel > 1 and expert_parallel "
                f"> 1 (got {dp} and {ep}): with attention TP every GPU holds every token and "
                f"the layer's all-reduce combines the experts; use gather"
            )
        return v

    @field_validator("moe_kernel")
    @classmethod
    def _unfused_sees_every_token(cls, v: str, info: ValidationInfo) -> str:
        if v == "unfused" and info.data.get("moe_dispatch") == "all_to_all":
            raise _invalid(
                "moe_kernel unfused runs every expert over every token of the step, and an "
                "all_to_all dispatch delivers each rank only the tokens routed to it; use "
                "moe_dispatch gather with it"
            )
        return v

    # `speculative` is declared by the engine types that may draft (after their own fields, so
    # the scheduler is validated first); its step must fit the scheduler's token budget.
    @field_validator("speculative", check_fields=False)
    @classmethod
    def _verify_fits_a_step(
        cls, v: SpeculativeConfig | None, info: ValidationInfo
    ) -> SpeculativeConfig | None:
        return verify_fits_a_step(v, info)

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


Router = RankRouter


def verify_fits_a_step(
    v: SpeculativeConfig | None, info: ValidationInfo
) -> SpeculativeConfig | None:
    """A verification step scores the k drafted tokens plus the bonus one of every decoding
    sequence: the scheduler's token budget must hold them."""
    sched = info.data.get("scheduler")
    if v is not None and isinstance(sched, Scheduler):
        need = v.num_speculative_tokens + 1
        if need > sched.max_num_batched_tokens:
            raise _invalid(
                f"num_speculative_tokens {v.num_speculative_tokens} needs {need} tokens per "
                f"verification step, above scheduler.max_num_batched_tokens "
                f"{sched.max_num_batched_tokens}"
            )
        if sched.max_num_seqs * need > sched.max_num_batched_tokens:
            raise _invalid(
                f"scheduler.max_num_batched_tokens {sched.max_num_batched_tokens} is below "
                f"max_num_seqs {sched.max_num_seqs} × (num_speculative_tokens "
                f"{v.num_speculative_tokens} + 1) = {sched.max_num_seqs * need}; every "
                f"decoding sequence feeds k+1 tokens to its verification step"
            )
    return v


class _AggregatedKind(_Strict):
    kind: Literal["aggregated"] = "aggregated"


class AggregatedDeployment(_Worker, _AggregatedKind):  # this base order puts `kind` first
    comm_overlap: Annotated[float, Field(ge=0, le=1)] = 0.0  # communication hidden by compute
    # How requests are spread over the replicas.
    router: Router = "round_robin"
    # Speculative decoding (draft and verify); None: off.
    speculative: SpeculativeConfig | None = None

    @property
    def engine_types(self) -> tuple[tuple[str, _Worker], ...]:
        """Each engine type with the key path it sits at: here the deployment itself."""
        return (("deployment", self),)


class WorkerPool(_Worker):
    """A prefill or decode pool of a disaggregated deployment. `hardware` puts the pool on
    machines of its own (another GPU type, as Splitwise runs H100 prompt machines and A100
    token machines); unset, it shares the scenario's `hardware` with the other pool."""

    # This pool's own GPUs (another machine type); None: the scenario's hardware.
    hardware: HardwareConfig | None = None
    # Speculative decoding in this pool's decode steps (a decode pool's; a prefill pool has
    # no decode steps to speed up and refuses it).
    speculative: SpeculativeConfig | None = None


class PrefillPool(WorkerPool):
    """The prefill pool: prompts only, so nothing to draft."""

    @field_validator("speculative")
    @classmethod
    def _prefill_does_not_draft(
        cls, v: SpeculativeConfig | None, info: ValidationInfo
    ) -> SpeculativeConfig | None:
        if v is not None:
            raise _invalid(
                "a prefill pool does not draft: it runs prompts only, and speculation speeds "
                "up decode steps; put the block under deployment.decode.speculative"
            )
        return v


class KVTransfer(_Strict):
    """How a request's KV cache moves from its prefill replica to its decode replica."""

    # Path of the KV cache from prefill to decode: NVLink inside one domain, or the network (NICs).
    link: Literal["nvlink", "network"] = "network"
    gb_per_s: PosFloat | None = None  # per replica pair; None: the profile's NIC or NVLink
    latency_s: Annotated[float, Field(ge=0)] | None = None  # None: the profile's link latency
    layerwise: bool = False  # stream each layer's KV as prefill produces it


class DisaggregatedDeployment(_Strict):
    kind: Literal["disaggregated"] = "disaggregated"
    # The pool that prefills prompts (its first token goes with the KV to decode).
    prefill: PrefillPool = PrefillPool()
    # The pool that decodes.
    decode: WorkerPool = WorkerPool()
    # How the KV cache moves between the pools.
    kv_transfer: KVTransfer = KVTransfer()
    # How requests are spread over the replica pairs.
    router: Router = "round_robin"

    @property
    def engine_types(self) -> tuple[tuple[str, _Worker], ...]:
        """Each engine type with the key path it sits at: the prefill pool, then decode."""
        return (("deployment.prefill", self.prefill), ("deployment.decode", self.decode))

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
