"""`--calibration FILE` (or FRONTIER_CALIBRATION) of `simulate`, `estimate`, `sweep` and
`lesson`: read a CALIBRATION.yaml overlay and give a scenario's deployment (each pool of a
disaggregated one) without an explicit `overhead` the overlay's host costs for its engine style
(calibration/host_costs.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def calibration_option(f: F) -> F:
    """Add `--calibration FILE` (env FRONTIER_CALIBRATION) to a command."""
    out: F = click.option(
        "--calibration", "calibration", type=click.Path(dir_okay=False), default=None,
        envvar="FRONTIER_CALIBRATION",
        help="Apply this calibration overlay (from `frontier calibrate`): host costs of the "
        "engine styles it names, where the scenario sets no deployment overhead.")(f)
    return out


def _known(kind: str) -> set[str]:
    if kind == "engine_style":
        from simulator.engines.style import load_engine_styles

        return set(load_engine_styles())
    from simulator.hardware.profile import profile_paths

    return set(profile_paths())


def host_costs(path: str) -> dict[str, dict[str, float]]:
    """Engine style -> {cpu_step_us, cpu_per_seq_us} the overlay at `path` sets."""
    from simulator.calibration import host_costs as hc
    from simulator.calibration.overlay import read_overlay

    return hc.host_costs(read_overlay(path, _known))


def calibration_overrides(scenario: str, overrides: tuple[str, ...],
                          path: str) -> list[str]:
    """`deployment[.pool].overhead=...` overrides for the pools the overlay calibrates."""
    from simulator.calibration.host_costs import overhead_overrides
    from simulator.inputs.scenario import load_scenario_file
    from simulator.inputs.shipped import resolve_scenario

    s, _ = load_scenario_file(resolve_scenario(scenario), list(overrides))
    # 17 significant digits with a decimal point: the float comes back exactly (YAML reads
    # '1e-06' without one as a string).
    return [f"{key}={value:.16e}" for key, value in overhead_overrides(s, host_costs(path))]


def calibration_line(path: str) -> str:
    """The first line of a calibrated text result."""
    return f"calibration: {path} (engine host costs fitted to measured runs)"
