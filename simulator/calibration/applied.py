"""What a calibration overlay changes in a run, by one rule for `simulate`, `estimate`, the
calibration fit's own predictor, `sweep` and `lesson`: the engine styles' host costs
(host_costs.py, applied as scenario overrides) and the GPU profiles whose efficiency values it
sets (a profile's plain mapping with the values set, validated by the profile schema, passed
to the engine build as a stand-in for the shipped profile of that name).

Only the calibration blocks of a profile (efficiency, kernels, gemm_classes,
attention_classes) take overlay values: datasheet figures (peaks, memory, links) are published
facts, not free parameters."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from simulator.calibration.host_costs import host_costs
from simulator.calibration.overlay import CalibrationOverlay, overlay_values, set_values
from simulator.errors import InputError, one_line
from simulator.hardware.gemm_classes import KERNEL_MODEL_ENV
from simulator.hardware.profile import (
    CALIBRATION_BLOCKS,
    Hardware,
    hardware_from_mapping,
    profile_path,
    read_profile_mapping,
)

_PROFILES: dict[tuple[str, tuple[tuple[str, float], ...], str], Hardware] = {}
# Calibrated profiles kept per process: a fit builds one per GPU and parameter values it
# tries (a few hundred); beyond this the cache starts over.
MAX_CACHED_PROFILES = 4096


def calibrated_profile(name: str, values: Mapping[str, float]) -> Hardware:
    """The shipped profile `name` with each key path of `values` set to its number, checked
    by the profile schema (a fraction above its limit, a key that does not exist or lies
    outside the calibration blocks is one InputError line)."""
    where = f"calibration overlay: hardware {name}"
    for path_key in values:
        if path_key.split(".", 1)[0] not in CALIBRATION_BLOCKS:
            raise InputError(one_line(
                f"{where}: key {path_key!r} is not a calibration value (valid: keys under "
                f"{', '.join(CALIBRATION_BLOCKS)}; datasheet figures are not fitted)"))
    cache_key = (name, tuple(sorted(values.items())), os.environ.get(KERNEL_MODEL_ENV, ""))
    hw = _PROFILES.get(cache_key)
    if hw is None:
        path = profile_path(name)
        mapping = set_values(read_profile_mapping(path), values, where)
        try:
            hw = hardware_from_mapping(mapping, where, path.stem)
        except InputError as exc:
            raise InputError(one_line(str(exc))) from None
        if len(_PROFILES) >= MAX_CACHED_PROFILES:
            _PROFILES.clear()
        _PROFILES[cache_key] = hw
    return hw


def shipped_value(name: str, key: str) -> float:
    """The number at dotted `key` in the shipped profile `name` (the prior of a fit)."""
    node: object = read_profile_mapping(profile_path(name))
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise InputError(f"hardware {name}: no key {key!r} in its profile")
        node = node[part]
    if isinstance(node, bool) or not isinstance(node, int | float):
        raise InputError(f"hardware {name}: key {key!r} holds no number")
    return float(node)


# One GPU value an overlay sets: (GPU, key path, value, shipped value).
GpuValue = tuple[str, str, float, float]


@dataclass(frozen=True)
class Applied:
    """What a run uses from an overlay: host costs by engine style (microseconds), calibrated
    profiles by GPU name, and the GPU values set, as (GPU, key path, value, shipped value)."""

    host_costs: dict[str, dict[str, float]] = field(default_factory=dict)
    profiles: dict[str, Hardware] = field(default_factory=dict)
    gpu_values: tuple[GpuValue, ...] = ()

    def describe(self) -> str:
        """What the overlay sets, for the first line of a calibrated result."""
        parts = []
        if self.host_costs:
            parts.append("engine host costs of " + ", ".join(sorted(self.host_costs)))
        if self.gpu_values:
            parts.append("GPU factors " + "; ".join(
                f"{gpu} {key} {shipped:.4g} -> {value:.4g}"
                for gpu, key, value, shipped in self.gpu_values))
        return ", ".join(parts) or "nothing to apply"


def profiles_of(gpu_values: Sequence[GpuValue]) -> dict[str, Hardware]:
    """The calibrated profiles, by GPU name, that recorded GPU values describe (a sweep's
    sweep.json, a worker's job): plain data in, so each process rebuilds them itself."""
    by_gpu: dict[str, dict[str, float]] = {}
    for gpu, key, value, _ in gpu_values:
        by_gpu.setdefault(gpu, {})[key] = value
    return {gpu: calibrated_profile(gpu, values) for gpu, values in by_gpu.items()}


def applied(overlay: CalibrationOverlay) -> Applied:
    """The host costs and calibrated GPU profiles an overlay gives a run."""
    names = sorted({v.target.name for v in overlay.values if v.target.kind == "hardware"})
    profiles: dict[str, Hardware] = {}
    changed: list[tuple[str, str, float, float]] = []
    for name in names:
        values = overlay_values(overlay, "hardware", name)
        profiles[name] = calibrated_profile(name, values)
        changed += [(name, k, v, shipped_value(name, k)) for k, v in sorted(values.items())]
    return Applied(host_costs(overlay), profiles, tuple(changed))
