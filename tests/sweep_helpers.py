"""Small sweep files shared by the sweep, report and Ray tests (fast points: tiny workloads)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]

SMALL_SWEEP: dict[str, Any] = {
    "name": "small",
    "model": "llama-3.1-8b",
    "hardware": {"gpu": "h100-sxm", "gpus_per_node": 8},
    "deployment": {"tensor_parallel": 1},
    "workload": {
        "arrival": {"kind": "closed_loop", "concurrency": 4},
        "input_tokens": {"kind": "fixed", "value": 200},
        "output_tokens": {"kind": "fixed", "value": 16},
        "num_requests": 24,
        "seed": 0,
    },
    "slo": {"ttft_p99_s": 2.0},
    "sweep": {
        "deployment.tensor_parallel": [1, 2],
        "workload.arrival.concurrency": [1, 8],
        "zip": [{"deployment.precision.weights": ["bf16", "fp8"],
                 "deployment.precision.kv_cache": ["bf16", "fp8"]}],
    },
}


def small_sweep(**workload: Any) -> dict[str, Any]:
    data = copy.deepcopy(SMALL_SWEEP)
    data["workload"].update(workload)
    return data


def write_sweep(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
