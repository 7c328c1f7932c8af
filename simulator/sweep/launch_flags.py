"""Engine launch flags for one engine type (an aggregated deployment or one pool of a
disaggregated one): the argument list of `vllm serve`, `python -m sglang.launch_server` or
`trtllm-serve`, and the comment lines for what has no flag.

Flag names follow each engine's documented CLI; see simulator/sweep/export.py.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
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
    out, line = [], [args[0]]
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
    tp = int(dep.get("tensor_parallel", 1))
    pp = int(dep.get("pipeline_parallel", 1))
    adp = int(dep.get("attention_data_parallel", 1))
    ep = int(dep.get("expert_parallel", 1))
    prec = dep["precision"]
    sched = dep["scheduler"]
    seqs = int(sched.get("max_num_seqs", 256))
    tokens = int(sched.get("max_num_batched_tokens", 8192))
    chunked = bool(sched.get("chunked_prefill", True))
    block = int(sched.get("block_size", 16))
    mem = float(dep.get("gpu_memory_utilization", 0.9))
    kv = str(prec.get("kv_cache", "bf16"))
    wflags, lines = _weights_notes(engine, model_name, str(prec.get("weights", "bf16")))
    if engine == "vllm":
        args = ["vllm", "serve", model, "--tensor-parallel-size", str(tp),
                "--pipeline-parallel-size", str(pp)]
        if adp > 1:
            args += ["--data-parallel-size", str(adp)]
        if ep > 1:
            args += ["--enable-expert-parallel"]
            if dep.get("moe_dispatch") == "all_to_all":
                lines.append("# the simulated MoE dispatch is all-to-all: choose one of vLLM's "
                             "DeepEP all2all backends for this version (not emitted)")
            if ep != tp * adp:
                lines.append(f"# vLLM spreads experts over TP x DP = {tp * adp} GPUs; the "
                             f"simulated expert_parallel is {ep}")
        args += ["--max-num-seqs", str(seqs), "--max-num-batched-tokens", str(tokens),
                 "--enable-chunked-prefill" if chunked else "--no-enable-chunked-prefill",
                 "--gpu-memory-utilization", f"{mem:g}"]
        if kv == "fp8":
            args += ["--kv-cache-dtype", "fp8"]
        if block != 16:
            args += ["--block-size", str(block)]
        if sched.get("policy") == "priority":
            args += ["--scheduling-policy", "priority"]
        args += wflags
    elif engine == "sglang":
        args = ["python", "-m", "sglang.launch_server", "--model-path", model,
                "--tp-size", str(tp * adp)]
        if adp > 1:
            args += ["--dp-size", str(adp), "--enable-dp-attention"]
        if ep > 1:
            args += ["--ep-size", str(ep)]
            if dep.get("moe_dispatch") == "all_to_all":
                args += ["--moe-a2a-backend", "deepep"]
        if pp > 1:
            args += ["--pp-size", str(pp)]
        args += ["--max-running-requests", str(seqs),
                 "--chunked-prefill-size", str(tokens) if chunked else "-1",
                 "--max-prefill-tokens", str(tokens), "--mem-fraction-static", f"{mem:g}"]
        if kv == "fp8":
            args += ["--kv-cache-dtype", "fp8_e4m3"]
        if block != 16:
            args += ["--page-size", str(block)]
        args += wflags
    else:
        extra = [f"enable_chunked_prefill: {'true' if chunked else 'false'}",
                 f"enable_attention_dp: {'true' if adp > 1 else 'false'}",
                 "kv_cache_config:", f"  free_gpu_memory_fraction: {mem:g}"]
        if kv == "fp8":
            extra.append("  dtype: fp8")
        lines += [f"cat > {extra_file} <<'EOF'", *extra, *extra_yaml, "EOF"]
        args = ["trtllm-serve", model, "--backend", "pytorch", "--tp_size", str(tp * adp),
                "--pp_size", str(pp)]
        if ep > 1:
            args += ["--ep_size", str(ep)]
            if dep.get("moe_dispatch") == "all_to_all":
                lines.append("# the simulated MoE dispatch is all-to-all: TensorRT-LLM picks its "
                             "MoE communication with attention DP itself (not emitted)")
        args += ["--max_batch_size", str(seqs), "--max_num_tokens", str(tokens),
                 "--kv_cache_free_gpu_memory_fraction", f"{mem:g}",
                 "--extra_llm_api_options", extra_file]
    if kv not in ("bf16", "fp16", "fp8"):
        lines.append(f"# kv_cache {kv}: no launch flag maps to it; the command keeps the "
                     "engine's default KV format")
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
