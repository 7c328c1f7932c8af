"""Typed reads from an HF config mapping, each failure one ModelError sentence naming the key
(the HF importer's reader, shared by its family and attention-kind parsers)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from simulator.model.architecture import ModelError


class ConfigReader:
    """Typed reads from a config mapping; every failure is a one-sentence ModelError."""

    def __init__(self, raw: Mapping[str, Any], name: str) -> None:
        self.raw = raw
        self.name = name

    def fail(self, what: str) -> ModelError:
        return ModelError(f"model config {self.name!r}: {what}")

    def has(self, key: str) -> bool:
        """The key is present with a non-null value."""
        return self.raw.get(key) is not None

    def int_(self, key: str, *, minimum: int = 1) -> int:
        if key not in self.raw:
            raise self.fail(f"missing required key {key!r}")
        return self._check_int(key, self.raw[key], minimum)

    def opt_int(self, key: str, default: int, *, minimum: int = 0) -> int:
        value = self.raw.get(key)
        if value is None:
            return default
        return self._check_int(key, value, minimum)

    def _check_int(self, key: str, value: Any, minimum: int) -> int:
        # bool is an int subclass; `true` is never a valid size. Integral floats (4096.0) are
        # accepted because some exporters write every number as a float.
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(f"key {key!r} must be an integer (got {value!r})")
        if value < minimum:
            raise self.fail(f"key {key!r} must be at least {minimum} (got {value})")
        return value

    def _optional(self, key: str, valid: Callable[[Any], bool], what: str) -> Any:
        """The key's value, None when absent or null; one line naming it when not `what`."""
        value = self.raw.get(key)
        if value is not None and not valid(value):
            raise self.fail(f"key {key!r} must be {what} (got {value!r})")
        return value

    def opt_bool(self, key: str, default: bool) -> bool:
        value = self._optional(key, lambda v: isinstance(v, bool), "true or false")
        return default if value is None else bool(value)

    def opt_str(self, key: str) -> str | None:
        value = self._optional(key, lambda v: isinstance(v, str), "a string")
        return None if value is None else str(value)

    def opt_int_list(self, key: str) -> list[int]:
        value = self._optional(key, lambda v: isinstance(v, list) and all(
            isinstance(x, int) and not isinstance(x, bool) for x in v), "a list of integers")
        return [] if value is None else list(value)

    def opt_str_list(self, key: str) -> list[str] | None:
        value = self._optional(key, lambda v: isinstance(v, list) and all(
            isinstance(x, str) for x in v), "a list of strings")
        return None if value is None else list(value)
