"""`frontier export`: the best configs of a sweep as real launch commands for vLLM, SGLang or
TensorRT-LLM, each with the `vllm bench serve` command that replays the simulated load.

Flag names follow each engine's documented CLI (vLLM `vllm serve`, SGLang
`python -m sglang.launch_server`, TensorRT-LLM `trtllm-serve` with an
`--extra_llm_api_options` YAML for what has no flag). Where the simulated config has no flag
(a 4-bit checkpoint, an FP8 checkpoint for TRT-LLM), a comment says what to provide.
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


def _dep(scenario: Mapping[str, Any]) -> dict[str, Any]:
    dep = dict(scenario.get("deployment") or {})
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


def launch_commands(scenario: Mapping[str, Any], engine: str) -> list[str]:
    """Shell lines (comments included) that start the engine for this scenario."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r}: choose one of {', '.join(ENGINES)}")
    model_name = str(scenario.get("model", ""))
    model = hf_repo_id(model_name)
    dep = _dep(scenario)
    if dep.get("kind", "aggregated") != "aggregated":
        return [f"# {engine}: disaggregated deployments are not exported yet"]
    tp = int(dep.get("tensor_parallel", 1))
    pp = int(dep.get("pipeline_parallel", 1))
    adp = int(dep.get("attention_data_parallel", 1))
    ep = int(dep.get("expert_parallel", 1))
    replicas = int(dep.get("replicas", 1))
    prec = dep["precision"]
    sched = dep["scheduler"]
    seqs = int(sched.get("max_num_seqs", 256))
    tokens = int(sched.get("max_num_batched_tokens", 8192))
    chunked = bool(sched.get("chunked_prefill", True))
    block = int(sched.get("block_size", 16))
    mem = float(dep.get("gpu_memory_utilization", 0.9))
    kv = str(prec.get("kv_cache", "bf16"))
    wflags, lines = _weights_notes(engine, model_name, str(prec.get("weights", "bf16")))
    port = DEFAULT_PORT[engine]
    if engine == "vllm":
        args = ["vllm", "serve", model, "--tensor-parallel-size", str(tp),
                "--pipeline-parallel-size", str(pp)]
        if adp > 1:
            args += ["--data-parallel-size", str(adp)]
        if ep > 1:
            args += ["--enable-expert-parallel"]
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
        lines += [f"cat > {TRTLLM_EXTRA} <<'EOF'", *extra, "EOF"]
        args = ["trtllm-serve", model, "--backend", "pytorch", "--tp_size", str(tp * adp),
                "--pp_size", str(pp)]
        if ep > 1:
            args += ["--ep_size", str(ep)]
        args += ["--max_batch_size", str(seqs), "--max_num_tokens", str(tokens),
                 "--kv_cache_free_gpu_memory_fraction", f"{mem:g}",
                 "--extra_llm_api_options", TRTLLM_EXTRA]
    if kv not in ("bf16", "fp16", "fp8"):
        lines.append(f"# kv_cache {kv}: no launch flag maps to it; the command keeps the "
                     "engine's default KV format")
    per_replica = tp * pp * adp
    if replicas == 1:
        return [*lines, _join([*args, "--port", str(port)])]
    lines.append(f"# {replicas} replicas of {per_replica} GPU(s), one engine each, behind a "
                 f"load balancer ({dep.get('router', 'round_robin')} routing)")
    for r in range(replicas):
        gpus = ",".join(str(g) for g in range(r * per_replica, (r + 1) * per_replica))
        lines.append(_join([f"CUDA_VISIBLE_DEVICES={gpus}", *args, "--port", str(port + r)])
                     + " &")
    return lines


def _length_args(spec: Mapping[str, Any] | None, which: str) -> tuple[list[str], list[str]]:
    """--random-{which}-len (and a range ratio) approximating a length distribution."""
    if not spec:
        return [], []
    kind = spec.get("kind")
    flag = f"--random-{which}-len"
    if kind == "fixed":
        return [flag, str(int(spec["value"]))], []
    if kind == "uniform":
        lo, hi = int(spec["min"]), int(spec["max"])
        mid = (lo + hi) / 2
        return [flag, f"{mid:.0f}", "--random-range-ratio", f"{(hi - lo) / (hi + lo):.3g}"], []
    center = spec.get("median") or spec.get("mean")
    if kind == "empirical" and spec.get("values"):
        vals = list(spec["values"])
        center = sum(vals) / len(vals)
    if center:
        return [flag, f"{float(center):.0f}"], [
            f"# {which} lengths: vllm bench's random dataset draws uniform lengths; the "
            f"simulated {kind} distribution is approximated by its centre {float(center):.0f}"]
    return [], [f"# {which} lengths: {kind} from a file; pass a matching --dataset-name custom"]


def bench_command(scenario: Mapping[str, Any], engine: str) -> list[str]:
    """`vllm bench serve` lines that send the simulated workload to the engine."""
    wl = scenario.get("workload") or {}
    arrival = wl.get("arrival") or {}
    kind = arrival.get("kind")
    model = hf_repo_id(str(scenario.get("model", "")))
    if kind == "trace":
        return ["# the workload replays a trace: send it with vllm bench serve --dataset-name "
                "custom (the trace's prompts) and the trace's timing"]
    port = DEFAULT_PORT[engine]
    args = ["vllm", "bench", "serve", "--backend", "vllm" if engine == "vllm" else "openai",
            "--base-url", f"http://127.0.0.1:{port}", "--model", model,
            "--dataset-name", "random"]
    notes: list[str] = []
    for which, key in (("input", "input_tokens"), ("output", "output_tokens")):
        a, n = _length_args(wl.get(key), which)
        args += a
        notes += n
    args += ["--num-prompts", str(int(wl.get("num_requests", 1000)))]
    if kind == "closed_loop":
        args += ["--max-concurrency", str(int(arrival["concurrency"])), "--request-rate", "inf"]
    elif kind == "offline":
        args += ["--request-rate", "inf"]
    elif kind in ("poisson", "gamma", "constant"):
        args += ["--request-rate", f"{float(arrival['rate_per_s']):g}"]
        if kind == "gamma":
            # vllm bench draws gamma gaps with shape = burstiness, so cv = 1/sqrt(burstiness)
            args += ["--burstiness", f"{1.0 / float(arrival['cv']) ** 2:.4g}"]
        if kind == "constant":
            notes.append("# constant arrivals: vllm bench sends Poisson arrivals at this rate")
    args += ["--ignore-eos", "--seed", str(int(wl.get("seed", 0)))]
    if int((scenario.get("deployment") or {}).get("replicas", 1)) > 1:
        notes.append("# point --base-url at the load balancer in front of the replicas")
    return [*notes, _join(args)]
