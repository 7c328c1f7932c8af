"""Reading a YAML file that must hold a mapping, with one-line errors naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from simulator.errors import InputError
from simulator.yamlsafe import safe_load_bounded


def load_yaml_mapping(path: Path, what: str, kind: str) -> dict[str, Any]:
    """The mapping at the top of `path`. `what` names the document ("scenario"), `kind` says
    what the mapping should hold, for the message when it is something else."""
    if not path.is_file():
        raise InputError(f"{path}: {what} file not found")
    try:
        loaded = safe_load_bounded(path.read_text())
    except (OSError, UnicodeDecodeError, RecursionError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: cannot read YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(loaded, dict):
        got = "an empty file" if loaded is None else f"a {type(loaded).__name__}"
        raise InputError(f"{path}: a {what} must be a YAML mapping of {kind}; got {got}")
    return loaded
