"""Which reader a measurement file needs, told from its extension and keys (or `--format`),
and the one entry point that reads many files into MeasuredRuns, failing on the first bad one
before anything is scored."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from simulator.errors import InputError
from simulator.measured.aiperf import is_aiperf, read_aiperf
from simulator.measured.bench_json import is_sglang, is_vllm, read_sglang, read_vllm
from simulator.measured.run import MeasuredRun
from simulator.measured.silicon import looks_like_silicon, read_silicon

READERS: dict[str, Callable[[Path], list[MeasuredRun]]] = {
    "silicon": read_silicon,
    "vllm": read_vllm,
    "aiperf": read_aiperf,
    "sglang": read_sglang,
}
FORMATS = tuple(READERS)


def detect_format(path: Path) -> str:
    """The file's format: a CSV with the silicon columns, JSONL from SGLang, or a JSON object
    whose keys are aiperf's, vLLM's or SGLang's."""
    valid = "silicon CSV, vllm bench serve JSON, aiperf profile_export_aiperf.json, sglang JSONL"
    suffix = path.suffix.lower()
    if suffix == ".csv":
        with path.open(newline="") as fh:
            header = next(csv.reader(fh), [])
        if looks_like_silicon(header):
            return "silicon"
        raise InputError(f"{path}: a CSV without the silicon calibration columns (valid "
                         f"formats: {valid}; or give --format)")
    if suffix == ".jsonl":
        return "sglang"
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}; truncated "
                         f"or malformed file?)") from None
    if isinstance(data, dict):
        if is_aiperf(data):
            return "aiperf"
        if is_vllm(data):
            return "vllm"
        if is_sglang(data):
            return "sglang"
    raise InputError(f"{path}: cannot tell the format from its keys (valid formats: {valid}; "
                     f"or give --format)")


def read_measurements(paths: Sequence[Path], fmt: str | None = None) -> list[MeasuredRun]:
    """Every run of every file, in file then row order; one InputError for the first problem."""
    if fmt is not None and fmt not in READERS:
        raise InputError(f"--format {fmt!r} is not one of: {', '.join(FORMATS)}")
    runs: list[MeasuredRun] = []
    for path in paths:
        if not path.is_file():
            raise InputError(f"{path}: no such file")
        try:
            runs += READERS[fmt or detect_format(path)](path)
        except UnicodeDecodeError:
            raise InputError(f"{path}: not a text file (not UTF-8)") from None
        except OSError as exc:
            raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    return runs
