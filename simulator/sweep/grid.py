"""Sweep files: a scenario plus `sweep:` axes, `zip:` groups and `constraints:`, expanded into
the grid of points to simulate (the sweep file format of README.md).

Every dotted key path under `sweep:` is a grid axis (all combinations, in file order); each
`zip:` group is one axis whose paths move together. Points that a constraint drops, or that the
scenario schema refuses, are counted by reason and never run. Each remaining point carries its
full scenario dict (defaults included) and a key: a hash of that dict, which names the point in
the store and in `points/<key>.yaml`.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import json
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.errors import InputError
from simulator.inputs.scenario import apply_overrides, load_scenario_file, scenario_to_dict
from simulator.inputs.shipped import resolve_scenario
from simulator.inputs.yamlfile import load_yaml_mapping
from simulator.sweep import quality_gate
from simulator.sweep.expr import Constraint, parse_constraint

SWEEP_KEYS = ("sweep", "constraints", quality_gate.KEY)
# Points a grid may hold before constraints: each point is a full scenario dict in memory and a
# file in points/; a larger grid is refused before any point is built (split it, or use zip).
MAX_GRID_POINTS = 100_000


@dataclass(frozen=True)
class Dimension:
    """One grid axis: a single path, or a zip group of paths whose values move together."""

    paths: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]  # one tuple of values (one per path) per step


@dataclass(frozen=True)
class SweepSpec:
    base: dict[str, Any]  # the scenario keys of the file
    dimensions: tuple[Dimension, ...]
    constraints: tuple[Constraint, ...]
    base_dir: Path | None  # where relative paths in the file resolve
    source: str = "sweep"
    max_quality_drop_pct: float | None = None  # None: no quality constraint

    @property
    def axes(self) -> list[str]:
        """Swept key paths in file order (zip group members included)."""
        return [p for d in self.dimensions for p in d.paths]

    @property
    def grid_size(self) -> int:
        n = 1
        for d in self.dimensions:
            n *= len(d.rows)
        return n


@dataclass(frozen=True)
class Point:
    key: str
    values: dict[str, Any]  # swept path -> value at this point
    scenario: dict[str, Any]  # the full validated scenario (defaults included)


@dataclass
class Expansion:
    points: list[Point]
    total: int  # grid size before any drop
    dropped: Counter[str] = field(default_factory=Counter)  # reason -> count
    examples: dict[str, str] = field(default_factory=dict)  # reason -> one full message


def point_key(scenario: Mapping[str, Any]) -> str:
    """Stable 16-hex-digit hash of a full scenario dict and of the content of every file it
    names (a model config.json, a trace, a length file): a file edited between a sweep and its
    `--resume` gives its points new keys, so they run again instead of reusing stale results."""
    text = json.dumps(scenario, sort_keys=True, separators=(",", ":"), allow_nan=False)
    files = {p: file_digest(p) for p in referenced_files(scenario)}
    if files:  # a scenario naming no file keeps the key it always had
        text += json.dumps(files, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def referenced_files(scenario: Mapping[str, Any]) -> list[str]:
    """The paths of the files a scenario reads besides itself (absolute in a sweep's points)."""
    found = []
    model = scenario.get("model")
    if isinstance(model, str) and (model.endswith(".json") or os.sep in model):
        found.append(model)
    workload = scenario.get("workload")
    if isinstance(workload, Mapping):
        for name in ("arrival", "input_tokens", "output_tokens"):
            part = workload.get(name)
            if isinstance(part, Mapping) and isinstance(part.get("path"), str):
                found.append(part["path"])
    deployment = scenario.get("deployment")
    pools: list[Any] = []
    if isinstance(deployment, Mapping):
        pools = [deployment, deployment.get("prefill"), deployment.get("decode")]
    gpus = [(scenario.get("hardware") or {}).get("gpu")]
    for pool in pools:
        if isinstance(pool, Mapping):
            routing = pool.get("moe_routing")
            if isinstance(routing, Mapping) and isinstance(routing.get("profile"), str):
                found.append(routing["profile"])  # a measured per-expert load file
            gpus.append((pool.get("hardware") or {}).get("gpu"))
    found += _user_profiles([g for g in gpus if isinstance(g, str)])
    return found


def _user_profiles(names: list[str]) -> list[str]:
    """The YAML files of the named GPU profiles that the user supplied (FRONTIER_HARDWARE_PATH):
    a user may edit those between a sweep and its resume; shipped ones change only with the
    package (their edits are the project's, and keep point keys stable)."""
    from simulator.hardware.profile import profile_dirs, profile_paths

    shipped = profile_dirs()[0].resolve()
    paths = profile_paths()
    return [str(paths[n]) for n in sorted(set(names))
            if n in paths and paths[n].resolve().parent != shipped]


def file_digest(path: str) -> str:
    """sha256 of a file's content ("missing" when it cannot be read), hashed once per version
    of the file (its size, inode and modification time), however many points name it."""
    try:
        st = os.stat(path)
    except OSError:
        return "missing"
    return _digest(path, st.st_size, st.st_ino, st.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _digest(path: str, size: int, inode: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    except OSError:
        return "missing"
    return h.hexdigest()


def _values_list(where: str, raw: Any) -> list[Any]:
    if not isinstance(raw, list):
        raise InputError(f"{where}: must be a list of values (got {raw!r})")
    if not raw:
        raise InputError(f"{where}: the list of values is empty")
    return raw


def _check_path(where: str, path: Any) -> str:
    if not isinstance(path, str) or not path or any(not p for p in path.split(".")):
        raise InputError(
            f"{where}: {path!r} is not a dotted key path like deployment.tensor_parallel"
        )
    if path.split(".")[0] in SWEEP_KEYS:
        raise InputError(f"{where}: {path!r} cannot be swept")
    return path


def parse_sweep(data: Mapping[str, Any], base_dir: Path | None, source: str = "sweep") -> SweepSpec:
    """Check the `sweep:` and `constraints:` keys of a sweep file's mapping."""
    raw = data.get("sweep")
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise InputError(f"{source}: sweep: must be a mapping of key paths to lists of values")
    dims: list[Dimension] = []
    seen: set[str] = set()

    def claim(where: str, path: str) -> None:
        if path in seen:
            raise InputError(f"{source}: {where}: {path!r} is swept twice")
        seen.add(path)

    for name, body in raw.items():
        if name == "zip":
            groups = body if isinstance(body, list) else [body]
            for i, group in enumerate(groups):
                where = f"sweep.zip[{i}]"
                if not isinstance(group, Mapping) or not group:
                    raise InputError(
                        f"{source}: {where}: must be a mapping of key paths to lists of equal "
                        f"length (got {group!r})"
                    )
                paths = tuple(_check_path(f"{source}: {where}", p) for p in group)
                lists = [_values_list(f"{source}: {where}.{p}", group[p]) for p in paths]
                lengths = {p: len(v) for p, v in zip(paths, lists, strict=True)}
                if len(set(lengths.values())) > 1:
                    shown = ", ".join(f"{p} has {n}" for p, n in lengths.items())
                    raise InputError(
                        f"{source}: {where} {{{', '.join(paths)}}}: lists must have equal "
                        f"length to move together ({shown})"
                    )
                for p in paths:
                    claim(where, p)
                dims.append(Dimension(paths, tuple(zip(*lists, strict=True))))
            continue
        path = _check_path(f"{source}: sweep", name)
        claim("sweep", path)
        values = _values_list(f"{source}: sweep.{path}", body)
        dims.append(Dimension((path,), tuple((v,) for v in values)))

    raw_c = data.get("constraints")
    if raw_c is None:
        raw_c = []
    if isinstance(raw_c, str):
        raw_c = [raw_c]
    if not isinstance(raw_c, list):
        raise InputError(f"{source}: constraints: must be a list of expressions (got {raw_c!r})")
    constraints = tuple(parse_constraint(c) for c in raw_c)
    base = {k: v for k, v in data.items() if k not in SWEEP_KEYS}
    limit = quality_gate.parse_limit(data.get(quality_gate.KEY), source)
    spec = SweepSpec(base, tuple(dims), constraints, base_dir, source, limit)
    if spec.grid_size > MAX_GRID_POINTS:
        sizes = " × ".join(f"{len(d.rows)} ({'+'.join(d.paths)})" for d in dims)
        raise InputError(
            f"{source}: sweep: the grid has {spec.grid_size:,} points ({sizes}), above the limit "
            f"of {MAX_GRID_POINTS:,}; split it into several sweeps or move axes together with zip"
        )
    return spec


def load_sweep(path_or_dict: str | Path | Mapping[str, Any]) -> SweepSpec:
    """Read a sweep file (or a dict of the same shape)."""
    if isinstance(path_or_dict, Mapping):
        return parse_sweep(path_or_dict, None)
    path = resolve_scenario(path_or_dict)
    data = load_yaml_mapping(path, "sweep", "scenario keys plus sweep:")
    return parse_sweep(data, path.resolve().parent, str(path))


def _absolute_paths(data: dict[str, Any], base_dir: Path | None) -> None:
    """Make file paths of the scenario absolute, so each point file runs from anywhere."""
    if base_dir is None:
        return

    def fix(node: Any, key: str) -> None:
        if isinstance(node, dict) and isinstance(node.get(key), str):
            p = Path(node[key])
            if not p.is_absolute():
                node[key] = str((base_dir / p).resolve())

    model = data.get("model")
    if isinstance(model, str) and model.endswith(".json"):
        fix(data, "model")
    workload = data.get("workload")
    if isinstance(workload, dict):
        for name in ("arrival", "input_tokens", "output_tokens"):
            fix(workload.get(name), "path")


def _lookup(raw: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    node: Any = raw
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _reason_of_schema_error(message: str) -> str:
    """'scenario: deployment: deployment uses 16 GPUs ...' -> 'invalid deployment'."""
    parts = message.split(": ")
    loc = parts[1] if len(parts) > 2 else "scenario"
    return f"invalid {loc}"


def describe_values(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{p}={json.dumps(v) if not isinstance(v, str) else v}"
                     for p, v in values.items())


def expand(spec: SweepSpec) -> Expansion:
    """Every grid point that passes the constraints and the scenario schema."""
    out = Expansion([], spec.grid_size)
    seen: set[str] = set()
    base_name = str(spec.base.get("name") or "")
    for combo in itertools.product(*(d.rows for d in spec.dimensions)):
        values: dict[str, Any] = {}
        for dim, row in zip(spec.dimensions, combo, strict=True):
            values.update(zip(dim.paths, row, strict=True))
        try:
            raw = apply_overrides(spec.base, [(tuple(p.split(".")), v) for p, v in values.items()])
        except InputError as exc:
            raise InputError(f"{spec.source}: {exc}") from None
        _absolute_paths(raw, spec.base_dir)
        if values:
            raw["name"] = f"{base_name} | {describe_values(values)}" if base_name else (
                describe_values(values))
        cand = _Candidate(raw)
        failed: Constraint | None = None
        try:
            for c in spec.constraints:
                try:
                    ok = c.holds(cand.lookup)
                except _MissingKey as exc:
                    raise InputError(
                        f"{spec.source}: constraint {c.text!r}: no key {exc.args[0]!r} in the "
                        "scenario"
                    ) from None
                except InputError as exc:  # e.g. arithmetic on a value that is no number
                    if cand.full() is None:
                        raise _SchemaRefused from None  # the schema refuses the point anyway
                    raise InputError(
                        f"{spec.source}: {exc} at the point {describe_values(values)}"
                    ) from None
                if not ok:
                    failed = c
                    break
        except _SchemaRefused:
            pass
        if failed is not None:
            reason = f"constraint {failed.text!r}"
            out.dropped[reason] += 1
            out.examples.setdefault(reason, describe_values(values))
            continue
        full_dict = cand.full()
        if full_dict is None:
            assert cand.error is not None
            reason = _reason_of_schema_error(cand.error)
            out.dropped[reason] += 1
            out.examples.setdefault(reason, cand.error)
            continue
        refused = quality_gate.point_failure(full_dict, spec.max_quality_drop_pct)
        if refused is not None:
            reason = refused if refused == quality_gate.UNKNOWN_REASON else (
                f"quality drop above {quality_gate.KEY} {spec.max_quality_drop_pct:g} %")
            out.dropped[reason] += 1
            out.examples.setdefault(reason, f"{describe_values(values)}: {refused}")
            continue
        key = point_key(full_dict)
        if key in seen:
            out.dropped["duplicate of another point"] += 1
            continue
        seen.add(key)
        out.points.append(Point(key, values, full_dict))
    return out


class _Candidate:
    """A grid point's raw scenario, validated lazily (constraints may need its defaults)."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self._full: dict[str, Any] | None = None
        self.error: str | None = None
        self._checked = False

    def full(self) -> dict[str, Any] | None:
        if not self._checked:
            self._checked = True
            try:
                scenario, _ = load_scenario_file(copy.deepcopy(self.raw))
                self._full = scenario_to_dict(scenario)
            except InputError as exc:
                self.error = str(exc)
        return self._full

    def lookup(self, path: str) -> Any:
        found, value = _lookup(self.raw, path)
        if found:
            return value
        full = self.full()
        if full is None:
            raise _SchemaRefused()
        found, value = _lookup(full, path)
        if not found:
            raise _MissingKey(path)
        return value


class _SchemaRefused(Exception):
    """A constraint needed a default of a scenario that the schema refuses."""


class _MissingKey(Exception):
    """A constraint names a key path that the scenario does not have."""
