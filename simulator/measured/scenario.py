"""A MeasuredRun as a frontier scenario dict, with the choices the file did not record made
as declared defaults (listed with every run's result), or the reason it cannot be expressed.

Silicon rows carry their whole setup; the benchmark clients' files carry only the load and
the metrics, so their deployment is the base scenario given alongside (`--scenario`, `--set`)
with the run's workload in place of the base's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from simulator.engines.style import release_number
from simulator.errors import InputError
from simulator.inputs.deployment import Scheduler
from simulator.inputs.scenario import apply_overrides
from simulator.measured.id_layout import ID_LAYOUT, PD_COMPLETED_BY_TWIN
from simulator.measured.run import LAYOUT_CONTRADICTED, MeasuredRun, Pool
from simulator.measured.workload_map import Unsupported
from simulator.measured.workload_map import declare as _declare
from simulator.measured.workload_map import workload as _workload

ENGINE_STYLES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm"}
# A P/D row without worker counts: its load per worker, so its TTFT and TPOT, is unknown; the
# run is simulated on one worker per pool and scored apart from the headline (scoring.py).
WORKERS_GUESSED = "disagg num_workers not recorded: 1 prefill and 1 decode worker"
# Declared defaults that leave a run's layout, so its load per GPU, in doubt (the other: a
# measurement the file lists again under another layout, run.LAYOUT_CONTRADICTED): the
# headline figures leave such runs out and the calibration does not fit them.
LAYOUT_IN_DOUBT = (WORKERS_GUESSED, LAYOUT_CONTRADICTED)
# max_num_batched_tokens where a file does not record it: the scenario schema's own default.
DEFAULT_TOKEN_BUDGET: int = Scheduler.model_fields["max_num_batched_tokens"].default
# The token budgets the calibration file's benchmark deploys with, where the file does not record
# them: AIConfigurator's generator in benchmark mode (ai-dynamo/aiconfigurator,
# src/aiconfigurator/generator/rule_plugin/benchmark/{vllm,trtllm,sglang}.rule, unchanged from
# its first version of 2026-01-30, commit 71bb3d00e, to 095f58a51): vLLM and TensorRT-LLM step
# budgets (max_num_tokens) of batch + ISL + 1500 aggregated, ISL + 1500 on prefill workers and
# the batch on decode workers (TensorRT-LLM's rounded up to its 32-token blocks); SGLang's
# --max-prefill-tokens ISL + 1500 on every worker.
# The generator's TensorRT-LLM engine arguments (backend_templates/trtllm/extra_engine_args.*):
# enable_chunked_prefill false, tokens_per_block 32 (trtllm.rule), and
# kv_cache_config.free_gpu_memory_fraction 0.80 (TensorRT-LLM's own default is 0.9).
BENCH_BUDGET_MARGIN = 1500
# The generator's SGLang rules set `agg enable_mixed_chunk = true` (rule_plugin/benchmark/
# sglang.rule and rule_plugin/sglang.rule, from 71bb3d00e on), written as --enable-mixed-chunk
# by its SGLang templates (cli_args.j2, cli_args.0.5.9.j2): aggregated SGLang workers mix new
# prompts into the running decode batch (scheduler.py is_mixed_chunk, with chunked prefill on).
SGLANG_AGG_MIXED_CHUNK = True
TRTLLM_TOKENS_PER_BLOCK = 32
TRTLLM_FREE_MEMORY_FRACTION = 0.8
KV_CACHE_DEFAULT = "bf16"  # engines' `auto` KV dtype: the model's BF16 activations
# NVFP4 rows run NVIDIA's ModelOpt NVFP4 checkpoints, whose hf_quant_config.json declares
# "kv_cache_quant_algo": "FP8" (every one AIConfigurator ships in aic-core model_configs at
# 095f58a51: DeepSeek-V3.1/V3.2, GLM-5, Kimi-K2.6, MiniMax-M2.5, Qwen3-235B, Qwen3.5-397B), and
# the engines' `auto` KV dtype follows a checkpoint's KV directive. Evidence in the file:
# Llama-3.1-70B NVFP4 on one B200 at 64 x (1024 + 8192) tokens ran with a 241 ms TTFT, which
# fits only with an FP8 KV cache (BF16 would need 193 GB of KV).
NVFP4_CHECKPOINT_KV = "fp8"
# TensorRT-LLM's FP8 rows run an FP8 KV cache too. Its PyTorch backend serves FP8 from
# pre-quantized checkpoints (TensorRT-LLM docs, features/quantization "Running Pre-quantized
# Models"), and NVIDIA's Model Optimizer writes them with an FP8 KV cache unless told otherwise
# (TensorRT-Model-Optimizer examples/llm_ptq/hf_ptq.py: --kv_cache_qformat default "fp8");
# AIConfigurator, whose generator deployed these runs, also infers an FP8 KV cache for fp8 and
# fp8_block checkpoints (sdk models _infer_quant_modes_from_raw_config at 095f58a51) and writes
# it as kv_cache_config.dtype (generator/module_bridge.py). Evidence in the file: Llama-3.1-70B
# FP8 on two B200 at 128 x (1024 + 8192) tokens ran with a 367 ms TTFT; TensorRT-LLM reserves
# the whole sequence at admission, and a BF16 cache would need 128 x 9216 tokens x 163,840 B
# (80 layers x 8 KV heads x 128 x 2 x 2 B over 2 GPUs) = 193 GB a GPU, more than the device's
# 178.4 GiB = 192 GB before its 35 GB of weights. vLLM and SGLang can quantize a
# BF16 checkpoint when they load it, whose `auto` KV dtype stays BF16, and their rows do not
# tell the two apart (vLLM Llama-3.1-70B: three rows each way), so they keep KV_CACHE_DEFAULT.
TRTLLM_FP8_KV = "fp8"
# SGLang's `auto` KV dtype for DeepSeek-sparse-attention models is FP8 on Blackwell and BF16
# on Hopper (server_args.py _set_default_nsa_kv_cache_dtype: "fp8_e4m3" if the compute
# capability's major >= 10 else "bfloat16"); GLM-5 takes that path since SGLang PR #18521
# (2026-02-10) added GlmMoeDsaForCausalLM to is_deepseek_nsa. The benchmark generator passes
# BF16 on as `auto` (rule_plugin/benchmark/sglang.rule), so the engine's default decides.
SGLANG_DSA_BLACKWELL_KV = "fp8"
# A row without attention_dp_size whose batch_size (per attention-DP rank) times tp_size is
# exactly its concurrency, and below it, ran attention DP over its TP ranks: every recorded
# TensorRT-LLM attention-DP row of the file is written tp 1, adp N with concurrency = batch x N,
# and these ten (DeepSeek-R1/V3 on B200/GB200, gpt-oss-120b on H100; TensorRT-LLM 1.3.0rc1 and
# rc5, 4000/1000 tokens) were measured at 0.35-1.6 s TTFT, which one rank holding batch_size
# requests of a 40-448-client loop could not give (35-122 s in the model).
ATTENTION_DP_INFERRED = ("attention_dp_size not recorded; batch_size x tp_size = concurrency: "
                         "attention DP over the TP ranks (tp 1, adp tp_size)")


@dataclass(frozen=True, slots=True)
class Mapped:
    """A run and its scenario (None when refused), the declared defaults it took, its group."""

    run: MeasuredRun
    scenario: dict[str, Any] | None
    defaults: tuple[str, ...]
    group: tuple[str, str, str]  # (GPU, engine, mode)
    refused: Unsupported | None = None


@cache
def shipped_models() -> frozenset[str]:
    from simulator.model.load import catalog_names

    return frozenset(catalog_names())


@cache
def domain_size(gpu: str) -> int:
    """GPUs of one NVLink domain of this profile: the machine's `gpus_per_node`."""
    from simulator.hardware.profile import load_hardware

    return min(72, load_hardware(gpu).scale_up_domain_size)


@cache
def shipped_gpus() -> frozenset[str]:
    from simulator.hardware.profile import profile_paths

    return frozenset(profile_paths())


def layout_in_doubt(defaults: Sequence[str]) -> bool:
    """Whether a mapped run's declared defaults leave its layout in doubt (LAYOUT_IN_DOUBT)."""
    return any(d in defaults for d in LAYOUT_IN_DOUBT)


def map_run(
    run: MeasuredRun, base: Mapping[str, Any] | None, overrides: Sequence[str] = (),
    named_layouts: bool = True,
) -> Mapped:
    """The run's scenario (overrides applied last) or its refusal; InputError for a user
    error (an unknown name, no base scenario for a file that needs one). `named_layouts`
    False keeps a silicon row's layout columns where its run id names fewer GPUs
    (id_layout.py; REPORT.md's ablation switches it off)."""
    defaults: list[str] = []
    if any(n.startswith(LAYOUT_CONTRADICTED) for n in run.notes):  # silicon.py's note
        _declare(defaults, LAYOUT_CONTRADICTED)
    try:
        if run.pools:
            scenario = _silicon_scenario(run, defaults, named_layouts)
        else:
            if base is None:
                raise InputError(
                    f"{run.where}: a {run.format} result does not record the deployment "
                    f"(model, GPU, layout); give --scenario FILE and/or --set key=value"
                )
            scenario = {**dict(base), "workload": _workload(run, run.load, defaults)}
            scenario.setdefault("name", run.run_id)
        scenario = apply_overrides(scenario, list(overrides))
    except Unsupported as exc:
        return Mapped(run, None, tuple(defaults), _run_group(run), exc)
    return Mapped(run, scenario, tuple(defaults), _group(scenario), None)


def _run_group(run: MeasuredRun) -> tuple[str, str, str]:
    mode = {"agg": "aggregated", "disagg": "disaggregated"}.get(run.mode or "", "?")
    return (run.gpu or "?", run.engine or "?", mode)


def _group(s: Mapping[str, Any]) -> tuple[str, str, str]:
    dep = s.get("deployment") or {}
    kind = dep.get("kind", "aggregated") if isinstance(dep, Mapping) else "?"
    pool = dep.get("decode", {}) if kind == "disaggregated" else dep
    engine = pool.get("engine", "vllm") if isinstance(pool, Mapping) else "?"
    hw = s.get("hardware") or {}
    return (str(hw.get("gpu", "?")) if isinstance(hw, Mapping) else "?", str(engine), str(kind))


def _silicon_scenario(run: MeasuredRun, defaults: list[str], named_layouts: bool = True
                      ) -> dict[str, Any]:
    assert run.model is not None and run.gpu is not None and run.engine is not None
    _check_names(run)
    precision = _precision(run, defaults)
    conc = run.load.concurrency or 1
    recorded = run.pools
    if named_layouts and run.named_pools is not None:
        # The reader's id_layout: name_layouts sets an aggregated run's, complete_pd_layouts
        # (the only source for P/D) a disaggregated one's.
        recorded = run.named_pools
        _declare(defaults, PD_COMPLETED_BY_TWIN if run.mode == "disagg" else ID_LAYOUT)
    pools = [
        {**_pool(p, run.engine, precision, conc, defaults, label,
                 max(1, round(run.load.input_tokens))), **_version(run, defaults)}
        for p, label in zip(recorded, ("prefill ", "decode ") if run.mode == "disagg" else ("",),
                            strict=True)
    ]
    if run.mode == "disagg":
        deployment: dict[str, Any] = {"kind": "disaggregated", "prefill": pools[0],
                                      "decode": pools[1]}
        _declare(defaults, "disagg KV transfer: the profile's default link (not recorded)")
    else:
        deployment = {"kind": "aggregated", **pools[0]}
    gpus = sum(p.gpus_per_worker * (p.workers or 1) for p in recorded)
    per_node = domain_size(run.gpu)
    return {
        "name": run.run_id,
        "model": run.model,
        "hardware": {"gpu": run.gpu, "gpus_per_node": per_node,
                     "nodes": max(1, math.ceil(gpus / per_node))},
        "deployment": deployment,
        "workload": _workload(run, run.load, defaults),
    }


def _check_names(run: MeasuredRun) -> None:
    assert run.model is not None and run.gpu is not None
    # Every model and GPU the reference file names has a catalog entry and a profile (Qwen3.5's
    # Gated DeltaNet hybrid and GLM-5's sparse attention included): any other is a misspelling.
    if run.model not in shipped_models():
        raise InputError(f"{run.where}: model: {run.model!r} is not a known model (valid: "
                         f"{', '.join(sorted(shipped_models()))})")
    if run.gpu not in shipped_gpus():
        raise InputError(f"{run.where}: gpu: {run.gpu!r} is not a known GPU (valid: "
                         f"{', '.join(sorted(shipped_gpus()))})")
    if run.engine not in ENGINE_STYLES:
        raise InputError(f"{run.where}: backend: {run.engine!r} is not one of "
                         f"{', '.join(ENGINE_STYLES)}")


def _precision(run: MeasuredRun, defaults: list[str]) -> dict[str, str]:
    """Weights and activations from the quant modes; the KV cache format is not recorded."""
    formats = {_format(run, q) for q in (run.gemm_quant or "", run.moe_quant or "")}
    if len(formats) != 1:
        raise Unsupported("mixed weight formats", f"gemm {run.gemm_quant!r} and moe "
                          f"{run.moe_quant!r} map to different formats {sorted(formats)}")
    weights, activations = formats.pop()
    if weights == "mxfp4":
        _declare(defaults, "gpt-oss nvfp4 rows: its MXFP4 checkpoint with BF16 activations")
    kv = KV_CACHE_DEFAULT
    if weights == "nvfp4":
        kv = NVFP4_CHECKPOINT_KV
        _declare(defaults, f"kv_cache {kv} on NVFP4 rows: NVIDIA's ModelOpt NVFP4 checkpoints "
                           "declare an FP8 KV cache, which the engines' auto KV dtype follows")
    elif weights == "fp8" and run.engine == "trtllm":
        kv = TRTLLM_FP8_KV
        _declare(defaults, f"kv_cache {kv} on TensorRT-LLM FP8 rows: it serves pre-quantized "
                           "checkpoints, which Model Optimizer writes with an FP8 KV cache")
    elif run.engine == "sglang" and _sparse_attention_on_blackwell(run):
        kv = SGLANG_DSA_BLACKWELL_KV
        _declare(defaults, f"kv_cache {kv}: SGLang's auto KV dtype for sparse-attention (DSA) "
                           "models on Blackwell")
    else:
        _declare(defaults, f"kv_cache {KV_CACHE_DEFAULT} (KV-cache format not recorded)")
    return {"weights": weights, "activations": activations, "kv_cache": kv}


def _sparse_attention_on_blackwell(run: MeasuredRun) -> bool:
    """Whether the run's model has DeepSeek sparse attention and its GPU is a Blackwell one."""
    assert run.model is not None and run.gpu is not None
    return _dsa_on_blackwell(run.model, run.gpu)


@cache
def _dsa_on_blackwell(model: str, gpu: str) -> bool:
    """Per (model, GPU) once: a file maps thousands of rows of a few of each."""
    from simulator.hardware.profile import load_hardware
    from simulator.model.load import load_architecture

    return (load_architecture(model).sparse is not None
            and load_hardware(gpu).architecture == "blackwell")


def _format(run: MeasuredRun, quant: str) -> tuple[str, str]:
    if quant in ("", "bf16"):
        return ("bf16", "bf16")
    if quant in ("fp8", "fp8_block"):  # frontier's fp8 is 128x128 block-scaled already
        return ("fp8", "fp8")
    if quant == "int4_wo":
        return ("int4", "bf16")
    if (run.model or "").startswith("gpt-oss"):
        return ("mxfp4", "bf16")
    return ("nvfp4", "nvfp4")


def _pool(p: Pool, engine: str, precision: dict[str, str], conc: int, defaults: list[str],
          label: str, isl: int) -> dict[str, Any]:
    dp = p.attention_data_parallel or 1
    tp = p.tensor_parallel
    if p.attention_data_parallel is None and _dp_over_tp_ranks(p, conc, label):
        dp, tp = tp, 1
        _declare(defaults, ATTENTION_DP_INFERRED)
    elif p.attention_data_parallel is None:
        _declare(defaults, "attention_dp_size not recorded: 1")
    if p.workers is None and label:
        _declare(defaults, WORKERS_GUESSED)
    workers = p.workers or 1
    seqs = p.max_batch
    if seqs is None:
        seqs = max(1, math.ceil(conc / (workers * dp)))
        _declare(defaults, "batch size not recorded: max_num_seqs = concurrency per "
                           "attention-DP rank")
    memory = ({"gpu_memory_utilization": TRTLLM_FREE_MEMORY_FRACTION} if engine == "trtllm"
              else {})
    return {
        **memory,
        "replicas": workers,
        "tensor_parallel": tp,
        "pipeline_parallel": p.pipeline_parallel,
        "attention_data_parallel": dp,
        "expert_parallel": p.expert_parallel or 1,
        "precision": dict(precision),
        "engine": ENGINE_STYLES[engine],
        "scheduler": {"max_num_seqs": seqs,
                      **_bench_budget(engine, label.strip(), seqs, isl, defaults)},
    }


def _dp_over_tp_ranks(p: Pool, conc: int, label: str) -> bool:
    """Whether an aggregated pool whose attention-DP size is not recorded ran attention DP
    over its TP ranks: its batch size (per attention-DP rank) times its TP size is exactly the
    concurrency and below it, the way the file writes the attention-DP layouts it records."""
    seqs = p.max_batch
    return (not label and seqs is not None and p.tensor_parallel > 1 and seqs < conc
            and seqs * p.tensor_parallel == conc)


def _bench_budget(engine: str, role: str, seqs: int, isl: int,
                  defaults: list[str]) -> dict[str, Any]:
    """The scheduler keys the benchmark's generator deploys a worker with: its step budget
    (BENCH_BUDGET_MARGIN's source) and, for SGLang aggregated workers, mixed prefill
    (SGLANG_AGG_MIXED_CHUNK); `role` is '' (aggregated), 'prefill' or 'decode'."""
    if engine == "sglang":
        _declare(defaults, f"max_prefill_tokens ISL + {BENCH_BUDGET_MARGIN} (the benchmark "
                           f"generator's; not recorded); max_num_batched_tokens "
                           f"max({DEFAULT_TOKEN_BUDGET}, max_num_seqs)")
        keys: dict[str, Any] = {"max_num_batched_tokens": max(DEFAULT_TOKEN_BUDGET, seqs),
                                "max_prefill_tokens": isl + BENCH_BUDGET_MARGIN}
        if not role:
            _declare(defaults, "SGLang mixes prefill with the running decodes "
                               "(--enable-mixed-chunk, as the benchmark generator writes it for "
                               "aggregated workers; not recorded)")
            keys["mix_prefill_decode"] = SGLANG_AGG_MIXED_CHUNK
        return keys
    budget = {"": seqs + isl + BENCH_BUDGET_MARGIN, "prefill": isl + BENCH_BUDGET_MARGIN,
              "decode": seqs}[role]
    _declare(defaults, f"max_num_batched_tokens: the benchmark generator's {engine} budget "
                       f"(aggregated batch + ISL + {BENCH_BUDGET_MARGIN}, prefill ISL + "
                       f"{BENCH_BUDGET_MARGIN}, decode the batch; not recorded)")
    if engine == "trtllm":
        budget = -(-budget // TRTLLM_TOKENS_PER_BLOCK) * TRTLLM_TOKENS_PER_BLOCK
        _declare(defaults, "TensorRT-LLM as the benchmark generator writes it: chunked "
                           f"prefill off, {TRTLLM_TOKENS_PER_BLOCK}-token KV blocks, "
                           f"{TRTLLM_FREE_MEMORY_FRACTION} of free memory for the KV cache "
                           "(not recorded)")
        return {"max_num_batched_tokens": max(budget, seqs), "chunked_prefill": False,
                "block_size": TRTLLM_TOKENS_PER_BLOCK}
    return {"max_num_batched_tokens": max(budget, seqs)}


def _version(run: MeasuredRun, defaults: list[str]) -> dict[str, str]:
    """The run's engine release as the pool's engine_version (its style's defaults for that
    release); a version that names no release ('nightly-dev') or none recorded runs on the
    newest release's defaults, declared."""
    v = run.engine_version
    if v is not None and release_number(v) is not None:
        return {"engine_version": v}
    _declare(defaults, f"engine version {v!r} names no release: the newest release's defaults"
             if v else "engine version not recorded: the newest release's defaults")
    return {}
