"""JSON Schemas of the input files, for editors and checks: a scenario's from its pydantic
model, a sweep file's as the same keys plus `sweep:`, `constraints:` and the quality bound
(an axis may supply a key the base leaves out, so no scenario key is required there)."""

from __future__ import annotations

import copy
from typing import Any

from simulator.sweep import quality_gate

SCHEMA_URI = "https://json-schema.org/draft/2020-12/schema"


def scenario_schema() -> dict[str, Any]:
    """The JSON Schema of a scenario file."""
    from simulator.inputs.scenario import Scenario

    schema = Scenario.model_json_schema()
    return {"$schema": SCHEMA_URI, **schema}


def sweep_schema() -> dict[str, Any]:
    """The JSON Schema of a sweep file: scenario keys (none required) plus the grid."""
    schema = copy.deepcopy(scenario_schema())
    schema["title"] = "Sweep"
    schema.pop("required", None)
    values = {"type": "array", "minItems": 1}
    schema["properties"]["sweep"] = {
        "type": "object",
        "description": "Key path -> list of values; `zip:` groups move several keys together.",
        "properties": {"zip": {"type": "array", "items": {
            "type": "object", "additionalProperties": values}}},
        "additionalProperties": values,
    }
    schema["properties"]["constraints"] = {
        "type": "array", "items": {"type": "string"},
        "description": "Expressions over key paths a point must satisfy, e.g. "
                       "\"deployment.tensor_parallel * deployment.replicas == 8\".",
    }
    schema["properties"][quality_gate.KEY] = {
        "type": "number", "minimum": 0,
        "description": "Drop points whose published quality drop exceeds this percentage.",
    }
    return schema
