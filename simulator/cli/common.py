"""What every command shares: the errors that are the user's, a JSON printer, format names."""

from __future__ import annotations

import json
from typing import Any

import click

from simulator.errors import InputError
from simulator.model.precision import FORMAT_NAMES

# The model, layout and memory-fit errors (ModelError, LayoutError, MemoryFitError) subclass
# ValueError: naming ValueError covers them without importing the cost model at start-up.
USER_ERRORS: tuple[type[Exception], ...] = (InputError, ValueError)

FORMAT = click.Choice(FORMAT_NAMES)


def dump(data: Any) -> None:
    """Print `data` as indented JSON; NaN and infinity are refused, never printed."""
    click.echo(json.dumps(data, indent=2, sort_keys=False, allow_nan=False))
