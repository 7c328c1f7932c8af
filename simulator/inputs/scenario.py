"""Scenario files: one deployment under one workload, as a strict, versioned pydantic schema.

Every key here is public (docs/architecture.md, public names). Tagged unions (`deployment`,
`workload.arrival`, `workload.input_tokens`, `workload.output_tokens`) choose their variant by
`kind`. Their pydantic tags end in `-tag` so that `format_validation_error` can drop them from
error locations: a user reads `workload.arrival.rate_per_s`, not `workload.arrival.poisson...`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from simulator.errors import InputError, format_validation_error

# Re-exported: the workload models are part of the scenario schema's public names.
from simulator.inputs.common import MAX_TOKENS as MAX_TOKENS
from simulator.inputs.common import HardwareConfig as HardwareConfig
from simulator.inputs.common import (
    PosFloat,
    PosInt,
    _invalid,
    _Strict,
)
from simulator.inputs.deployment import (
    DEPLOYMENT_KINDS,
    AggregatedDeployment,
    DeploymentSpec,
    _Worker,
)
from simulator.inputs.workload import (
    ARRIVAL_KINDS,
    LENGTH_KINDS,
    Workload,
)
from simulator.inputs.workload import ArrivalSpec as ArrivalSpec
from simulator.inputs.workload import ClosedLoopArrival as ClosedLoopArrival
from simulator.inputs.workload import ConstantArrival as ConstantArrival
from simulator.inputs.workload import DurationSpec as DurationSpec
from simulator.inputs.workload import EmpiricalLengths as EmpiricalLengths
from simulator.inputs.workload import FixedLengths as FixedLengths
from simulator.inputs.workload import GammaArrival as GammaArrival
from simulator.inputs.workload import LengthSpec as LengthSpec
from simulator.inputs.workload import LognormalLengths as LognormalLengths
from simulator.inputs.workload import NormalLengths as NormalLengths
from simulator.inputs.workload import OfflineArrival as OfflineArrival
from simulator.inputs.workload import PoissonArrival as PoissonArrival
from simulator.inputs.workload import Priorities as Priorities
from simulator.inputs.workload import Sessions as Sessions
from simulator.inputs.workload import SharedPrefix as SharedPrefix
from simulator.inputs.workload import TraceArrival as TraceArrival
from simulator.inputs.workload import UniformLengths as UniformLengths
from simulator.inputs.yamlfile import load_yaml_mapping
from simulator.yamlsafe import safe_load_bounded


class SLO(_Strict):
    # Target for the 99th percentile of time to first token, seconds.
    ttft_p99_s: PosFloat | None = None
    # Target for the 99th percentile of time per output token after the first, seconds.
    tpot_p99_s: PosFloat | None = None
    # Target for the 99th percentile of end-to-end request latency, seconds.
    e2e_p99_s: PosFloat | None = None

    @model_validator(mode="after")
    def _at_least_one(self) -> SLO:
        if self.ttft_p99_s is None and self.tpot_p99_s is None and self.e2e_p99_s is None:
            raise _invalid("slo needs at least one of ttft_p99_s, tpot_p99_s, e2e_p99_s")
        return self


class Limits(_Strict):
    """Caps that end unstable runs (a queue that grows without bound) early."""

    # End the run at this simulated time (status time_limit); None: run every request.
    max_simulated_time_s: PosFloat | None = None
    # End the run when this many requests wait (status queue_limit); None: no cap.
    max_waiting_requests: PosInt | None = None


# --------------------------------------------------------------------------------- scenario


class Scenario(_Strict):
    # Version of this file format (1).
    schema_version: Literal[1] = 1
    # Free text shown in results and reports.
    name: str = ""
    model: Annotated[str, Field(min_length=1)]  # catalog name or path to an HF config.json
    # The GPU profile and machine shape.
    hardware: HardwareConfig
    # How the model is served: aggregated (one engine type) or disaggregated (prefill and decode
    # pools).
    deployment: DeploymentSpec = AggregatedDeployment()
    # The traffic: arrivals, lengths, how many requests.
    workload: Workload
    # Latency targets: goodput and SLO attainment are judged against them; sweeps and recommend use
    # them.
    slo: SLO | None = None
    # Caps that end an unstable run early.
    limits: Limits = Limits()

    @field_validator("deployment")
    @classmethod
    def _gpus_exist(cls, v: Any, info: ValidationInfo) -> Any:
        hw = info.data.get("hardware")
        if not isinstance(hw, HardwareConfig):
            return v
        workers: list[tuple[str, _Worker]]
        if isinstance(v, AggregatedDeployment):
            workers = [("", v)]
        else:
            workers = [("prefill ", v.prefill), ("decode ", v.decode)]
        # A pool with its own `hardware` runs on its own machines; the rest share `hardware`.
        shared: list[tuple[str, _Worker]] = []
        for label, w in workers:
            machines = getattr(w, "hardware", None)
            if isinstance(machines, HardwareConfig):
                _check_gpus([(label, w)], machines, f"deployment.{label.strip()}.hardware")
            else:
                shared.append((label, w))
        if shared:
            _check_gpus(shared, hw, "hardware")
        return v

    @property
    def gpus_by_profile(self) -> dict[str, int]:
        """GPUs used per hardware profile (pools with their own `hardware` on theirs)."""
        dep = self.deployment
        pools = [dep] if isinstance(dep, AggregatedDeployment) else [dep.prefill, dep.decode]
        out: dict[str, int] = {}
        for w in pools:
            machines = getattr(w, "hardware", None) or self.hardware
            out[machines.gpu] = out.get(machines.gpu, 0) + w.num_gpus
        return out

    @property
    def gpus_per_replica(self) -> int:
        """GPUs of one engine copy (disaggregated: one prefill plus one decode replica)."""
        return self.deployment.gpus_per_replica

    @property
    def num_gpus(self) -> int:
        """All GPUs the deployment uses: replicas × per replica, summed over pools."""
        return self.deployment.num_gpus


def _check_gpus(workers: list[tuple[str, _Worker]], hw: HardwareConfig, where: str) -> None:
    """The workers' replicas fit the machines `where` describes, one by one and together."""
    have = hw.gpus_per_node * hw.nodes
    have_text = f"{have} (gpus_per_node {hw.gpus_per_node} × nodes {hw.nodes})"
    for label, w in workers:
        one = w.gpus_per_replica
        if one > have:
            nodes_needed = -(-one // hw.gpus_per_node)
            raise _invalid(
                f"one {label}replica needs {one} GPUs ({w.describe_replica()})"
                f" but {where} has {have_text}; a replica may span nodes, so it needs "
                f"nodes >= {nodes_needed} at gpus_per_node {hw.gpus_per_node}"
            )
    total = sum(w.num_gpus for _, w in workers)
    if total > have:
        used = " + ".join(
            f"{label}replicas {w.replicas} × {w.describe_replica()}" for label, w in workers
        )
        what = "deployment" if where == "hardware" else where.rsplit(".", 1)[0]
        raise _invalid(f"{what} uses {total} GPUs ({used}) but {where} has {have_text}")


# ------------------------------------------------------------------------ loading and --set

# Where tagged unions live, with the kind a missing `kind` means (for override handling).
_UNIONS: dict[tuple[str, ...], tuple[Mapping[str, type[BaseModel]], str | None]] = {
    ("deployment",): (DEPLOYMENT_KINDS, "aggregated"),
    ("workload", "arrival"): (ARRIVAL_KINDS, None),
    ("workload", "input_tokens"): (LENGTH_KINDS, None),
    ("workload", "output_tokens"): (LENGTH_KINDS, None),
}


def _parse_override(item: str) -> tuple[tuple[str, ...], Any]:
    path, sep, raw = item.partition("=")
    parts = tuple(p.strip() for p in path.split("."))
    if not sep or not path.strip() or any(not p for p in parts):
        raise InputError(
            f"--set {item!r}: expected key.path=value, e.g. deployment.tensor_parallel=4"
        )
    try:
        value = safe_load_bounded(raw)
    except yaml.YAMLError as exc:
        raise InputError(
            f"--set {item!r}: value is not valid YAML ({str(exc).splitlines()[0]})"
        ) from None
    return parts, value


Override = str | tuple[tuple[str, ...], Any]  # `key.path=value`, or (path parts, typed value)


def apply_overrides(data: Mapping[str, Any], overrides: Sequence[Override]) -> dict[str, Any]:
    """A copy of `data` with each `key.path=value` override applied, in order (an override
    may also come typed, as (path parts, value): a sweep's grid values need no YAML round trip).

    Values are parsed as YAML (`4`, `0.5`, `true`, `fp8`, `[1, 2]`, `{kind: poisson, ...}`);
    typing is left to the schema. Missing or null intermediate mappings are created.

    Changing a tagged union's `kind` (e.g. `workload.arrival.kind=closed_loop`) drops the keys
    of the old variant that the new variant does not define, so `rate_per_s` from the file does
    not make `closed_loop` fail; keys set by an override are never dropped, so a wrong one is
    still reported.
    """
    root: dict[str, Any] = copy.deepcopy(dict(data))
    explicit: list[tuple[str, ...]] = []
    kind_changed: set[tuple[str, ...]] = set()
    for entry in overrides:
        if isinstance(entry, str):
            item = entry
            parts, value = _parse_override(entry)
        else:
            parts, value = entry[0], copy.deepcopy(entry[1])
            item = f"{'.'.join(parts)}={json.dumps(value)}"
        node = root
        for i, key in enumerate(parts[:-1]):
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            elif not isinstance(child, dict):
                where = ".".join(parts[: i + 1])
                raise InputError(
                    f"--set {item!r}: {where} is {child!r}, not a mapping, so it has no "
                    f"key {parts[i + 1]!r}"
                )
            node = child
        last = parts[-1]
        if last == "kind" and parts[:-1] in _UNIONS:
            default = _UNIONS[parts[:-1]][1]
            if node.get("kind", default) != value:
                kind_changed.add(parts[:-1])
        node[last] = value
        explicit.append(parts)

    for loc in kind_changed:
        node = _get(root, loc)
        if not isinstance(node, dict):
            continue
        kind = node.get("kind")
        variant = _UNIONS[loc][0].get(kind) if isinstance(kind, str) else None
        if variant is None:  # unknown kind: the schema reports it
            continue
        for key in list(node):
            path = (*loc, key)
            set_here = any(path[: len(p)] == p for p in explicit)
            if key not in variant.model_fields and not set_here:
                del node[key]
    return root


def _get(root: Mapping[str, Any], loc: tuple[str, ...]) -> Any:
    node: Any = root
    for key in loc:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def load_scenario_file(
    path_or_dict: str | Path | Mapping[str, Any], overrides: Sequence[str] = ()
) -> tuple[Scenario, Path | None]:
    """Read, override and validate a scenario; return it with its folder (None for a dict).

    The folder is where relative trace and CSV paths are resolved. Every problem becomes an
    `InputError` with one line: `FILE: key.path: problem (got value)`.
    """
    if isinstance(path_or_dict, Mapping):
        source, base_dir, data = "scenario", None, dict(path_or_dict)
    else:
        path = Path(path_or_dict)
        source, base_dir = str(path), path.resolve().parent
        data = load_yaml_mapping(path, "scenario", "keys (model, hardware, workload, ...)")
    data = apply_overrides(data, overrides)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise InputError(format_validation_error(source, exc, Scenario)) from None
    return scenario, base_dir


def scenario_to_dict(scenario: Scenario) -> dict[str, Any]:
    """Plain JSON-able dict of every key, defaults included (feeds it back in unchanged)."""
    return scenario.model_dump(mode="json")
