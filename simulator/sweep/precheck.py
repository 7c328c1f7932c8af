"""Bad input in a sweep file, found before any point runs: an axis value (a misspelt GPU or
model name) that every point holding it refuses. Such a sweep would run, drop those points
one by one and finish with exit status 0; it is refused with one line instead. A value that
merely does not fit (memory, layout) is a finding, not bad input, and runs."""

from __future__ import annotations

from collections.abc import Callable

from simulator.errors import InputError
from simulator.sweep.grid import Point, SweepSpec, describe_values

Check = Callable[[Point], str | None]


def bad_input(point: Point) -> str | None:
    """The one-line error building this point's engine raises for bad input (an unknown GPU,
    a model that cannot be loaded, a request past the context window), or None; memory and
    layout refusals are findings, not input errors."""
    from simulator.inputs.scenario import load_scenario_file
    from simulator.model.architecture import ModelError
    from simulator.serving.engine_build import build_engine

    try:
        scenario, base_dir = load_scenario_file(point.scenario)
        build_engine(scenario, base_dir)
    except (InputError, ModelError) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    except ValueError:  # does not fit, does not split: the sweep reports it per point
        return None
    return None


def refused_value(spec: SweepSpec, points: list[Point], check: Check = bad_input) -> str | None:
    """One line naming the first swept value whose every point is bad input, else None.
    Each point is checked at most once, and a value stops at its first good point."""
    seen: dict[str, str | None] = {}

    def err(p: Point) -> str | None:
        if p.key not in seen:
            seen[p.key] = check(p)
        return seen[p.key]

    # The whole grid first (a bad name in the base scenario is no swept value's fault).
    groups: list[dict[str, object]] = [{}]
    groups += [dict(zip(d.paths, row, strict=True)) for d in spec.dimensions for row in d.rows]
    for values in groups:
        holding = [p for p in points if all(p.values.get(k) == v for k, v in values.items())]
        first: str | None = None
        for p in holding:
            e = err(p)
            if e is None:
                break
            first = first or e
        else:
            if first is not None:
                where = (f"{describe_values(values)} is refused at every point" if values
                         else "every point is refused")
                return f"{spec.source}: {where}: {first}"
    return None
