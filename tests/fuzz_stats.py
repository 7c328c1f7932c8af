"""Bookkeeping for the fuzz targets: which distinct bad inputs each surface refused (printed in
the pytest summary by conftest.py), and a corpus that keeps every input that ever broke one."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "fuzz_corpus"
REFUSED: dict[str, set[str]] = {}  # surface -> digests of distinct inputs refused with exit 2


def digest(data: str | bytes) -> str:
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()[:16]


def note_refused(surface: str, data: str | bytes) -> None:
    REFUSED.setdefault(surface, set()).add(digest(data))


@contextmanager
def kept_if_broken(surface: str, data: str | bytes, suffix: str) -> Iterator[None]:
    """Run a fuzz check; if it fails (an assertion or any exception the surface should have
    turned into one line), save the input to fuzz_corpus/<surface>/ before re-raising, so the
    case stays as a regression test once fixed. One file per surface and run, overwritten by
    each failing try: hypothesis replays its shrunk, minimal example last, and that is kept."""
    try:
        yield
    except BaseException:
        folder = CORPUS / surface
        folder.mkdir(parents=True, exist_ok=True)
        raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
        (folder / f"found-latest{suffix}").write_bytes(raw)
        raise


def corpus_files() -> list[Path]:
    return sorted(p for p in CORPUS.rglob("*") if p.is_file())


def summary_lines(write: Callable[[str], None]) -> None:
    if not REFUSED:
        return
    total = sum(len(v) for v in REFUSED.values())
    per = ", ".join(f"{k} {len(v)}" for k, v in sorted(REFUSED.items()))
    write(f"fuzz: {total} distinct bad inputs refused with one line ({per}); "
          f"corpus {len(corpus_files())} files in tests/fuzz_corpus")
