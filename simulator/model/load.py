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
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(f"model config {str(path)!r}: cannot read JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ModelError(f"model config {str(path)!r}: top level must be a JSON object")
    return parse_hf_config(raw, name)
