"""One exception type for bad input, and one way to say what was wrong in a single line."""

from __future__ import annotations

import difflib
import re
import reprlib
from typing import TYPE_CHECKING, Any, get_args

if TYPE_CHECKING:  # pydantic costs ~0.1 s to import: only the commands that validate load it
    from pydantic import ValidationError


class InputError(ValueError):
    """Bad user input: the CLI prints the message as one line and exits with status 2."""


class InvariantViolation(Exception):
    """A simulation invariant broke: a bug in the simulator, never a user error.

    Its args are its fields, so SimPy (which re-raises a failed process's exception as
    `type(exc)(*exc.args)`) and pickle (sweeps across processes) rebuild it unchanged."""

    def __init__(
        self, invariant: str, replica: int | None, step: int | None, time_s: float, detail: str
    ) -> None:
        super().__init__(invariant, replica, step, time_s, detail)
        self.invariant = invariant
        self.replica = replica
        self.step = step
        self.time_s = time_s
        self.detail = detail

    def __str__(self) -> str:
        where = "run" if self.replica is None else f"replica {self.replica}"
        at = "at the end" if self.step is None else f"step {self.step}"
        return (
            f"invariant {self.invariant!r} violated on {where}, {at}, t={self.time_s:.9g} s: "
            + self.detail.replace("\n", " ")
        )


def _loc(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + item)
    return "".join(parts) or "(top level)"


def _models_of(tp: Any) -> list[Any]:
    """The pydantic model classes a field's type can hold (unions, Annotated, Optional)."""
    from pydantic import BaseModel

    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    return [m for a in get_args(tp) for m in _models_of(a)]


def valid_keys(model: Any, loc: tuple[int | str, ...]) -> list[str]:
    """The keys valid at `loc` (a pydantic error location, union tags included) under the
    model class `model`; empty when the place is not a mapping of fields."""
    current = [model]
    for part in loc:
        if isinstance(part, int) or not current:
            continue
        if part.endswith("-tag"):  # a tagged union's member: the one whose kind is the tag
            kind = part[: -len("-tag")]
            current = [m for m in current if getattr(
                m.model_fields.get("kind"), "default", None) == kind] or current
            continue
        fields = [m.model_fields[part] for m in current if part in m.model_fields]
        current = [c for f in fields for c in _models_of(f.annotation)]
    return sorted({k for m in current for k in m.model_fields}) if current else []


def _suggestion(model: Any, err: Any) -> str:
    """'; did you mean 'tensor_parallel'? (valid: ...)' for an unknown key, else ''."""
    if model is None or err["type"] != "extra_forbidden" or not err["loc"]:
        return ""
    bad = str(err["loc"][-1])
    valid = valid_keys(model, tuple(err["loc"][:-1]))
    if not valid:
        return ""
    close = difflib.get_close_matches(bad, valid, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{hint} (valid: {', '.join(valid)})"


def format_validation_error(source: str, exc: ValidationError, model: Any = None) -> str:
    """First pydantic error as `file: key.path: problem (got value)` on one line. An unknown
    key comes first (a misspelt key often causes the other errors) and, given the root
    `model` class, says which valid key it is probably meant to be."""
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    err = errors[0]
    # Tagged unions put the tag in the location (e.g. arrival.poisson.rate_per_s): drop it.
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.endswith("-tag")))
    suggestion = _suggestion(model, err)
    if suggestion:
        more = len(errors) - 1
        return (f"{source}: {_loc(loc)}: unknown key{suggestion}"
                + (f" [+{more} more]" if more > 0 else ""))
    msg = err["msg"].replace("\n", " ")
    got = err.get("input")
    shown = ""
    if err["type"] not in ("missing",) and not isinstance(got, dict):
        text = short_repr(got)
        shown = f" (got {text[:60] + '...' if len(text) > 60 else text})"
    more = len(exc.errors()) - 1
    extra = f" [+{more} more]" if more > 0 else ""
    return f"{source}: {_loc(loc)}: {msg}{shown}{extra}"


class _ShortRepr(reprlib.Repr):
    """reprlib's bounded repr, with integers too long to print said by their size."""

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 200:
            return f"<an integer of about {int(x.bit_length() * 0.30103):,} digits>"
        return super().repr_int(x, level)


_SHORT = _ShortRepr()
_SHORT.maxstring = _SHORT.maxother = _SHORT.maxlong = 64
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 6
_SHORT.maxlevel = 3


def short_repr(value: Any) -> str:
    """`repr` of a value for a message, bounded however large the value is (a string that
    aliases expanded to megabytes, a list of a million items, an int of 10,000 digits): the
    full repr is never built."""
    try:
        return _SHORT.repr(value)
    except (ValueError, RecursionError):
        return f"<{type(value).__name__}>"


def tag_key(exc: BaseException, key_path: str) -> None:
    """Remember which scenario key a later error (model, GPU, layout, memory fit) is about, so
    the CLI can name it; the exception keeps its type (sweeps sort failures by type)."""
    if getattr(exc, "key_path", None) is None:
        exc.key_path = key_path  # type: ignore[attr-defined]


def located_message(source: str, exc: BaseException) -> str:
    """`source: key.path: first line of the message`, without repeating what it already says."""
    text = str(exc).split("\n", 1)[0] if str(exc).strip() else type(exc).__name__
    key = getattr(exc, "key_path", None)
    if isinstance(key, str) and not text.startswith(key):
        text = f"{key}: {text}"
    return text if text.startswith(f"{source}:") else f"{source}: {text}"


# Characters that end a line for str.splitlines() or a terminal (all C0 controls but tab, DEL,
# NEL, the Unicode line and paragraph separators): shown escaped so a message stays one line.
_LINE_BREAKING = re.compile("[\x00-\x08\x0a-\x1f\x7f\x85\u2028\u2029]")


MAX_LINE = 2000  # characters of a message line; the rest is cut (a value may be huge)


def one_line(text: str) -> str:
    """A message as one line: every character that would break it (a newline in a path or a
    YAML key, a library's multi-line text) shown escaped, so no part after it is lost; at most
    MAX_LINE characters long."""
    line = _LINE_BREAKING.sub(lambda m: repr(m.group())[1:-1], text[: MAX_LINE * 4].rstrip())
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 3] + "..."
