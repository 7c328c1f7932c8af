"""The CSV files a workload reads: request traces (plain or Azure LLM inference) and length
columns. Every malformed cell is one `InputError` naming the file, line and column.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from simulator.errors import InputError
from simulator.inputs.speculative import WORKLOAD_KINDS
from simulator.workload.mooncake import read_mooncake_rows
from simulator.workload.trace_rows import TraceRows

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

MAX_BAD_ROWS_SHOWN = 5


def resolve_path(path: str, base_dir: Path | None) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() or base_dir is None else base_dir / p


def csv_column(path: Path, column: str) -> IntArray:
    """Integers of one named column of a CSV with a header row."""
    try:
        with path.open(newline="") as f:
            reader = csv.reader(f)
            header = [h.strip() for h in next(reader, [])]
            if column not in header:
                raise InputError(
                    f"{path}: no column {column!r} (columns: {', '.join(header) or 'none'})"
                )
            i = header.index(column)
            values: list[int] = []
            for row in reader:
                if not row:
                    continue
                try:
                    values.append(parse_int(row[i]))
                except (IndexError, ValueError):
                    cell = row[i] if i < len(row) else "missing"
                    raise InputError(
                        f"{path}: line {reader.line_num}: column {column!r} is not a whole "
                        f"number (got {cell!r})"
                    ) from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not values:
        raise InputError(f"{path}: column {column!r} has no values")
    return np.asarray(values, dtype=np.int64)


def parse_int(text: str) -> int:
    """'12' or '12.0' -> 12; anything else raises ValueError."""
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        x = float(text)
        if not math.isfinite(x) or not x.is_integer():
            raise ValueError(text) from None
        return int(x)


_PLAIN = ("arrival_s", "input_tokens", "output_tokens")
_AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")  # Azure LLM inference traces


def parse_azure_timestamp(text: str) -> tuple[int, float]:
    """'2023-11-16 18:15:46.6805900' -> (whole POSIX seconds, fraction).

    Split in two so that 100 ns ticks survive (a float of ~1.7e9 s keeps only ~0.2 µs), and
    parsed by hand because `datetime.fromisoformat` in 3.11 takes at most 6 fraction digits.
    The time is read as UTC; only differences matter.
    """
    text = text.strip()
    whole, dot, frac = text.partition(".")
    if dot and (not frac.isdigit() or not frac.isascii()):
        raise ValueError(f"bad fraction of a second in {text!r}")
    stamp = datetime.fromisoformat(whole + "+00:00")
    return int(stamp.timestamp()), (int(frac) / 10 ** len(frac)) if frac else 0.0


def _check_tokens(text: str, name: str) -> int:
    try:
        value = parse_int(text)
    except ValueError:
        raise ValueError(f"{name} {text.strip()!r} is not a whole number") from None
    if value < 1:
        raise ValueError(f"{name} {value} is below 1")
    return value


@dataclass(frozen=True, eq=False)
class Trace:
    """A trace's requests in time order, and the line numbers of the bad rows it skipped."""

    arrival_s: FloatArray
    input_tokens: IntArray
    output_tokens: IntArray
    bad_lines: list[int]
    kind: IntArray | None  # per request, a code into WORKLOAD_KINDS (-1: blank); None: no column
    # In time order, each request's line in the file and its content columns (None: absent).
    lines: list[int] = field(default_factory=list)
    sessions: list[str] | None = None
    turns: list[int] | None = None
    hashes: list[tuple[int, ...]] | None = None


def _kind_code(text: str) -> int:
    """'code' -> its index in WORKLOAD_KINDS; '' -> -1 (the workload's kind applies)."""
    name = text.strip()
    if not name:
        return -1
    if name not in WORKLOAD_KINDS:
        raise ValueError(f"kind {name!r} is not one of {', '.join(WORKLOAD_KINDS)}")
    return WORKLOAD_KINDS.index(name)


def _read_trace_rows(path: Path, reader: Any, max_model_len: int | None) -> TraceRows:
    header = tuple(h.strip() for h in next(reader, []))
    if set(_PLAIN) <= set(header):
        azure, names = False, _PLAIN
    elif set(_AZURE) <= set(header):
        azure, names = True, _AZURE
    else:
        raise InputError(
            f"{path}: trace header must name {','.join(_PLAIN)} or the Azure layout "
            f"{','.join(_AZURE)} (got {','.join(header) or 'an empty file'})"
        )
    i_time, i_in, i_out = (header.index(name) for name in names)
    i_kind = header.index("kind") if "kind" in header else None
    rows = TraceRows(azure, [], [], [], [], [], [] if i_kind is not None else None)
    extra = {name: header.index(name) for name in CONTENT_COLUMNS if name in header}
    if "session_id" in extra:
        rows.sessions = []
    if "turn" in extra:
        if "session_id" not in extra:
            raise InputError(f"{path}: a turn column needs a session_id column beside it")
        rows.turns = []
    if "hash_ids" in extra:
        rows.hashes = []
    for row in reader:
        if not row or all(not cell.strip() for cell in row):
            continue  # blank line
        line = reader.line_num
        if len(row) != len(header):
            rows.bad.append((line, f"{len(row)} columns, header has {len(header)}"))
            continue
        whole: float
        try:
            if azure:
                whole, frac = parse_azure_timestamp(row[i_time])
            else:
                whole, frac = float(row[i_time]), 0.0
                if not math.isfinite(whole) or whole < 0:
                    raise ValueError(f"arrival_s {whole} is not a time >= 0")
            n_in = _check_tokens(row[i_in], names[1])
            n_out = _check_tokens(row[i_out], names[2])
            if max_model_len is not None and n_in + n_out > max_model_len:
                raise ValueError(
                    f"{names[1]} {n_in} + {names[2]} {n_out} = {n_in + n_out} passes the "
                    f"context window of {max_model_len} tokens"
                )
            kind = _kind_code(row[i_kind]) if i_kind is not None else -1
            turn = parse_int(row[extra["turn"]]) if "turn" in extra else 0
            hashes = parse_hash_ids(row[extra["hash_ids"]]) if "hash_ids" in extra else ()
        except ValueError as exc:
            reason = str(exc)
            if "could not convert" in reason or "Invalid isoformat" in reason:
                reason = f"{names[0]} {row[i_time].strip()!r} is not a time"
            rows.bad.append((line, reason))
            continue
        rows.seconds.append(whole)
        rows.fractions.append(frac)
        rows.inputs.append(n_in)
        rows.outputs.append(n_out)
        if rows.kinds is not None:
            rows.kinds.append(kind)
        rows.lines.append(line)
        if rows.sessions is not None:
            rows.sessions.append(row[extra["session_id"]].strip())
        if rows.turns is not None:
            rows.turns.append(turn)
        if rows.hashes is not None:
            rows.hashes.append(hashes)
    return rows


CONTENT_COLUMNS = ("session_id", "turn", "hash_ids")


def parse_hash_ids(text: str) -> tuple[int, ...]:
    """A prompt's block hashes: whole numbers separated by spaces (or semicolons)."""
    try:
        return tuple(int(v) for v in text.replace(";", " ").split())
    except ValueError:
        raise ValueError(f"hash_ids {text.strip()!r} are not whole numbers") from None


def read_trace(
    path: str | Path,
    base_dir: Path | None = None,
    time_scale: float = 1.0,
    skip_bad_rows: bool = False,
    max_model_len: int | None = None,
) -> Trace:
    """Read a request trace CSV.

    Two layouts, told apart by the header: `arrival_s,input_tokens,output_tokens` (seconds, used
    as given) or the Azure LLM inference trace `TIMESTAMP,ContextTokens,GeneratedTokens`
    (datetimes, made relative to the earliest row); or a Mooncake trace (`.jsonl`:
    timestamp ms, input_length, output_length, hash_ids; workload/mooncake.py). Optional
    content columns: `session_id`, `turn`, `hash_ids` (workload/trace_content.py). Other
    columns are ignored. Times are
    multiplied by `time_scale` and rows sorted by time (stable). An optional `kind` column
    (chat, code, math, summarization; blank for the workload's own) gives each request the
    traffic kind its speculative acceptance is drawn for. Bad rows (wrong column count,
    non-numeric, tokens below 1, unparsable time, prompt + output past `max_model_len`, an
    unknown kind) raise
    an InputError naming their lines, unless `skip_bad_rows`: then they are dropped and their
    line numbers returned.
    """
    full = resolve_path(str(path), base_dir)
    try:
        if full.suffix == ".jsonl":
            rows = read_mooncake_rows(full, max_model_len)
        else:
            with full.open(newline="") as f:
                rows = _read_trace_rows(full, csv.reader(f), max_model_len)
    except OSError as exc:
        raise InputError(f"{full}: cannot read trace ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"{full}: not a readable CSV ({exc})") from None
    bad = rows.bad
    if bad and not skip_bad_rows:
        shown = "; ".join(f"line {line}: {why}" for line, why in bad[:MAX_BAD_ROWS_SHOWN])
        if len(bad) > MAX_BAD_ROWS_SHOWN:
            shown += f"; and {len(bad) - MAX_BAD_ROWS_SHOWN} more"
        lines = ", ".join(str(line) for line, _ in bad[:MAX_BAD_ROWS_SHOWN])
        lines += ", ..." if len(bad) > MAX_BAD_ROWS_SHOWN else ""
        raise InputError(
            f"{full}: {len(bad)} bad row{'s' if len(bad) > 1 else ''} at line"
            f"{'s' if len(bad) > 1 else ''} {lines} ({shown}); fix them or pass --skip-bad-rows"
        )
    if not rows.inputs:
        raise InputError(f"{full}: trace has no usable rows")
    if rows.azure:
        # whole seconds and fractions kept apart until after the subtraction (100 ns ticks)
        sec = np.asarray(rows.seconds, dtype=np.int64)
        frac = np.asarray(rows.fractions, dtype=np.float64)
        first = int(np.lexsort((frac, sec))[0])
        t = (sec - sec[first]).astype(np.float64) + (frac - frac[first])
    else:
        t = np.asarray(rows.seconds, dtype=np.float64)
    t = t * time_scale
    order = np.argsort(t, kind="stable")
    kinds = np.asarray(rows.kinds, dtype=np.int64)[order] if rows.kinds is not None else None
    idx = order.tolist()

    def ordered(values: list[Any] | None) -> list[Any] | None:
        return None if values is None else [values[i] for i in idx]

    return Trace(
        t[order],
        np.asarray(rows.inputs, dtype=np.int64)[order],
        np.asarray(rows.outputs, dtype=np.int64)[order],
        [line for line, _ in bad],
        kinds,
        [rows.lines[i] for i in idx],
        ordered(rows.sessions),
        ordered(rows.turns),
        ordered(rows.hashes),
    )
