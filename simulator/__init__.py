"""frontier: an analytical performance simulator for LLM serving.

Public API: `load_scenario(path_or_dict, overrides=...)` and `simulate(scenario) -> Result`.
"""

from simulator.api import LoadedScenario, Result, load_scenario, simulate

__all__ = ["LoadedScenario", "Result", "load_scenario", "simulate"]
