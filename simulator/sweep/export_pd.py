"""`frontier export` for a disaggregated deployment: each pool's engines with their KV
connector, then the front end that sends a request's prefill to one pool and its decode to
the other.

Per engine, as documented: vLLM runs every instance with `--kv-transfer-config` naming the
NixlConnector and puts its example proxy (tests/v1/kv_connector/nixl_integration/
toy_proxy_server.py, vLLM's NixlConnector usage guide) in front; SGLang starts servers with
`--disaggregation-mode prefill|decode` and `sglang_router.launch_router --pd-disaggregation`
(SGLang "PD Disaggregation" docs); TensorRT-LLM starts context and generation `trtllm-serve`
instances with a `cache_transceiver_config` and joins them with `trtllm-serve disaggregated
-c` over a config listing both (TensorRT-LLM "Disaggregated Serving" docs).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from simulator.sweep.launch_flags import (
    DEFAULT_PORT,
    _join,
    engine_args,
    gpus_per_replica,
    replica_lines,
)

POOLS = ("prefill", "decode")
POOL_PORT = {"vllm": (8100, 8200), "sglang": (30100, 30200), "trtllm": (8100, 8200)}
NIXL_SIDE_CHANNEL_PORT = 5600  # vLLM's default; one per instance on a host
SGLANG_BOOTSTRAP_PORT = 8998  # SGLang's default --disaggregation-bootstrap-port
VLLM_PROXY = "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py"
TRTLLM_DISAGG = "disagg-config.yml"


def front_port(engine: str) -> int:
    """Where clients (and the bench command) send requests: the proxy or router."""
    return DEFAULT_PORT[engine]


def _pools(dep: Mapping[str, Any]) -> list[tuple[str, dict[str, Any], int, int, int]]:
    """(name, pool, replicas, GPUs per replica, first GPU) for prefill then decode."""
    out, first = [], 0
    for name in POOLS:
        pool = dict(dep.get(name) or {})
        replicas, per = int(pool.get("replicas", 1)), gpus_per_replica(pool)
        out.append((name, pool, replicas, per, first))
        first += replicas * per
    return out


def disaggregated_launch(dep: Mapping[str, Any], model_name: str, engine: str) -> list[str]:
    """Shell lines that start both pools and the front end of a disaggregated deployment."""
    pools = _pools(dep)
    kv = dict(dep.get("kv_transfer") or {})
    ratio = "".join(f"{n}{k[0].upper()}" for k, _, n, _, _ in pools)
    total = sum(n * per for _, _, n, per, _ in pools)
    lines = [f"# disaggregated {ratio} on {total} GPU(s): prefill replicas on the first GPUs, "
             "decode replicas after them (GPU numbers run on over nodes: start each line on "
             "the node that holds its GPUs and use that node's host name)"]
    if kv.get("layerwise"):
        lines.append("# kv_transfer.layerwise: no launch flag; the connectors send a request's "
                     "KV as they implement it")
    if kv.get("gb_per_s") is not None or kv.get("latency_s") is not None:
        lines.append("# kv_transfer.gb_per_s / latency_s describe the link; nothing to set")
    urls: dict[str, list[str]] = {name: [] for name in POOLS}
    for (name, pool, n, per, first), base in zip(pools, POOL_PORT[engine], strict=True):
        extra_file = f"extra-llm-api-config-{name}.yml"
        transceiver = ("cache_transceiver_config:", "  backend: UCX")
        args, notes = engine_args(pool, model_name, engine, extra_file, transceiver)
        ports = [base + r for r in range(n)]
        urls[name] = [f"127.0.0.1:{p}" for p in ports]
        env: list[list[str]] = [[] for _ in range(n)]
        if engine == "vllm":
            args += ["--kv-transfer-config",
                     json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"},
                                separators=(",", ":"))]
            offset = 0 if name == "prefill" else pools[0][2]
            env = [[f"VLLM_NIXL_SIDE_CHANNEL_PORT={NIXL_SIDE_CHANNEL_PORT + offset + r}"]
                   for r in range(n)]
        elif engine == "sglang":
            args += ["--disaggregation-mode", name, "--disaggregation-transfer-backend", "nixl"]
        own = (pool.get("hardware") or {}).get("gpu")
        on = f" on its own {own} machines" if own else ""
        lines.append(f"# {name} pool: {n} replica(s) of {per} GPU(s){on}")
        lines.extend(notes)
        for r in range(n):
            one = list(args)
            if engine == "sglang" and name == "prefill":
                one += ["--disaggregation-bootstrap-port", str(SGLANG_BOOTSTRAP_PORT + r)]
            lines.extend(replica_lines(one, 1, per, ports[r], first + r * per, env[r]))
    lines.append("# front end: sends each request's prefill to the prefill pool and its decode "
                 "to the decode pool")
    lines.extend(_front(engine, urls, dep))
    return lines


def _front(engine: str, urls: Mapping[str, list[str]], dep: Mapping[str, Any]) -> list[str]:
    port = str(front_port(engine))
    if engine == "vllm":
        args = ["python", VLLM_PROXY, "--port", port]
        for name, flag in (("prefill", "prefiller"), ("decode", "decoder")):
            hosts = [u.split(":")[0] for u in urls[name]]
            ports = [u.split(":")[1] for u in urls[name]]
            args += [f"--{flag}-hosts", *hosts, f"--{flag}-ports", *ports]
        return ["# vLLM's example proxy (from a vLLM source checkout)", _join(args) + " &"]
    if engine == "sglang":
        args = ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
        for r, u in enumerate(urls["prefill"]):
            args += ["--prefill", f"http://{u}", str(SGLANG_BOOTSTRAP_PORT + r)]
        for u in urls["decode"]:
            args += ["--decode", f"http://{u}"]
        args += ["--host", "0.0.0.0", "--port", port]
        return [_join(args) + " &"]
    cfg = ["hostname: 0.0.0.0", f"port: {port}", "backend: pytorch"]
    for name, key in (("prefill", "context_servers"), ("decode", "generation_servers")):
        cfg += [f"{key}:", f"  num_instances: {len(urls[name])}", "  urls:"]
        cfg += [f'    - "{u}"' for u in urls[name]]
    router = dep.get("router", "round_robin")
    return [f"cat > {TRTLLM_DISAGG} <<'EOF'", *cfg, "EOF",
            f"# the simulated router is {router}; trtllm-serve disaggregated balances by its own",
            _join(["trtllm-serve", "disaggregated", "-c", TRTLLM_DISAGG]) + " &"]
