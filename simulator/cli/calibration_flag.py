"""`--calibration FILE` (or FRONTIER_CALIBRATION) of `simulate` and `estimate`: read a
CALIBRATION.yaml overlay and give a scenario's deployment (each pool of a disaggregated one)
without an explicit `overhead` the overlay's host costs for its engine style, as overrides."""

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
    from simulator.calibration.overlay import read_overlay

    overlay = read_overlay(path, _known)
    out: dict[str, dict[str, float]] = {}
    for v in overlay.values:
        t = v.target
        if t.kind == "engine_style" and t.key in ("cpu_step_us", "cpu_per_seq_us"):
            out.setdefault(t.name, {})[t.key] = v.value
    return out


def calibration_overrides(scenario: str, overrides: tuple[str, ...],
                          path: str) -> list[str]:
    """`deployment[.pool].overhead=...` overrides for the pools the overlay calibrates."""
    from simulator.engines.style import load_engine_styles
    from simulator.inputs.scenario import load_scenario_file
    from simulator.inputs.shipped import resolve_scenario

    costs = host_costs(path)
    s, _ = load_scenario_file(resolve_scenario(scenario), list(overrides))
    shipped = load_engine_styles()
    out: list[str] = []
    for prefix, pool in s.deployment.engine_types:
        fitted = costs.get(str(pool.engine))
        if pool.overhead is not None or not fitted:
            continue
        style = shipped[str(pool.engine)]
        step_s = fitted.get("cpu_step_us", style.cpu_step_s * 1e6) * 1e-6
        per_seq_s = fitted.get("cpu_per_seq_us", style.cpu_per_seq_s * 1e6) * 1e-6
        # 17 significant digits with a decimal point: the float comes back exactly (YAML
        # reads '1e-06' without one as a string).
        out.append(f"{prefix}.overhead.step_s={step_s:.16e}")
        out.append(f"{prefix}.overhead.per_seq_s={per_seq_s:.16e}")
    return out


def calibration_line(path: str) -> str:
    """The first line of a calibrated text result."""
    return f"calibration: {path} (engine host costs fitted to measured runs)"
