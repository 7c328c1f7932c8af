"""Money and energy per output token, derived from a point's result and its GPU profile.

    usd_per_million_output_tokens = num_gpus × USD per GPU-hour / 3600 / output tokens/s × 1e6
    energy_j_per_output_token     = board power × num_gpus × busy fraction / output tokens/s

The price comes from `--gpu-price NAME=USD` (CLI), else `FRONTIER_GPU_PRICES`
("h100-sxm=2.5,b200=5"), else the profile's `price.usd_per_gpu_hour`; with none of them the
cost is unknown (an empty column), never guessed. The busy fraction is the share of simulated
time the replicas were running engine steps (`gpu_busy_fraction` of the result); the idle
power of a GPU waiting for work is not counted (a lower bound on energy).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from simulator.errors import InputError
from simulator.hardware.profile import load_hardware

PRICES_ENV = "FRONTIER_GPU_PRICES"


def parse_positive_pairs(items: Sequence[str], where: str, form: str) -> dict[str, float]:
    """['name=2.5', ...] -> {'name': 2.5}: one line naming the option and the expected form
    (`form`, e.g. "GPU=USD_PER_GPU_HOUR ..., e.g. h100-sxm=2.5") for a malformed item."""
    pairs: dict[str, float] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not sep or not name.strip() or not value > 0 or not math.isfinite(value):
            raise InputError(f"{where} {item!r}: expected {form}")
        pairs[name.strip()] = value
    return pairs


def parse_prices(items: Sequence[str], where: str = "--gpu-price") -> dict[str, float]:
    """['h100-sxm=2.5', ...] -> {'h100-sxm': 2.5}; InputError on a malformed item."""
    form = "GPU=USD_PER_GPU_HOUR with a positive price, e.g. h100-sxm=2.5"
    return parse_positive_pairs(items, where, form)


def gpu_prices(cli_items: Sequence[str] = ()) -> dict[str, float]:
    """Prices from FRONTIER_GPU_PRICES, overridden by the CLI's --gpu-price items; a GPU that
    is no hardware profile is refused (a misspelt name would silently price nothing)."""
    from simulator.hardware.profile import profile_paths

    env = os.environ.get(PRICES_ENV, "")
    items = [p.strip() for p in env.replace(";", ",").split(",") if p.strip()]
    known = profile_paths()
    prices: dict[str, float] = {}
    for where, group in ((PRICES_ENV, items), ("--gpu-price", list(cli_items))):
        parsed = parse_prices(group, where)
        for name in parsed:
            if name not in known:
                raise InputError(f"{where} {name}={parsed[name]:g}: unknown GPU {name!r}; "
                                 f"known: {', '.join(sorted(known))}")
        prices.update(parsed)
    return prices


def price_per_gpu_hour(gpu: str, prices: Mapping[str, float]) -> float | None:
    """USD per GPU-hour of a profile, or None when nobody published or gave one."""
    if gpu in prices:
        return prices[gpu]
    try:
        return load_hardware(gpu).usd_per_gpu_hour
    except InputError:
        return None


def board_power_w(gpu: str) -> float | None:
    try:
        return load_hardware(gpu).board_power_w
    except InputError:
        return None


def gpu_mix(scenario: Mapping[str, Any]) -> dict[str, int]:
    """GPUs per hardware profile of a scenario dict: a disaggregated pool with its own
    `hardware` counts on that GPU (Splitwise-style mixed pools), everything else on the
    scenario's `hardware.gpu`."""
    top = str((scenario.get("hardware") or {}).get("gpu", ""))
    dep = scenario.get("deployment") or {}
    if dep.get("kind", "aggregated") == "aggregated":
        return {top: 1}
    mix: dict[str, int] = {}
    for name in ("prefill", "decode"):
        pool = dep.get(name) or {}
        gpu = str((pool.get("hardware") or {}).get("gpu", top))
        n = int(pool.get("replicas", 1)) * int(pool.get("tensor_parallel", 1))
        n *= int(pool.get("pipeline_parallel", 1)) * int(pool.get("attention_data_parallel", 1))
        mix[gpu] = mix.get(gpu, 0) + n
    return mix


def gpu_label(scenario: Mapping[str, Any]) -> str:
    """'h100-sxm', or 'h100-sxm+a100-sxm' for pools on two GPU types."""
    return "+".join(gpu_mix(scenario))


def _mean_by_gpu(
    scenario: Mapping[str, Any], value: Callable[[str], float | None]
) -> float | None:
    mix = gpu_mix(scenario)
    values = {gpu: value(gpu) for gpu in mix}
    if any(v is None for v in values.values()) or not sum(mix.values()):
        return None
    return sum(float(values[g] or 0.0) * n for g, n in mix.items()) / sum(mix.values())


def mean_price_per_gpu_hour(
    scenario: Mapping[str, Any], prices: Mapping[str, float]
) -> float | None:
    """USD per GPU-hour averaged over the scenario's GPUs (per profile when pools differ)."""
    return _mean_by_gpu(scenario, lambda gpu: price_per_gpu_hour(gpu, prices))


def mean_board_power_w(scenario: Mapping[str, Any]) -> float | None:
    return _mean_by_gpu(scenario, board_power_w)


def usd_per_million_output_tokens(
    num_gpus: float, usd_per_gpu_hour: float | None, output_tokens_per_s: float
) -> float | None:
    if usd_per_gpu_hour is None or not output_tokens_per_s > 0:
        return None
    return num_gpus * usd_per_gpu_hour / 3600.0 / output_tokens_per_s * 1e6


def serving_costs(usd_per_hour: float, requests_per_s: float, input_tokens: float,
                  output_tokens: float) -> dict[str, float]:
    """What people compare, for a deployment costing `usd_per_hour` while it serves
    `requests_per_s` of `input_tokens` in and `output_tokens` out (means per request): per
    hour, per request, and per million tokens charged all to output, all to input, or blended
    over both at the workload's ratio."""
    per_s = usd_per_hour / 3600.0
    out: dict[str, float] = {"usd_per_hour": usd_per_hour}
    if requests_per_s > 0:
        out["usd_per_request"] = per_s / requests_per_s
        for key, tokens in (("usd_per_million_input_tokens", input_tokens),
                            ("usd_per_million_output_tokens", output_tokens),
                            ("usd_per_million_tokens_blended", input_tokens + output_tokens)):
            if tokens > 0:
                out[key] = per_s / (requests_per_s * tokens) * 1e6
    return out


def energy_j_per_output_token(
    power_w: float | None, num_gpus: float, busy_fraction: float | None, output_tokens_per_s: float
) -> float | None:
    if power_w is None or busy_fraction is None or not output_tokens_per_s > 0:
        return None
    return power_w * num_gpus * busy_fraction / output_tokens_per_s
