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
from collections.abc import Mapping, Sequence

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
    """Prices from FRONTIER_GPU_PRICES, overridden by the CLI's --gpu-price items."""
    env = os.environ.get(PRICES_ENV, "")
    items = [p.strip() for p in env.replace(";", ",").split(",") if p.strip()]
    prices = parse_prices(items, PRICES_ENV)
    prices.update(parse_prices(cli_items))
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


def usd_per_million_output_tokens(
    num_gpus: float, usd_per_gpu_hour: float | None, output_tokens_per_s: float
) -> float | None:
    if usd_per_gpu_hour is None or not output_tokens_per_s > 0:
        return None
    return num_gpus * usd_per_gpu_hour / 3600.0 / output_tokens_per_s * 1e6


def energy_j_per_output_token(
    power_w: float | None, num_gpus: float, busy_fraction: float | None, output_tokens_per_s: float
) -> float | None:
    if power_w is None or busy_fraction is None or not output_tokens_per_s > 0:
        return None
    return power_w * num_gpus * busy_fraction / output_tokens_per_s
