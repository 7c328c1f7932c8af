"""Typed reads from an HF config mapping, each failure one ModelError sentence naming the key
(the HF importer's reader, shared by its family and attention-kind parsers)."""

from __future__ import annotations

from collections.abc import Mapping
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

    def opt_bool(self, key: str, default: bool) -> bool:
        value = self.raw.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(f"key {key!r} must be true or false (got {value!r})")
        return value

    def opt_str(self, key: str) -> str | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(f"key {key!r} must be a string (got {value!r})")
        return value

    def opt_int_list(self, key: str) -> list[int]:
        value = self.raw.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise self.fail(f"key {key!r} must be a list of integers (got {value!r})")
        return list(value)

    def opt_str_list(self, key: str) -> list[str] | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(f"key {key!r} must be a list of strings (got {value!r})")
        return list(value)
