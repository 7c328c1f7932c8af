"""Durable, append-only store of finished sweep points, and atomic writes of the outputs.

`DIR/store.jsonl` holds one JSON record per finished point, keyed by the hash of the point's
full scenario. Each record is flushed and fsync'ed before the next point is taken as done, so a
killed sweep loses at most the points in flight; a torn last line (the process died mid-write)
is ignored and cut off when the store is reopened. `--resume` skips every key already stored
(points that crashed are tried again). The last record of a key wins.

One sweep at a time writes a folder: the store holds an exclusive `flock` on `DIR/sweep.lock`
while it is open (the kernel releases it when the process dies, even by SIGKILL), and a second
sweep on the same `--out` is refused with one line naming the holder's pid. Only the process
that took the lock holds it: a forked child (a pool worker) closes its copy at once, so a
worker that outlives a killed parent never blocks `--resume`. Every file is opened without
following a link in its place (simulator/safeio.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypedDict

import yaml

from simulator.safeio import cannot_write, open_output, refuse_link, write_atomic

__all__ = ["Record", "ResultStore", "StoreExistsError", "SweepBusyError", "make_record",
           "point_scenario", "write_atomic"]

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
STORE_NAME = "store.jsonl"
LOCK_NAME = "sweep.lock"


class Record(TypedDict):
    key: str
    point_status: str  # ok | dropped | error
    values: dict[str, Any]
    result: dict[str, Any] | None  # Result.to_dict() when ok
    reason: str | None  # dropped: the category counted in the summary
    error: str | None  # dropped or error: the full message
    wall_s: float


def make_record(
    key: str,
    values: dict[str, Any],
    status: str,
    *,
    result: dict[str, Any] | None = None,
    reason: str | None = None,
    error: str | None = None,
    wall_s: float = 0.0,
) -> Record:
    return Record(key=key, point_status=status, values=values, result=result, reason=reason,
                  error=error, wall_s=wall_s)


class StoreExistsError(ValueError):
    """The output folder already holds a store and neither resume nor fresh was asked."""


class SweepBusyError(ValueError):
    """Another live process holds the folder's lock."""


# Descriptors of the folder locks this process holds. A forked child closes its copies at once
# (closing a copy does not release the lock: the parent's descriptor still holds it), so the
# lock lives and dies with the process that took it, whatever happens to its workers.
_HELD_LOCKS: set[int] = set()


def _drop_inherited_locks() -> None:
    for fd in _HELD_LOCKS:
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD_LOCKS.clear()


os.register_at_fork(after_in_child=_drop_inherited_locks)


def _lock_folder(folder: Path) -> int:
    """An exclusive, non-blocking lock on `folder/sweep.lock`; the descriptor holds it."""
    fd = open_output(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise SweepBusyError(
            f"{folder}: another sweep (pid {holder}) is writing to this folder; wait for it "
            f"to finish or choose another --out"
        ) from None
    _HELD_LOCKS.add(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _unlock_folder(fd: int) -> None:
    _HELD_LOCKS.discard(fd)
    os.close(fd)  # releases the folder's lock


_FIELDS: dict[str, type | tuple[type, ...]] = {
    "key": str, "point_status": str, "values": dict, "result": (dict, type(None)),
    "reason": (str, type(None)), "error": (str, type(None)), "wall_s": (int, float)}
_DEFAULTS: dict[str, Any] = {"result": None, "reason": None, "error": None, "wall_s": 0.0}


def _as_record(rec: Any) -> Record | None:
    """A decoded store line as a Record, or None when a field is missing or of the wrong type
    (a line written by another program, or edited): such a line is skipped and counted."""
    if not isinstance(rec, dict):
        return None
    full = {**_DEFAULTS, **rec}
    if any(not isinstance(full.get(k), t) for k, t in _FIELDS.items()):
        return None
    return full  # type: ignore[return-value]


class ResultStore:
    """Append-only JSONL store; open it with `resume` to keep what a previous run finished."""

    def __init__(self, path: Path, *, resume: bool = False, fresh: bool = False) -> None:
        self.path = path
        self.torn_bytes = 0  # size of a torn last line that was cut off on opening
        self.bad_lines = 0  # undecodable complete lines (skipped)
        self._records: dict[str, Record] = {}
        self._lock_fd = _lock_folder(path.parent)
        try:
            self._open(resume, fresh)
        except BaseException:
            _unlock_folder(self._lock_fd)
            raise

    def _open(self, resume: bool, fresh: bool) -> None:
        path = self.path
        refuse_link(path)
        size = path.stat().st_size if path.exists() else 0
        if size > 0 and not (resume or fresh):
            raise StoreExistsError(
                f"{path.parent} already holds results ({path.name}); pass --resume to go on "
                f"from them or --fresh to start over"
            )
        if fresh and path.exists():
            path.unlink()
        fd = open_output(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        self._fh = os.fdopen(fd, "r+b")
        try:
            self._load()
        except OSError as exc:
            self._fh.close()
            raise cannot_write(path, exc) from None
        except BaseException:
            self._fh.close()
            raise

    def _load(self) -> None:
        fd = self._fh.fileno()
        data = b""
        while chunk := os.pread(fd, 1 << 20, len(data)):
            data += chunk
        end = data.rfind(b"\n") + 1  # everything after the last newline is a torn write
        if end < len(data):
            self.torn_bytes = len(data) - end
            os.ftruncate(fd, end)
            os.fsync(fd)
        for line in data[:end].splitlines():
            if not line.strip():
                continue
            try:
                rec = _as_record(json.loads(line))
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                rec = None
            if rec is None:
                self.bad_lines += 1
            else:
                self._records[rec["key"]] = rec

    def records(self) -> dict[str, Record]:
        """The last record of every stored key."""
        return dict(self._records)

    def finished(self) -> set[str]:
        """Keys that --resume skips: every stored point that did not crash."""
        return {k for k, r in self._records.items() if r["point_status"] != "error"}

    def append(self, record: Record) -> None:
        """Write one record durably (flush + fsync) before returning."""
        self.append_many([record])

    def append_many(self, records: Iterable[Record]) -> None:
        """Write records durably with one fsync (a screen's thousands of dropped points)."""
        batch = list(records)
        if not batch:
            return
        data = b"".join(json.dumps(r, allow_nan=True, separators=(",", ":")).encode() + b"\n"
                        for r in batch)
        try:
            self._fh.write(data)
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except OSError as exc:  # e.g. ENOSPC: say which file could not be written
            raise cannot_write(self.path, exc) from None
        for r in batch:
            self._records[r["key"]] = r

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()
            _unlock_folder(self._lock_fd)

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@functools.lru_cache(maxsize=4096)
def _read_point(path: str) -> dict[str, Any] | None:
    try:
        data = yaml.load(Path(path).read_text(), Loader=_Loader)
    except (OSError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def point_scenario(sweep_dir: Path, point_id: str) -> dict[str, Any] | None:
    return _read_point(str(sweep_dir / "points" / f"{point_id}.yaml"))
