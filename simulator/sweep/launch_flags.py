"""Engine launch flags for one engine type (an aggregated deployment or one pool of a
disaggregated one): the argument list of `vllm serve`, `python -m sglang.launch_server` or
`trtllm-serve`, and the comment lines for what has no flag.

Flag names follow each engine's documented CLI; see simulator/sweep/export.py.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.model.load import CATALOG_DIR

ENGINES = ("vllm", "sglang", "trtllm")
DEFAULT_PORT = {"vllm": 8000, "sglang": 30000, "trtllm": 8000}
TRTLLM_EXTRA = "extra-llm-api-config.yml"
_NATIVE_FORMATS = {"gpt-oss": "mxfp4"}  # checkpoints published in a 4-bit format


def hf_repo_id(model: str) -> str:
    """Catalog name -> HF repo id from the catalog's `_source`; a config path -> its folder."""
    path = CATALOG_DIR / f"{model}.json"
    if path.is_file():
        try:
            source = str(json.loads(path.read_text()).get("_source", ""))
        except (OSError, json.JSONDecodeError):
            source = ""
        ref = source.split()[0] if source else ""
        if ref.startswith("huggingface.co/"):
            return ref[len("huggingface.co/"):].strip("/")
        return model
    p = Path(model)
    return str(p.parent) if p.name == "config.json" else model


def _join(args: list[str]) -> str:
    """Shell command over several lines, two flag/value pairs per line at most."""
    out, line = [], [shlex.quote(args[0])]
    for a in args[1:]:
        if a.startswith("--") and len(" ".join(line)) > 60:
            out.append(" ".join(line))
            line = []
        line.append(shlex.quote(a))
    out.append(" ".join(line))
    return " \\\n    ".join(out)


def _dep(pool: Mapping[str, Any]) -> dict[str, Any]:
    """An engine type's keys with precision and scheduler blocks present."""
    dep = dict(pool)
    dep.setdefault("precision", {})
    dep.setdefault("scheduler", {})
    return dep


def _weights_notes(engine: str, model: str, weights: str) -> tuple[list[str], list[str]]:
    """(flags, comments) for the weight format."""
    if weights in ("bf16", "fp16"):
        dtype = "bfloat16" if weights == "bf16" else "float16"
        if engine == "vllm":
            return ["--dtype", dtype], []
        if engine == "sglang":
            return ["--dtype", dtype], []
        return [], []
    if weights == "fp8":
        if engine in ("vllm", "sglang"):
            return ["--quantization", "fp8"], []  # online FP8 (W8A8) from the BF16 checkpoint
        return [], ["# weights fp8: serve an FP8 checkpoint of the model (e.g. a ModelOpt FP8 "
                    "export); TRT-LLM reads the format from it"]
    for prefix, fmt in _NATIVE_FORMATS.items():
        if model.startswith(prefix) and weights == fmt:
            return [], []
    kind = {"int4": "an AWQ/GPTQ int4", "int8": "a W8A8 int8", "nvfp4": "an NVFP4",
            "mxfp4": "an MXFP4"}.get(weights, weights)
    return [], [f"# weights {weights}: point MODEL at {kind} checkpoint; the engine reads the "
                "format from its config"]


@dataclass(frozen=True)
class _Knobs:
    """The deployment keys the launch flags carry, with the engines' defaults filled in."""

    tp: int
    pp: int
    adp: int  # attention data parallel
    ep: int
    seqs: int  # max_num_seqs
    tokens: int  # max_num_batched_tokens
    chunked: bool
    block: int
    mem: float  # gpu_memory_utilization
    kv: str  # KV cache format
    moe_all_to_all: bool  # the simulated MoE dispatch is all-to-all


def _knobs(dep: Mapping[str, Any]) -> _Knobs:
    """The launch-relevant keys of an engine type (precision and scheduler blocks present)."""
    sched = dep["scheduler"]
    return _Knobs(
        tp=int(dep.get("tensor_parallel", 1)),
        pp=int(dep.get("pipeline_parallel", 1)),
        adp=int(dep.get("attention_data_parallel", 1)),
        ep=int(dep.get("expert_parallel", 1)),
        seqs=int(sched.get("max_num_seqs", 256)),
        tokens=int(sched.get("max_num_batched_tokens", 8192)),
        chunked=bool(sched.get("chunked_prefill", True)),
        block=int(sched.get("block_size", 16)),
        mem=float(dep.get("gpu_memory_utilization", 0.9)),
        kv=str(dep["precision"].get("kv_cache", "bf16")),
        moe_all_to_all=dep.get("moe_dispatch") == "all_to_all",
    )


def engine_args(
    pool: Mapping[str, Any], model_name: str, engine: str, extra_file: str = TRTLLM_EXTRA,
    extra_yaml: tuple[str, ...] = (),
) -> tuple[list[str], list[str]]:
    """(argument list without the port, comment and heredoc lines) for one engine type.
    `extra_yaml` adds lines to TRT-LLM's options file (written as `extra_file`)."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r}: choose one of {', '.join(ENGINES)}")
    model = hf_repo_id(model_name)
    dep = _dep(pool)
    k = _knobs(dep)
    policy = dep["scheduler"].get("policy")
    wflags, lines = _weights_notes(engine, model_name, str(dep["precision"].get("weights", "bf16")))
    if engine == "vllm":
        args, more = _vllm_args(model, k, policy == "priority", wflags)
    elif engine == "sglang":
        args, more = _sglang_args(model, k, wflags)
    else:
        args, more = _trtllm_args(model, k, extra_file, extra_yaml)
    lines += more
    if k.kv not in ("bf16", "fp16", "fp8"):
        lines.append(f"# kv_cache {k.kv}: no launch flag maps to it; the command keeps the "
                     "engine's default KV format")
    return args, lines


def _vllm_args(model: str, k: _Knobs, priority: bool,
               wflags: list[str]) -> tuple[list[str], list[str]]:
    """(`vllm serve` arguments, comments) for these knobs."""
    lines: list[str] = []
    args = ["vllm", "serve", model, "--tensor-parallel-size", str(k.tp),
            "--pipeline-parallel-size", str(k.pp)]
    if k.adp > 1:
        args += ["--data-parallel-size", str(k.adp)]
    if k.ep > 1:
        args += ["--enable-expert-parallel"]
        if k.moe_all_to_all:
            lines.append("# the simulated MoE dispatch is all-to-all: choose one of vLLM's "
                         "DeepEP all2all backends for this version (not emitted)")
        if k.ep != k.tp * k.adp:
            lines.append(f"# vLLM spreads experts over TP x DP = {k.tp * k.adp} GPUs; the "
                         f"simulated expert_parallel is {k.ep}")
    args += ["--max-num-seqs", str(k.seqs), "--max-num-batched-tokens", str(k.tokens),
             "--enable-chunked-prefill" if k.chunked else "--no-enable-chunked-prefill",
             "--gpu-memory-utilization", f"{k.mem:g}"]
    if k.kv == "fp8":
        args += ["--kv-cache-dtype", "fp8"]
    if k.block != 16:
        args += ["--block-size", str(k.block)]
    if priority:
        args += ["--scheduling-policy", "priority"]
    return args + wflags, lines


def _sglang_args(model: str, k: _Knobs, wflags: list[str]) -> tuple[list[str], list[str]]:
    """(`python -m sglang.launch_server` arguments, comments) for these knobs."""
    args = ["python", "-m", "sglang.launch_server", "--model-path", model,
            "--tp-size", str(k.tp * k.adp)]
    if k.adp > 1:
        args += ["--dp-size", str(k.adp), "--enable-dp-attention"]
    if k.ep > 1:
        args += ["--ep-size", str(k.ep)]
        if k.moe_all_to_all:
            args += ["--moe-a2a-backend", "deepep"]
    if k.pp > 1:
        args += ["--pp-size", str(k.pp)]
    args += ["--max-running-requests", str(k.seqs),
             "--chunked-prefill-size", str(k.tokens) if k.chunked else "-1",
             "--max-prefill-tokens", str(k.tokens), "--mem-fraction-static", f"{k.mem:g}"]
    if k.kv == "fp8":
        args += ["--kv-cache-dtype", "fp8_e4m3"]
    if k.block != 16:
        args += ["--page-size", str(k.block)]
    return args + wflags, []


def _trtllm_args(model: str, k: _Knobs, extra_file: str,
                 extra_yaml: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(`trtllm-serve` arguments, the heredoc writing its options file and comments) for these
    knobs; the weight format needs no flag (TRT-LLM reads it from the checkpoint)."""
    extra = [f"enable_chunked_prefill: {'true' if k.chunked else 'false'}",
             f"enable_attention_dp: {'true' if k.adp > 1 else 'false'}",
             "kv_cache_config:", f"  free_gpu_memory_fraction: {k.mem:g}"]
    if k.kv == "fp8":
        extra.append("  dtype: fp8")
    lines = [f"cat > {extra_file} <<'EOF'", *extra, *extra_yaml, "EOF"]
    args = ["trtllm-serve", model, "--backend", "pytorch", "--tp_size", str(k.tp * k.adp),
            "--pp_size", str(k.pp)]
    if k.ep > 1:
        args += ["--ep_size", str(k.ep)]
        if k.moe_all_to_all:
            lines.append("# the simulated MoE dispatch is all-to-all: TensorRT-LLM picks its "
                         "MoE communication with attention DP itself (not emitted)")
    args += ["--max_batch_size", str(k.seqs), "--max_num_tokens", str(k.tokens),
             "--kv_cache_free_gpu_memory_fraction", f"{k.mem:g}",
             "--extra_llm_api_options", extra_file]
    return args, lines


def gpus_per_replica(pool: Mapping[str, Any]) -> int:
    return (int(pool.get("tensor_parallel", 1)) * int(pool.get("pipeline_parallel", 1))
            * int(pool.get("attention_data_parallel", 1)))


def replica_lines(args: list[str], replicas: int, per_replica: int, port: int,
                  first_gpu: int = 0, env: list[str] | None = None) -> list[str]:
    """One backgrounded engine per replica on its own GPUs and port, `env` set before it."""
    out = []
    for r in range(replicas):
        lo = first_gpu + r * per_replica
        gpus = ",".join(str(g) for g in range(lo, lo + per_replica))
        out.append(_join([f"CUDA_VISIBLE_DEVICES={gpus}", *(env or []), *args,
                          "--port", str(port + r)]) + " &")
    return out
