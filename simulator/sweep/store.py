"""Durable, append-only store of finished sweep points, and atomic writes of the outputs.

`DIR/store.jsonl` holds one JSON record per finished point, keyed by the hash of the point's
full scenario. Each record is flushed and fsync'ed before the next point is taken as done, so a
killed sweep loses at most the points in flight; a torn last line (the process died mid-write)
is ignored and cut off when the store is reopened. `--resume` skips every key already stored
(points that crashed are tried again). The last record of a key wins.

One sweep at a time writes a folder: the store holds an exclusive `flock` on `DIR/sweep.lock`
while it is open (the kernel releases it when the process dies, even by SIGKILL), and a second
sweep on the same `--out` is refused with one line naming the holder's pid.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypedDict

import yaml

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


def _lock_folder(folder: Path) -> int:
    """An exclusive, non-blocking lock on `folder/sweep.lock`; the descriptor holds it."""
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise SweepBusyError(
            f"{folder}: another sweep (pid {holder}) is writing to this folder; wait for it "
            f"to finish or choose another --out"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


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
            os.close(self._lock_fd)
            raise

    def _open(self, resume: bool, fresh: bool) -> None:
        path = self.path
        if path.exists() and path.stat().st_size > 0 and not (resume or fresh):
            raise StoreExistsError(
                f"{path.parent} already holds a sweep ({path.name}); pass --resume to continue "
                f"it or --fresh to start over"
            )
        if fresh and path.exists():
            path.unlink()
        if path.exists():
            self._load()
        self._fh = open(path, "ab")  # noqa: SIM115 - kept open for the whole sweep

    def _load(self) -> None:
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1  # everything after the last newline is a torn write
        if end < len(data):
            self.torn_bytes = len(data) - end
            with open(self.path, "r+b") as fh:
                fh.truncate(end)
                fh.flush()
                os.fsync(fh.fileno())
        for line in data[:end].splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                self.bad_lines += 1
                continue
            if isinstance(rec, dict) and isinstance(rec.get("key"), str):
                self._records[rec["key"]] = rec  # type: ignore[assignment]
            else:
                self.bad_lines += 1

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
            exc.filename = exc.filename or str(self.path)
            raise
        for r in batch:
            self._records[r["key"]] = r

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()
            os.close(self._lock_fd)  # releases the folder's lock

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_atomic(path: Path, text: str | Iterable[str], *, durable: bool = True) -> None:
    """Write a file so that readers see the old or the new content, never a mix; `durable`
    also forces it to disk before the rename (a power cut cannot leave it empty)."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8", newline="") as fh:
        if isinstance(text, str):
            fh.write(text)
        else:
            fh.writelines(text)
        fh.flush()
        if durable:
            os.fsync(fh.fileno())
    os.replace(tmp, path)


@functools.lru_cache(maxsize=4096)
def _read_point(path: str) -> dict[str, Any] | None:
    try:
        data = yaml.load(Path(path).read_text(), Loader=_Loader)
    except (OSError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def point_scenario(sweep_dir: Path, point_id: str) -> dict[str, Any] | None:
    return _read_point(str(sweep_dir / "points" / f"{point_id}.yaml"))
