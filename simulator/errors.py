"""One exception type for bad input, and one way to say what was wrong in a single line."""

from __future__ import annotations

from pydantic import ValidationError


class InputError(ValueError):
    """Bad user input: the CLI prints the message as one line and exits with status 2."""


def _loc(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + item)
    return "".join(parts) or "(top level)"


def format_validation_error(source: str, exc: ValidationError) -> str:
    """First pydantic error as `file: key.path: problem (got value)` on one line."""
    err = exc.errors()[0]
    # Tagged unions put the tag in the location (e.g. arrival.poisson.rate_per_s): drop it.
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.endswith("-tag")))
    msg = err["msg"].replace("\n", " ")
    got = err.get("input")
    shown = ""
    if err["type"] not in ("missing",) and not isinstance(got, dict):
        text = repr(got)
        shown = f" (got {text[:60] + '...' if len(text) > 60 else text})"
    more = len(exc.errors()) - 1
    extra = f" [+{more} more]" if more > 0 else ""
    return f"{source}: {_loc(loc)}: {msg}{shown}{extra}"
