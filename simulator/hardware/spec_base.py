"""The base of every model a hardware profile is read into: unknown keys refused, values
frozen, and strict types (a boolean or a string is no number: `sm_count: true` and
`hbm_gb: "80"` are refused; an integer still counts as a float)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictSpec(BaseModel):
    # defer_build: each schema is built on first validation, not at import (start-up time)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True, strict=True)
