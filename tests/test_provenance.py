"""Provenance of every shipped calibration number: each efficiency, overhead and engine-style
value has a status (datasheet, kernel-fit, silicon-fit, assumed) and, when fitted, the data it
was fitted to; and no fitted value names data that a validation row scores (circularity), except
the in-sample cases listed in IN_SAMPLE_OF with their reason.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator.engines.style import STYLES_PATH, load_engine_styles
from simulator.errors import InputError
from simulator.hardware.profile import CALIBRATION_BLOCKS, load_profile_file, profile_paths
from simulator.hardware.provenance import FITTED, ProvenanceEntry, entry_for, numeric_paths

REPO = Path(__file__).resolve().parents[1]
VALIDATION = REPO / "simulator" / "validation"
REFERENCE = REPO.parent / "shared" / "reference"
PROFILES = sorted((REPO / "hardware_profiles").glob("*.yaml"))

# Validation rows that score data a shipped value was fitted to: (file, profile or style, key
# path) -> the validation row ids it is in-sample for. The validation report should leave these
# rows out of its headline errors (they cannot test the fit). Values are not changed here.
ARTIFACT = "fitted to the DistServe artifact's OPT-13B ShareGPT runs at 1 req/s, which are points "
FIG8 = ARTIFACT + "of the Figure 8(a) experiment disagg-03/disagg-03-high score (same runs' folder)"
IN_SAMPLE_OF: dict[tuple[str, str, str], tuple[frozenset[str], str]] = {
    ("engine_styles.yaml", "vllm-0.2", "cpu_step_us"): (
        frozenset({"disagg-03", "disagg-03-high"}), FIG8),
    ("engine_styles.yaml", "vllm-0.2", "request_ingest_us"): (
        frozenset({"disagg-03", "disagg-03-high"}), FIG8),
    ("engine_styles.yaml", "distserve", "cpu_step_us"): (
        frozenset({"disagg-03", "disagg-03-high"}), FIG8),
    ("engine_styles.yaml", "distserve", "request_ingest_us"): (
        frozenset({"disagg-03", "disagg-03-high"}), FIG8),
}

# What some validation rows score beyond their CSV `source` and id, where that data is named
# differently: Figure 8's OPT-13B ShareGPT points are the artifact's measured runs (its
# alignment ground truth, one file per system and rate), and the rows replay those runs' trace.
SCORED_DATA: dict[str, list[dict[str, Any]]] = {
    rid: [{"source": "LLMServe/DistServe",
           "rows": ["simdistserve/benchmarks/alignment/data-ground-truth/opt-13b-sharegpt/"]}]
    for rid in ("disagg-03", "disagg-03-high")
}


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _documents() -> Iterator[tuple[str, str, dict[str, Any], list[str]]]:
    """(file, owner, its raw mapping, key paths of its numbers needing provenance)."""
    for path in PROFILES:
        doc = _yaml(path)
        yield path.name, doc["name"], doc, numeric_paths(doc, CALIBRATION_BLOCKS)
    for name, body in _yaml(STYLES_PATH).items():
        yield STYLES_PATH.name, name, body, numeric_paths(body)


DOCS = list(_documents())


def _fitted() -> Iterator[tuple[tuple[str, str, str], ProvenanceEntry]]:
    for file, owner, doc, _ in DOCS:
        for key, raw in (doc.get("provenance") or {}).items():
            yield (file, owner, key), ProvenanceEntry.model_validate(raw)


# ------------------------------------------------------------------------------ coverage


def test_every_value_has_provenance() -> None:
    missing = [f"{file} {owner}: {key}" for file, owner, doc, keys in DOCS for key in keys
               if entry_for(doc.get("provenance") or {}, key) is None]
    assert not missing, "values without a provenance entry:\n" + "\n".join(missing)


def test_no_entry_for_an_absent_value() -> None:
    """An entry names a value the file holds (or a mapping holding some): no stale entries."""
    stale = []
    for file, owner, doc, keys in DOCS:
        for key in doc.get("provenance") or {}:
            if not any(k == key or k.startswith(key + ".") for k in keys):
                stale.append(f"{file} {owner}: {key}")
    assert not stale, "provenance for values the file does not hold:\n" + "\n".join(stale)


def test_shipped_files_load() -> None:
    for path in PROFILES:
        load_profile_file(path)
    assert load_engine_styles()


# How a fitted_to row names rows of a reference file: "gpu | benchmark | size" for the kernel
# and GPU microbenchmarks; "engine | concurrency" (every run of that engine at that
# concurrency) for the measured serving runs.
ROW_NAMES: dict[str, Callable[[dict[str, str]], str]] = {
    "reference/silicon_calibration.csv": lambda r: f"{r['backend']} | {r['concurrency']}",
}


def _microbenchmark_row(r: dict[str, str]) -> str:
    return f"{r['gpu']} | {r['benchmark']} | {r['size']}"


def test_reference_rows_exist() -> None:
    """fitted_to rows of a shared reference file name real rows (ROW_NAMES)."""
    if not REFERENCE.is_dir():
        pytest.skip("no ../shared/reference in this checkout")
    tables: dict[str, set[str]] = {}
    bad = []
    for where, entry in _fitted():
        for fit in entry.fitted_to or []:
            if not fit.source.startswith("reference/"):
                continue
            path = REFERENCE / fit.source.removeprefix("reference/")
            if not path.is_file():
                bad.append(f"{where}: no file {fit.source}")
                continue
            if fit.source not in tables:
                name = ROW_NAMES.get(fit.source, _microbenchmark_row)
                with path.open(newline="") as fh:
                    tables[fit.source] = {name(r) for r in csv.DictReader(fh)}
            bad += [f"{where}: {fit.source} has no row {row!r}"
                    for row in fit.rows if row not in tables[fit.source]]
    assert not bad, "\n".join(bad)


# ------------------------------------------------------------------------------ circularity


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


def _overlap(a: str, b: str) -> bool:
    """The same row, or one names a folder (ending in '/') the other lies in."""
    a, b = _norm(a), _norm(b)
    return a == b or (a.endswith("/") and b.startswith(a)) or (b.endswith("/") and a.startswith(b))


def _trace_sources(doc: Any) -> Iterator[str]:
    if isinstance(doc, dict):
        arrival = doc.get("arrival")
        if isinstance(arrival, dict) and arrival.get("kind") == "trace":
            yield str(arrival["path"])
        for v in doc.values():
            yield from _trace_sources(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _trace_sources(v)


def _validation_data() -> dict[str, list[dict[str, Any]]]:
    """Each validation row id -> the data it scores: its source (the row itself), the source
    cells of the trace files its setup replays, and SCORED_DATA."""
    from simulator.validation.catalog import sources

    data: dict[str, list[dict[str, Any]]] = {}
    for src in sources():
        for r in src.rows:
            data[r.id] = [{"source": r.source, "rows": [r.id]}]
        # the file's own setups (goodputs, sweep sides, speculative blocks) and the rows that
        # run them: every such row may replay any trace of the file (conservative)
        row_ids = [r.id for r in src.rows
                   if r.goodput_ratio or r.sweep_ratio or r.speculative_setup]
        doc = [
            {n: g.model_dump() for n, g in src.goodputs.items()},
            src.sweep.model_dump() if src.sweep else {},
            [r.speculative_setup.model_dump() for r in src.rows if r.speculative_setup],
        ]
        for trace in set(_trace_sources(doc)):
            with (VALIDATION / trace).open(newline="") as fh:
                cell = next(csv.DictReader(fh)).get("source") or ""
            repo, _, rest = cell.partition(" ")
            for rid in row_ids:
                data[rid].append({"source": repo, "rows": [rest.split(" ", 1)[0]]})
    for rid, extra in SCORED_DATA.items():
        data[rid].extend(extra)
    return data


def _clashes() -> dict[tuple[str, str, str], set[str]]:
    data = _validation_data()
    found: dict[tuple[str, str, str], set[str]] = {}
    for where, entry in _fitted():
        for fit in entry.fitted_to or []:
            for rid, scored in data.items():
                named = any(_norm(row) == _norm(rid) for row in fit.rows)
                same = any(
                    _norm(fit.source) == _norm(d["source"])
                    and (not fit.rows or not d["rows"]
                         or any(_overlap(a, b) for a in fit.rows for b in d["rows"]))
                    for d in scored
                )
                if named or same:
                    found.setdefault(where, set()).add(rid)
    return found


def test_no_fitted_value_names_a_validation_row() -> None:
    """A fitted value's data is not what a validation row scores, or the row is listed as
    in-sample (IN_SAMPLE_OF) with its reason; the allow-list holds no stale entry."""
    found = _clashes()
    allowed = {k: v[0] for k, v in IN_SAMPLE_OF.items()}
    assert found == allowed, (
        "fitted values against the validation rows scoring their data (found vs allowed):\n"
        + "\n".join(f"{k}: found {sorted(found.get(k, set()))}, allowed "
                    f"{sorted(allowed.get(k, set()))}" for k in sorted(set(found) | set(allowed))
                    if found.get(k) != allowed.get(k))
    )


def test_in_sample_entries_are_fitted_and_say_why() -> None:
    entries = dict(_fitted())
    for key, (rows, reason) in IN_SAMPLE_OF.items():
        assert entries[key].status in FITTED and rows and reason.strip()


def test_circularity_check_catches_a_named_row(tmp_path: Path) -> None:
    """The check itself: a fitted value naming a validation row id, or its source, is caught."""
    entry = ProvenanceEntry.model_validate({
        "status": "silicon-fit", "note": "x",
        "fitted_to": [{"source": "anything", "rows": ["disagg-02"]},
                      {"source": "DistServe (OSDI 2024; arXiv 2401.09670)"}]})
    data = _validation_data()
    hits = {rid for fit in entry.fitted_to or [] for rid, scored in data.items()
            if rid in fit.rows or any(_norm(fit.source) == _norm(d["source"]) for d in scored)}
    assert {"disagg-00", "disagg-02", "disagg-03-high"} <= hits


# ------------------------------------------------------------------------------ the loaders


def _profile_with(tmp_path: Path, provenance: Any) -> Path:
    raw = _yaml(profile_paths()["h100-sxm"])
    raw["provenance"] = provenance
    path = tmp_path / "h100-sxm.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize(
    ("provenance", "message"),
    [
        ({"efficiency.gemm_compute_fracton": {"status": "assumed", "note": "x"}},
         "did you mean 'efficiency.gemm_compute_fraction'"),
        ({"compute.dense_tflops.bf16": {"status": "datasheet", "note": "x"}}, "names no value"),
        ({"efficiency.spread": {"status": "kernel-fit", "note": "x"}}, "needs fitted_to"),
        ({"efficiency.spread": {"status": "datasheet", "note": "x",
                                "fitted_to": [{"source": "s"}]}}, "takes no fitted_to"),
        ({"efficiency.spread": {"status": "guessed", "note": "x"}}, "status"),
        ({"efficiency.spread": {"status": "assumed", "note": "x", "extra": 1}}, "extra"),
        ({"efficiency.spread": {"status": "assumed", "note": ""}}, "note"),
    ],
)
def test_bad_profile_provenance_is_one_line(tmp_path: Path, provenance: Any, message: str) -> None:
    with pytest.raises(InputError) as exc:
        load_profile_file(_profile_with(tmp_path, provenance))
    text = str(exc.value)
    assert "\n" not in text and "h100-sxm.yaml" in text and "provenance" in text
    assert message in text


def test_provenance_moves_no_value(tmp_path: Path) -> None:
    raw = _yaml(profile_paths()["h100-sxm"])
    del raw["provenance"]
    path = tmp_path / "h100-sxm.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert load_profile_file(path) == load_profile_file(profile_paths()["h100-sxm"])


def test_bad_style_provenance_is_one_line(tmp_path: Path) -> None:
    body = _yaml(STYLES_PATH)["vllm"]
    body["provenance"] = {"cpu_stepus": {"status": "assumed", "note": "x"}}
    path = tmp_path / "styles.yaml"
    path.write_text(yaml.safe_dump({"mine": body}))
    with pytest.raises(InputError) as exc:
        load_engine_styles(path)
    text = str(exc.value)
    assert "\n" not in text and "mine" in text and "did you mean 'cpu_step_us'" in text
