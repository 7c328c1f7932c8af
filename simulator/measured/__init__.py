"""Measured runs in, calibration out: read benchmark files (AIConfigurator silicon CSV, vLLM,
aiperf and SGLang client results) into MeasuredRuns, map each to a frontier scenario with its
declared defaults or the reason it cannot be expressed, and score predictions against them."""

from simulator.measured.detect import FORMATS, read_measurements
from simulator.measured.run import Load, MeasuredRun, Pool
from simulator.measured.scenario import Mapped, map_run

__all__ = ["FORMATS", "Load", "Mapped", "MeasuredRun", "Pool", "map_run", "read_measurements"]
