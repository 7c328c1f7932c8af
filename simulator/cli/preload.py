"""Import simpy and pydantic's plugin loader without `importlib.metadata` at start-up.

Both import `importlib.metadata` at module level (email, zipfile, shutil, socket, bz2: 15-35 ms
of a ~0.3 s `frontier simulate`) for things a simulation never uses: simpy to set
`simpy.__version__`, pydantic to look up plugins, which the CLI switches off
(PYDANTIC_DISABLE_PLUGINS, simulator/cli/app.py). While they import, a stand-in module answers
for `importlib.metadata`: its `entry_points` imports the real module when called (so plugins
still load where the user turned them on), and its `version` reports the package as not
installed, which leaves `simpy.__version__` unset at import; simpy then gets a module
`__getattr__` that reads the version from the real `importlib.metadata` when something asks
for it. The stand-in is removed before this function returns; any later
`import importlib.metadata` gets the real module.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types
from typing import Any


class _NotFound(ModuleNotFoundError):
    """The stand-in's PackageNotFoundError."""


def _entry_points(**params: Any) -> Any:
    from importlib.metadata import entry_points

    return entry_points(**params)


def _version(name: str) -> str:
    raise _NotFound(name)


def _simpy_version(name: str) -> str:
    """simpy's module `__getattr__`: `__version__` as simpy itself would have set it."""
    if name != "__version__":
        raise AttributeError(f"module 'simpy' has no attribute {name!r}")
    from importlib.metadata import version

    return version("simpy")


def preload_simulation_libraries() -> None:
    """Import simpy and pydantic.plugin._loader with the stand-in in place (see the module
    docstring); nothing happens where `importlib.metadata` or simpy is already loaded."""
    if "importlib.metadata" in sys.modules or "simpy" in sys.modules:
        return
    stand_in = types.ModuleType("importlib.metadata")
    stand_in.__dict__.update(PackageNotFoundError=_NotFound, entry_points=_entry_points,
                             version=_version)
    sys.modules["importlib.metadata"] = stand_in
    setattr(importlib, "metadata", stand_in)  # noqa: B010 (`import importlib.metadata` reads it)
    try:
        for module in ("pydantic.plugin._loader", "simpy"):
            # e.g. a pydantic without that module: its own import then runs as usual
            with contextlib.suppress(ImportError):
                importlib.import_module(module)
    finally:
        del sys.modules["importlib.metadata"]
        delattr(importlib, "metadata")
    simpy = sys.modules.get("simpy")
    if simpy is not None and not hasattr(simpy, "__version__"):
        setattr(simpy, "__getattr__", _simpy_version)  # noqa: B010 (PEP 562 hook)
