"""The one place frontier opens a file it writes: never through a symbolic link, atomically
where readers may look, and with a failure said in one line.

An output folder may be shared or prepared by someone else: a `results.csv` (or `store.jsonl`,
`sweep.lock`, a point file) that is a link to another file would have that file truncated or
overwritten. Every output is opened with `O_NOFOLLOW` (and checked with `lstat` before an
atomic rename), so a link is refused by name instead of followed. Descriptors are opened
close-on-exec, so a program started by exec never inherits them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from simulator.errors import InputError


class OutputError(InputError):
    """An output file cannot be written (a link in its place, a full disk, no permission)."""

    def __init__(self, message: str, path: Path | str, reason: str, *, link: bool = False
                 ) -> None:
        super().__init__(message)
        self.path = str(path)
        self.reason = reason  # "No space left on device", "is a symbolic link", ...
        self.link = link  # a link in the file's place: not fixed by freeing space


def link_refusal(path: Path | str) -> OutputError:
    return OutputError(f"{path}: is a symbolic link; frontier does not write through links "
                       f"(remove it, or choose another output)", path, "is a symbolic link",
                       link=True)


def cannot_write(path: Path | str, exc: OSError) -> OutputError:
    """`path: cannot write (reason)` for an OSError met while writing `path`."""
    if exc.errno == errno.ELOOP:
        return link_refusal(path)
    reason = exc.strerror or type(exc).__name__
    return OutputError(f"{path}: cannot write ({reason})", path, reason)


def refuse_link(path: Path | str) -> None:
    """Raise OutputError when `path` itself is a symbolic link (absent is fine)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise cannot_write(path, exc) from None
    if stat.S_ISLNK(st.st_mode):
        raise link_refusal(path)


def open_output(path: Path | str, flags: int, mode: int = 0o644) -> int:
    """`os.open` for writing that refuses a link in `path`'s place (OutputError), and whose
    descriptor no exec'd program inherits."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        raise cannot_write(path, exc) from None


def make_folder(path: Path | str) -> None:
    """Create an output folder and its parents, or say in one line why it cannot be."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise cannot_write(path, exc) from None


def write_atomic(path: Path | str, text: str | Iterable[str], *, durable: bool = True) -> None:
    """Write a file so that readers see the old or the new content, never a mix; `durable`
    also forces it to disk before the rename (a power cut cannot leave it empty). A link in
    `path`'s place is refused; a failed write leaves neither a temporary file nor a torn one."""
    path = Path(path)
    refuse_link(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        os.unlink(tmp)  # a leftover of a killed run with this pid (a link is removed, not followed)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise cannot_write(path, exc) from None
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644)
    except OSError as exc:  # said of the file asked for, not of its temporary name
        raise cannot_write(path, exc) from None
    try:
        with open(fd, "w", encoding="utf-8", newline="") as fh:
            if isinstance(text, str):
                fh.write(text)
            else:
                fh.writelines(text)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise cannot_write(path, exc) from None
        raise


def write_output(path: Path | str, text: str, *, executable: bool = False) -> None:
    """Write a user-named output file (a script, a CSV) whole: atomically and never through a
    link; `executable` makes it runnable (a shell script)."""
    write_atomic(path, text, durable=False)
    if executable:
        try:
            os.chmod(path, 0o755)
        except OSError as exc:
            raise cannot_write(path, exc) from None


def refuse_same_file(output: Path | str, inputs: Iterable[Path | str], flag: str) -> None:
    """Refuse an output path that names one of the command's inputs (it would be replaced)."""
    out = Path(output)
    if str(output) == "":
        raise OutputError(f"{flag} '': give a file name", output, "empty name")
    for inp in inputs:
        try:
            same = out.exists() and os.path.samefile(out, inp)
        except OSError:
            same = False
        if same:
            raise OutputError(f"{flag} {output}: is the input {inp}; it would be overwritten "
                              f"(choose another file)", output, "is an input")
