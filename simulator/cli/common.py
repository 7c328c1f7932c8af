"""What every command shares: the errors that are the user's, a JSON printer, format names."""

from __future__ import annotations

import json
import math
from typing import Any

import click

from simulator.errors import InputError
from simulator.model.precision import FORMAT_NAMES

# The model, layout and memory-fit errors (ModelError, LayoutError, MemoryFitError) subclass
# ValueError: naming ValueError covers them without importing the cost model at start-up.
USER_ERRORS: tuple[type[Exception], ...] = (InputError, ValueError)

FORMAT = click.Choice(FORMAT_NAMES)


class FiniteFloat(click.FloatRange):
    """A float option within a range that is also finite: click's FloatRange takes `inf` and
    `nan` (NaN passes every comparison), which no rate or percentage means."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


def dump(data: Any) -> None:
    """Print `data` as indented JSON; NaN and infinity are refused, never printed."""
    click.echo(json.dumps(data, indent=2, sort_keys=False, allow_nan=False))
