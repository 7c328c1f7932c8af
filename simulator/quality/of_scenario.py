"""The quality block of a whole scenario: one lookup per set of formats it serves with. A
disaggregated deployment runs prefill and decode at their own formats; the answer is the worse
of the two (and unknown if either is)."""

from __future__ import annotations

from simulator.inputs.deployment import DisaggregatedDeployment, Precision
from simulator.inputs.scenario import Scenario
from simulator.quality.lookup import Quality, lookup_quality, worst


def _precisions(scenario: Scenario) -> list[Precision]:
    d = scenario.deployment
    if isinstance(d, DisaggregatedDeployment):
        return [d.prefill.precision, d.decode.precision]
    return [d.precision]


def scenario_quality(scenario: Scenario) -> Quality:
    return worst([lookup_quality(scenario.model, p.weights, p.activations, p.kv_cache)
                  for p in _precisions(scenario)])
