"""`--calibration FILE` (or FRONTIER_CALIBRATION) of `simulate`, `estimate`, `explain`, `sweep`
and `lesson`: read a CALIBRATION.yaml overlay and give a scenario's deployment (each pool of a
disaggregated one) without an explicit `overhead` the overlay's host costs for its engine style
(calibration/host_costs.py), and every run the GPU profiles it calibrates (calibration/
applied.py: one rule turns an overlay into what a run uses)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from simulator.calibration.applied import Applied

F = TypeVar("F", bound=Callable[..., Any])


def calibration_option(f: F) -> F:
    """Add `--calibration FILE` (env FRONTIER_CALIBRATION) to a command."""
    out: F = click.option(
        "--calibration", "calibration", type=click.Path(dir_okay=False), default=None,
        envvar="FRONTIER_CALIBRATION",
        help="Apply this calibration overlay (from `frontier calibrate`): host costs of the "
        "engine styles it names, where the scenario sets no deployment overhead, and (simulate, "
        "estimate) the GPU efficiency factors it fits.")(f)
    return out


def _known(kind: str) -> set[str]:
    if kind == "engine_style":
        from simulator.engines.style import load_engine_styles

        return set(load_engine_styles())
    from simulator.hardware.profile import profile_paths

    return set(profile_paths())


def calibration_applied(path: str) -> Applied:
    """What the overlay at `path` gives a run: host costs and calibrated GPU profiles (a bad
    file, name, key or value is one InputError line)."""
    from simulator.calibration.applied import applied
    from simulator.calibration.overlay import read_overlay
    from simulator.errors import InputError, one_line

    overlay = read_overlay(path, _known)
    try:
        return applied(overlay)
    except InputError as exc:
        raise InputError(one_line(f"{path}: {exc}")) from None


def calibration_overrides(scenario: str, overrides: tuple[str, ...],
                          path: str) -> list[str]:
    """`deployment[.pool].overhead=...` overrides for the pools the overlay calibrates."""
    from simulator.calibration.host_costs import overhead_overrides
    from simulator.inputs.scenario import load_scenario_file
    from simulator.inputs.shipped import resolve_scenario

    s, _ = load_scenario_file(resolve_scenario(scenario), list(overrides))
    # 17 significant digits with a decimal point: the float comes back exactly (YAML reads
    # '1e-06' without one as a string).
    costs = calibration_applied(path).host_costs
    return [f"{key}={value:.16e}" for key, value in overhead_overrides(s, costs)]


def calibration_line(path: str, applied: Applied | None = None) -> str:
    """The first line of a calibrated text result: the file and what it sets (`applied`: the
    overlay already read, so it is not read again)."""
    applied = applied if applied is not None else calibration_applied(path)
    return f"calibration: {path} (fitted to measured runs: {applied.describe()})"
