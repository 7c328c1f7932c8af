"""Sweeps: grid expansion, runners (local processes, Ray), the durable store, the Pareto
frontier, cost and energy per token, recommendations and engine launch commands."""

from simulator.sweep.frontier import AXES, Axis, frontier_rows, pareto_mask, parse_axis
from simulator.sweep.grid import Point, SweepSpec, expand, load_sweep, point_key
from simulator.sweep.pipeline import SweepOutcome, run_sweep

__all__ = [
    "AXES",
    "Axis",
    "Point",
    "SweepOutcome",
    "SweepSpec",
    "expand",
    "frontier_rows",
    "load_sweep",
    "pareto_mask",
    "parse_axis",
    "point_key",
    "run_sweep",
]
