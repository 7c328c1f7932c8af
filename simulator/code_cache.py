"""A bytecode cache for the code the standard library compiles at import, as .pyc files are
for modules.

`@dataclass` writes each class's __init__, __repr__, __eq__, __hash__, __setattr__... as source
text and compiles it (dataclasses' `exec`), and every string annotation that pydantic resolves
becomes a `typing.ForwardRef`, which compiles its text (typing's `compile`): ~1,400 compiles,
~50 ms of a ~0.3 s `frontier simulate` (the simulator's own dataclasses and models, pydantic's
and annotated_types'). Compiling the same text always gives the same code, so the CLI keeps the
code objects, keyed by mode and exact text, in one marshal file beside the package's bytecode
(named with the interpreter's cache tag, as .pyc files are) and runs them instead of compiling
again. A changed class (fields, defaults, options) has other text and compiles afresh; a file
that cannot be read is ignored; nothing is written where Python writes no bytecode
(PYTHONDONTWRITEBYTECODE, a read-only install). FRONTIER_NO_CODE_CACHE=1 turns it off.
"""

from __future__ import annotations

import atexit
import builtins
import importlib.util
import marshal
import os
import sys
from types import CodeType
from typing import Any

# A bound on the file: entries whose text no class has any more (edited code) are dropped
# when it is passed, keeping what this process used.
MAX_ENTRIES = 8_000

Key = tuple[str, str]  # (compile mode, source text)


class CodeCache:
    """Compiled code by (mode, text), loaded from and saved to one marshal file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.codes: dict[Key, CodeType] | None = None  # read at the first compile
        self.used: set[Key] = set()
        self.added = False

    def compile(self, source: str, mode: str) -> CodeType:
        """`compile(source, "<string>", mode)` as the standard library calls it (no
        `__future__` flags inherited), from the cache where it holds that text."""
        if self.codes is None:
            self.codes = _read(self.path)
        key = (mode, source)
        self.used.add(key)
        code = self.codes.get(key)
        if code is None:
            code = builtins.compile(source, "<string>", mode, dont_inherit=True)
            self.codes[key] = code
            self.added = True
        return code

    def save(self) -> None:
        """Write the cache if this process compiled something new (merged with what other
        processes wrote meanwhile; atomically, so a concurrent reader sees old or new)."""
        if not self.added or self.codes is None or sys.dont_write_bytecode:
            return
        import tempfile

        codes = {**_read(self.path), **self.codes}
        if len(codes) > MAX_ENTRIES:
            codes = {k: v for k, v in codes.items() if k in self.used}
        folder = os.path.dirname(self.path)
        try:
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".code-cache-")
            try:
                with os.fdopen(fd, "wb") as f:
                    marshal.dump(codes, f)
                os.replace(tmp, self.path)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError:  # a read-only install or full disk: start-up just compiles
            return
        self.added = False


def _read(path: str) -> dict[Key, CodeType]:
    try:
        with open(path, "rb") as f:
            data = marshal.load(f)
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items()
            if isinstance(k, tuple) and len(k) == 2 and isinstance(v, CodeType)}


def cache_path() -> str:
    """Where the cache lives: the package's `__pycache__` (or sys.pycache_prefix), one file
    per interpreter version, as importlib places bytecode."""
    notional = os.path.join(os.path.dirname(__file__), "stdlib_code.py")
    return os.path.splitext(importlib.util.cache_from_source(notional))[0] + ".marshal"


_installed: CodeCache | None = None


def install(path: str | None = None) -> CodeCache | None:
    """Route dataclasses' `exec` and typing's `compile` of source text through the cache (once
    per process; before the first dataclass or model is defined, to help start-up)."""
    global _installed
    if _installed is not None or os.environ.get("FRONTIER_NO_CODE_CACHE"):
        return _installed
    import dataclasses
    import typing

    cache = CodeCache(path or cache_path())

    def dataclass_exec(source: Any, globals: Any = None, locals: Any = None) -> None:
        if isinstance(source, str):
            source = cache.compile(source, "exec")
        builtins.exec(source, globals, locals)

    def typing_compile(source: Any, filename: str, mode: str, *args: Any, **kw: Any) -> Any:
        if isinstance(source, str) and filename == "<string>" and not args and not kw:
            return cache.compile(source, mode)
        return builtins.compile(source, filename, mode, *args, **kw)

    # Module globals shadow the builtins for those two modules' own calls only.
    dataclasses.exec = dataclass_exec  # type: ignore[attr-defined]
    typing.compile = typing_compile  # type: ignore[attr-defined]
    atexit.register(cache.save)
    _installed = cache
    return cache
