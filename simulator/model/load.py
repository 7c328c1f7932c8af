"""Find a model by catalog name or config.json path and parse it into an `Architecture`."""

from __future__ import annotations

import json
from pathlib import Path

from simulator.model.architecture import Architecture, ModelError
from simulator.model.hf_config import parse_hf_config

CATALOG_DIR = Path(__file__).parent / "catalog"


def catalog_names() -> list[str]:
    """Names of the shipped model configs (file stems in simulator/model/catalog/)."""
    return sorted(p.stem for p in CATALOG_DIR.glob("*.json"))


def load_architecture(name_or_path: str) -> Architecture:
    """A catalog name (`llama-3.1-70b`) or a path to any HF-style config.json."""
    path = Path(name_or_path)
    if path.suffix == ".json" or path.exists():
        if not path.is_file():
            raise ModelError(f"model config {name_or_path!r}: no such file")
        name = path.parent.name if path.name == "config.json" else path.stem
    else:
        path = CATALOG_DIR / f"{name_or_path}.json"
        if not path.is_file():
            from difflib import get_close_matches

            near = get_close_matches(name_or_path, catalog_names(), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise ModelError(
                f"unknown model {name_or_path!r}{hint} "
                f"(valid: {', '.join(catalog_names())}, or a path to a config.json)"
            )
        name = name_or_path
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"model config {str(path)!r}: cannot read JSON ({exc})") from None
    except RecursionError:
        raise ModelError(f"model config {str(path)!r}: cannot read JSON (nested too "
                         f"deeply)") from None
    if not isinstance(raw, dict):
        raise ModelError(f"model config {str(path)!r}: top level must be a JSON object")
    _check_numbers(raw, str(path))
    return parse_hf_config(raw, name)


# Past 2^53 a float no longer holds every integer; no size, count or constant of a real model
# comes near it, and beyond ~1e308 one becomes infinite (JSON's 1e400 reads as inf).
MAX_CONFIG_NUMBER = 2.0**53


def _check_numbers(raw: dict[str, object], source: str) -> None:
    """Refuse a number no model has (infinite, NaN, or past MAX_CONFIG_NUMBER) anywhere in the
    config, naming its key, before the arithmetic on it overflows."""
    stack: list[tuple[str, object]] = [(k, v) for k, v in raw.items()]
    while stack:
        key, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((f"{key}.{k}", v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{key}[{i}]", v) for i, v in enumerate(value))
        elif isinstance(value, int | float) and not isinstance(value, bool) and not (
                abs(value) <= MAX_CONFIG_NUMBER):  # also true for NaN
            shown = "a number too large to print" if isinstance(value, int) else repr(value)
            raise ModelError(f"model config {source!r}: {key}: {shown} is beyond any real "
                             f"model (at most {MAX_CONFIG_NUMBER:.0f} in magnitude)")
