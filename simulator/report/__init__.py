"""Plotly figures and self-contained HTML reports (plotly.js inlined, so they open offline)."""

from simulator.report.scenario_report import write_scenario_report
from simulator.report.sweep_report import write_sweep_report

__all__ = ["write_scenario_report", "write_sweep_report"]
