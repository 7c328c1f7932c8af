"""`frontier export`: the best configs of a sweep as real launch commands for vLLM, SGLang or
TensorRT-LLM, each with the `vllm bench serve` command that replays the simulated load.

Flag names follow each engine's documented CLI (vLLM `vllm serve`, SGLang
`python -m sglang.launch_server`, TensorRT-LLM `trtllm-serve` with an
`--extra_llm_api_options` YAML for what has no flag). Where the simulated config has no flag
(a 4-bit checkpoint, an FP8 checkpoint for TRT-LLM), a comment says what to provide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simulator.sweep.export_pd import disaggregated_launch, front_port
from simulator.sweep.launch_flags import (
    DEFAULT_PORT,
    ENGINES,
    TRTLLM_EXTRA,
    _join,
    engine_args,
    gpus_per_replica,
    hf_repo_id,
    replica_lines,
)

__all__ = ["ENGINES", "TRTLLM_EXTRA", "bench_command", "hf_repo_id", "launch_commands",
           "with_copies"]


def with_copies(scenario: Mapping[str, Any], copies: int) -> dict[str, Any]:
    """The scenario with `copies` times its replicas (each pool's, when disaggregated): what
    `recommend --rate` sizes, so the exported launch matches its answer."""
    s = dict(scenario)
    dep = dict(s.get("deployment") or {})
    if dep.get("kind", "aggregated") == "aggregated":
        dep["replicas"] = int(dep.get("replicas", 1)) * copies
    else:
        for side in ("prefill", "decode"):
            pool = dict(dep.get(side) or {})
            pool["replicas"] = int(pool.get("replicas", 1)) * copies
            dep[side] = pool
    s["deployment"] = dep
    return s


def launch_commands(scenario: Mapping[str, Any], engine: str) -> list[str]:
    """Shell lines (comments included) that start the engine for this scenario."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r}: choose one of {', '.join(ENGINES)}")
    model_name = str(scenario.get("model", ""))
    dep = dict(scenario.get("deployment") or {})
    if dep.get("kind", "aggregated") != "aggregated":
        return disaggregated_launch(dep, model_name, engine)
    args, lines = engine_args(dep, model_name, engine)
    replicas = int(dep.get("replicas", 1))
    port = DEFAULT_PORT[engine]
    if replicas == 1:
        return [*lines, _join([*args, "--port", str(port)])]
    per_replica = gpus_per_replica(dep)
    lines.append(f"# {replicas} replicas of {per_replica} GPU(s), one engine each, behind a "
                 f"load balancer ({dep.get('router', 'round_robin')} routing)")
    return [*lines, *replica_lines(args, replicas, per_replica, port)]


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
    dep = scenario.get("deployment") or {}
    disaggregated = dep.get("kind", "aggregated") != "aggregated"
    port = front_port(engine) if disaggregated else DEFAULT_PORT[engine]
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
    if not disaggregated and int(dep.get("replicas", 1)) > 1:
        notes.append("# point --base-url at the load balancer in front of the replicas")
    return [*notes, _join(args)]
