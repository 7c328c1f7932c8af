"""The calibration overlay (CALIBRATION.yaml): fitted values laid over the shipped engine styles
and GPU profiles, each with its prior, what it was fitted to and how well it did, plus the
parameters the data could not pin down. Read strictly (one line naming file, key, value and
what is valid), written atomically, applied to a plain style or profile mapping."""

from __future__ import annotations

import copy
import os
import tempfile
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, model_validator

from simulator.errors import InputError, format_validation_error, one_line
from simulator.yamlsafe import safe_load_bounded

SCHEMA_VERSION = 1
Name = Annotated[str, Field(min_length=1)]
NonNegative = Annotated[float, Field(ge=0)]
KeyPath = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Kind = Literal["engine_style", "hardware"]
# The names a target kind may name (engine style names, GPU profile names), from the caller.
KnownNames = Callable[[Kind], Collection[str]]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


class FittedFile(_Strict):
    """A measured-run file the fit read: its path, rows used and content hash."""

    path: Name
    rows: Annotated[int, Field(ge=0)]
    sha256: Sha256


class OverlayHeader(_Strict):
    """Who made the overlay, when, and from which files and engine versions."""

    frontier_version: Name
    created: AwareDatetime
    files: Annotated[tuple[FittedFile, ...], Field(min_length=1)]
    engine_versions: dict[Name, Name] = Field(default_factory=dict)


class OverlayTarget(_Strict):
    """The key a value overlays: kind, style or profile name, dotted key path."""

    kind: Kind
    name: Name
    key: KeyPath


class FittedTo(_Strict):
    """The rows one value was fitted on (those its parameter moves): files, count, engines."""

    files: Annotated[tuple[Name, ...], Field(min_length=1)]
    rows: Annotated[int, Field(ge=1)]
    engine_versions: dict[Name, Name] = Field(default_factory=dict)


class Stats(_Strict):
    """Relative errors (prediction / measured - 1); None where no row had a prediction."""

    count: Annotated[int, Field(ge=0)]
    failed: Annotated[int, Field(ge=0)] = 0
    median_abs: NonNegative | None
    p90_abs: NonNegative | None
    median_signed: float | None


class CrossValidated(_Strict):
    """Held-out errors (grouped k-fold) at the priors and after fitting the other folds."""

    folds: Annotated[int, Field(ge=2)]
    before: Stats
    after: Stats


class OverlayValue(_Strict):
    """One fitted value with its prior, standard error, provenance and errors."""

    target: OverlayTarget
    value: NonNegative
    prior: NonNegative
    std_error: NonNegative | None = None
    fitted_to: FittedTo
    residual: NonNegative  # median |log(prediction / measured)| of its rows after the fit
    cross_validated: CrossValidated | None = None


class NotIdentified(_Strict):
    """A declared parameter left at its prior, and why."""

    target: OverlayTarget
    prior: NonNegative
    reason: Name


class GroupErrors(_Strict):
    """Held-out errors of one metric in one group (absent group: every group)."""

    group: tuple[Name, ...] | None = None
    metric: Name
    before: Stats
    after: Stats


class CalibrationOverlay(_Strict):
    """The whole CALIBRATION.yaml."""

    schema_version: Literal[1] = 1
    header: OverlayHeader
    values: tuple[OverlayValue, ...] = ()
    not_identified: tuple[NotIdentified, ...] = ()
    cross_validation: tuple[GroupErrors, ...] = ()

    @model_validator(mode="after")
    def _one_entry_per_target(self) -> CalibrationOverlay:
        seen: set[OverlayTarget] = set()
        targets = [v.target for v in self.values] + [n.target for n in self.not_identified]
        for t in targets:
            if t in seen:
                raise ValueError(f"target {t.kind} {t.name}: {t.key} appears twice")
            seen.add(t)
        return self


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).split("\n", 1)[0]
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}"


def parse_overlay(data: Any, source: str,
                  known_names: KnownNames | None = None) -> CalibrationOverlay:
    """Validate loaded YAML; `known_names` (if given) checks each target's style or GPU name."""
    if not isinstance(data, dict):
        raise InputError(f"{source}: top level must be a mapping with header and values "
                         f"(got {type(data).__name__})")
    try:
        overlay = CalibrationOverlay.model_validate(data)
    except ValidationError as exc:
        raise InputError(one_line(format_validation_error(source, exc))) from None
    if known_names is not None:
        for section in ("values", "not_identified"):
            for i, entry in enumerate(getattr(overlay, section)):
                kind, name = entry.target.kind, entry.target.name
                valid = sorted(known_names(kind))
                if name not in valid:
                    raise InputError(one_line(
                        f"{source}: {section}[{i}].target.name: unknown {kind} {name!r} "
                        f"(valid: {', '.join(valid) or 'none'})"))
    return overlay


def read_overlay(path: str | os.PathLike[str],
                 known_names: KnownNames | None = None) -> CalibrationOverlay:
    """Read CALIBRATION.yaml; any problem is one InputError line naming file and key."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(one_line(f"{source}: cannot read ({exc.strerror or exc})")) from None
    except UnicodeDecodeError:
        raise InputError(f"{source}: not UTF-8 text") from None
    try:
        data = safe_load_bounded(text)
    except (yaml.YAMLError, RecursionError) as exc:
        problem = _yaml_problem(exc) if isinstance(exc, yaml.YAMLError) else "nested too deeply"
        raise InputError(one_line(f"{source}: malformed YAML: {problem}")) from None
    return parse_overlay(data, source, known_names)


def dump_overlay(overlay: CalibrationOverlay) -> str:
    """The overlay as YAML text, keys in schema order."""
    data = overlay.model_dump(mode="json", exclude_none=True)
    return "# frontier calibration overlay: values fitted to measured runs\n" + yaml.safe_dump(
        data, sort_keys=False, default_flow_style=False, allow_unicode=True, width=100)


def write_overlay(path: str | os.PathLike[str], overlay: CalibrationOverlay) -> None:
    """Write atomically: a temporary file in the same folder, synced, then renamed over `path`,
    so a reader sees the old file or the new one and a crash leaves no half-written overlay."""
    target = Path(path)
    text = dump_overlay(overlay)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _set_path(tree: dict[str, Any], key: str, value: float, where: str) -> None:
    """Set the number at dotted `key` inside `tree` (already a private copy)."""
    node: Any = tree
    parts = key.split(".")
    for depth, part in enumerate(parts):
        if not isinstance(node, dict) or part not in node:
            at = ".".join(parts[:depth]) or "(top level)"
            keys = ", ".join(sorted(map(str, node))) if isinstance(node, dict) else "none"
            raise InputError(one_line(f"{where}: key {key!r} does not exist: no {part!r} under "
                                      f"{at} (valid: {keys})"))
        if depth == len(parts) - 1:
            old = node[part]
            if isinstance(old, bool) or not isinstance(old, int | float):
                raise InputError(one_line(f"{where}: key {key!r} holds {type(old).__name__} "
                                          f"{old!r}, not a number to calibrate"))
            node[part] = value
        else:
            node = node[part]


def overlay_values(overlay: CalibrationOverlay, kind: Kind, name: str) -> dict[str, float]:
    """Key path -> fitted value of the overlay's values for one style or profile."""
    return {v.target.key: v.value for v in overlay.values
            if v.target.kind == kind and v.target.name == name}


def set_values(mapping: Mapping[str, Any], values: Mapping[str, float],
               where: str) -> dict[str, Any]:
    """A copy of a plain mapping with each number at its dotted key path replaced; a key path
    that does not exist or holds no number is refused in one line starting with `where`."""
    out = copy.deepcopy(dict(mapping))
    for key, value in values.items():
        _set_path(out, key, value, where)
    return out


def apply_overlay(mapping: Mapping[str, Any], overlay: CalibrationOverlay, kind: Kind,
                  name: str) -> dict[str, Any]:
    """A copy of one style's or profile's plain mapping with the overlay's values for
    (kind, name) set at their key paths; a key path that does not exist is refused."""
    return set_values(mapping, overlay_values(overlay, kind, name),
                      f"calibration overlay: {kind} {name}")
