"""frontier: an analytical performance simulator for LLM serving.

Public API: `load_scenario(path_or_dict, overrides=...)`, `simulate(scenario) -> Result` and
`estimate(scenario) -> Estimate` (the closed-form steady state, no simulation).
The names load on first use, so `import simulator.cli` (and `frontier --help`) does not pay for
numpy, pydantic and the cost model until a command needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulator.api import Estimate, LoadedScenario, Result, estimate, load_scenario, simulate

__all__ = ["Estimate", "LoadedScenario", "Result", "estimate", "load_scenario", "simulate"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from simulator import api

        return getattr(api, name)
    raise AttributeError(f"module 'simulator' has no attribute {name!r}")
