"""Fuzzing bad input: mutated scenario files, CLI flags and request traces go through
`simulator.cli.app.main`. Every case ends with exit status 2 and exactly one line on stderr that
names the file (and, for a single mutation, the key it broke) — or, when the mutation happens
to be valid, with status 0 and a result. Never a traceback.

Mutated scenarios are first read with the loader; only small valid ones are simulated (a valid
`num_requests: 10**8` is the loader's business, not something to run in a test).
Cases that once failed live in tests/fuzz_corpus/ as explicit regression tests.
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from fuzz_stats import note_refused
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simulator
from simulator.cli.app import USER_ERRORS
from simulator.errors import one_line
from simulator.inputs.scenario import EmpiricalLengths, FixedLengths, TraceArrival
from tests.cli_helpers import run_cli

CORPUS = Path(__file__).resolve().parent / "fuzz_corpus"
# FRONTIER_HYPOTHESIS_EXAMPLES=2000 explores further (and randomly).
EXAMPLES = int(os.environ.get("FRONTIER_HYPOTHESIS_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=EXAMPLES or 60, deadline=None, derandomize=not EXAMPLES,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

BASE: dict[str, Any] = {
    "name": "fuzz base",
    "model": "llama-3.1-8b",
    "hardware": {"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": 1},
    "deployment": {
        "kind": "aggregated",
        "replicas": 1,
        "tensor_parallel": 1,
        "precision": {"weights": "bf16", "activations": "bf16", "kv_cache": "bf16"},
        "scheduler": {"max_num_seqs": 16, "max_num_batched_tokens": 2048, "chunked_prefill": True},
    },
    "workload": {
        "arrival": {"kind": "poisson", "rate_per_s": 4.0},
        "input_tokens": {"kind": "uniform", "min": 10, "max": 500},
        "output_tokens": {"kind": "fixed", "value": 20},
        "num_requests": 5,
        "seed": 0,
        "priorities": {"values": [0, 1], "weights": [1.0, 2.0]},
    },
    "slo": {"ttft_p99_s": 2.0},
    "limits": {"max_simulated_time_s": 1000.0},
}

WEIRD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 1, 3, 4096, 131072, 10**8, 10**9 + 1, 2**63, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.5, 1e-300, 1e308]),
    st.text(max_size=12),  # unicode, empty, whitespace
    st.sampled_from(["bf16", "fixed", "trace", "offline", "closed_loop", "poisson", "gamma",
                     "aggregated", "disaggregated", "h200-sxm", "qwen3-8b", "nan", "-1", "4.0"]),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(0, 3), max_size=2),
)
NOT_A_MAPPING = st.one_of(
    st.none(), st.integers(), st.text(max_size=20), st.lists(st.integers(), max_size=3),
    st.just([BASE]),
)


def key_paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside nested mappings and lists."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += key_paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += key_paths(v, (*prefix, i))
    return out


@st.composite
def mutated(draw: st.DrawFn) -> tuple[Any, tuple[Any, ...] | None]:
    """(document, the top-level key a single mutation touched, or None)."""
    if draw(st.integers(0, 11)) == 0:
        return draw(NOT_A_MAPPING), None
    doc = copy.deepcopy(BASE)
    count = draw(st.integers(1, 3))
    touched: tuple[Any, ...] | None = None
    for _ in range(count):
        if not isinstance(doc, dict) or not doc:
            break
        path = draw(st.sampled_from(key_paths(doc)))
        parent: Any = doc
        for k in path[:-1]:
            parent = parent[k]
        op = draw(st.sampled_from(["delete", "replace", "replace", "unknown"]))
        if op == "delete":
            parent.pop(path[-1])
        elif op == "replace":
            parent[path[-1]] = draw(WEIRD)
        else:
            target = parent if isinstance(parent, dict) else doc
            key = draw(st.text(min_size=1, max_size=10))
            while key in target:
                key += "\u0394"  # an existing key: make it unknown
            target[key] = draw(WEIRD)
            if target is doc:
                path = (key,)
        touched = path[:1]
    return doc, touched if count == 1 else None




def single_line(err: str) -> str:
    """The one line of stderr (str.splitlines: every Unicode line break counts)."""
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), err
    return lines[0]


def length_cap(spec: Any) -> int | None:
    """The largest length a spec can draw, or None when unbounded (normal, lognormal, a CSV)."""
    if isinstance(spec, FixedLengths):
        return spec.value
    if isinstance(spec, EmpiricalLengths) and spec.values and spec.max is None:
        return max(spec.values)
    return getattr(spec, "max", None)


def small_enough_to_run(loaded: simulator.LoadedScenario) -> bool:
    """A valid scenario the fuzz may simulate: few requests with bounded lengths."""
    s = loaded.scenario
    w = s.workload
    if isinstance(w.arrival, TraceArrival) or w.num_requests > 50:
        return False
    if getattr(s.deployment, "replicas", 1) > 8:
        return False
    for spec, cap in ((w.input_tokens, 32_768), (w.output_tokens, 4096)):
        top = length_cap(spec)
        if top is None or top > cap:
            return False
    return True


def verdict(path: Path, overrides: list[str]) -> str:
    """'invalid', 'run' (valid and small) or 'big' (valid, too large to simulate here)."""
    try:
        loaded = simulator.load_scenario(path, overrides)
    except USER_ERRORS:
        return "invalid"
    return "run" if small_enough_to_run(loaded) else "big"


def check_outcome(code: int, out: str, err: str, path: Path) -> str | None:
    """Status 0 with a result, or status 2 with one line naming the file; the line, if any."""
    if code == 0:
        result = json.loads(out)
        assert result["requests_completed"] + result["requests_dropped"] >= 0
        assert err == "" or all(line.startswith("warning") for line in err.splitlines())
        return None
    assert code == 2, (code, err)
    line = single_line(err)
    assert line.startswith(f"frontier: {path}: "), line
    note_refused("scenario", path.read_bytes() + line.encode())
    return line


# ------------------------------------------------------------------- mutated scenario files


@FUZZ
@given(case=mutated())
def test_mutated_scenarios_end_in_one_line_or_a_result(
    case: tuple[Any, tuple[Any, ...] | None], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    doc, touched = case
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    kind = verdict(path, [])
    if kind == "big":
        return  # valid, and the loader (schema + engine checks) has said so
    code, out, err = run_cli(["simulate", str(path), "--json"], capsys)
    line = check_outcome(code, out, err, path)
    if kind == "invalid":
        assert line is not None  # the CLI refuses what the loader refuses
        if touched is not None and isinstance(doc, dict):
            # one mutation: the message names the part of the file it broke
            top = one_line(str(touched[0]))  # a key with control characters shows escaped
            assert line.startswith(f"frontier: {path}: {top}") or f" {top}" in line, line


@FUZZ
@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_as_a_scenario(
    data: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "junk.yaml"
    path.write_bytes(data)
    code, out, err = run_cli(["simulate", str(path), "--json"], capsys)
    assert code == 2 and out == ""
    assert single_line(err).startswith(f"frontier: {path}: ")


# ------------------------------------------------------------------------------ CLI flags

SET_PATHS = sorted(
    {".".join(str(p) for p in path) for path in key_paths(BASE) if all(isinstance(p, str)
                                                                      for p in path)}
)


@st.composite
def set_flags(draw: st.DrawFn) -> list[str]:
    flags: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.one_of(st.sampled_from(SET_PATHS), st.text(max_size=15)))
        value = draw(
            st.one_of(
                st.text(max_size=12),
                WEIRD.map(lambda v: yaml.safe_dump(v, default_flow_style=True).strip()
                          .removesuffix("...").strip()),
            )
        )
        sep = draw(st.sampled_from(["=", "=", "", "=="]))
        flags += ["--set", f"{key}{sep}{value}"]
    return flags


@FUZZ
@given(
    flags=set_flags(),
    extra=st.lists(st.sampled_from(["--check", "--skip-bad-rows"]), max_size=2, unique=True),
)
def test_set_overrides_end_in_one_line_or_a_result(
    flags: list[str], extra: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(BASE))
    overrides = flags[1::2]
    if "\x00" in "".join(flags):
        return  # not something a shell can pass
    kind = verdict(path, overrides)
    if kind == "big":
        return
    code, out, err = run_cli(["simulate", str(path), *flags, "--json", *extra], capsys)
    line = check_outcome(code, out, err, path)
    assert (line is None) == (kind == "run"), (kind, line)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["simulate"], "Missing argument 'SCENARIO'"),
        (["simulate", "{base}", "--bogus"], "No such option"),
        (["simulate", "{base}", "--set"], "requires an argument"),
        (["simulate", "{base}", "--set", "workload.num_requests"], "key.path=value"),
        (["simulate", "{base}", "--set", "=3"], "key.path=value"),
        (["simulate", "{base}", "--set", "workload..seed=1"], "key.path=value"),
        (["simulate", "{base}", "--set", "model.name=x"], "not a mapping"),
        (["simulate", "{base}", "--set", "workload.seed=[1"], "not valid YAML"),
        (["simulate", "{tmp}"], "is a directory"),
        (["simulate", "{tmp}/missing.yaml"], "scenario file not found"),
        (["simulate", "{base}", "--timeseries", "{tmp}/no/such/ts.csv"], "cannot write"),
        (["explain", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "0"], "--tp"),
        (["no-such-command"], "No such command"),
    ],
)
def test_bad_flags_end_in_single_line(
    argv: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(BASE))
    args = [a.format(base=base, tmp=tmp_path) for a in argv]
    code, out, err = run_cli(args, capsys)
    assert code == 2 and out == ""
    assert needle in single_line(err)


# ---------------------------------------------------------------------- traces with bad rows

BAD_ROWS = (
    "x,10,10",  # time not a number
    "-1,10,10",  # negative time
    "nan,10,10",  # not a finite time
    "1.0,0,10",  # zero tokens
    "1.0,10,-3",
    "1.0,ü,10",  # unicode that is no number
    "1.0,2.5,10",  # not a whole number
    "1.0,10",  # a column short
    "1.0,10,10,extra",  # a column too many
    "1.0,131000,100",  # 131100 tokens pass llama-3.1-8b's 131072-token context window
)


@FUZZ
@given(
    good=st.lists(st.tuples(st.floats(0, 100), st.integers(1, 400), st.integers(1, 30)),
                  min_size=1, max_size=8),
    bad=st.lists(st.tuples(st.integers(0, 8), st.sampled_from(BAD_ROWS)), min_size=1,
                 max_size=6),
)
def test_trace_with_bad_rows_is_refused_or_skipped_on_request(
    good: list[tuple[float, int, int]], bad: list[tuple[int, str]], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = [f"{t:.6f},{i},{o}" for t, i, o in good]
    for at, row in bad:
        rows.insert(min(at, len(rows)), row)
    bad_lines = [n + 2 for n, row in enumerate(rows) if row in BAD_ROWS]  # header is line 1
    (tmp_path / "trace.csv").write_text("arrival_s,input_tokens,output_tokens\n"
                                        + "\n".join(rows) + "\n")
    scenario = copy.deepcopy(BASE)
    w = scenario["workload"]
    del w["input_tokens"], w["output_tokens"]
    w["arrival"] = {"kind": "trace", "path": "trace.csv"}
    w["num_requests"] = 100
    path = tmp_path / "trace-scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))

    code, out, err = run_cli(["simulate", str(path), "--json"], capsys)
    assert code == 2 and out == ""
    line = single_line(err)
    n = len(bad_lines)
    assert f"{n} bad row{'s' if n > 1 else ''} at line" in line
    assert f"line{'s' if n > 1 else ''} {bad_lines[0]}" in line
    assert "trace.csv" in line and "--skip-bad-rows" in line

    code, out, err = run_cli(["simulate", str(path), "--json", "--skip-bad-rows"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["requests_completed"] + result["requests_dropped"] == len(good)
    (warning,) = [w for w in result["warnings"] if "skipped" in w]
    assert f"skipped {n} bad row" in warning and str(bad_lines[0]) in warning


# ---------------------------------------------------------------------- regression corpus


def corpus_header(path: Path) -> dict[str, str]:
    """`# key: value` comment lines at the top of a corpus file."""
    head: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"#\s*(expect|stderr|args|json):\s*(.*)$", line)
        if m:
            head[m.group(1)] = m.group(2).strip()
    return head


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.yaml")), ids=lambda p: p.stem)
def test_fuzz_corpus(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    head = corpus_header(path)
    extra = head.get("args", "").format(tmp=tmp_path).split()
    code, out, err = run_cli(["simulate", str(path), "--json", *extra], capsys)
    assert code == int(head["expect"]), err
    if code == 2:
        line = single_line(err)
        assert line.startswith(f"frontier: {path}: ") or extra, line
        assert head["stderr"] in line, line
    else:
        assert "Traceback" not in err and "Warning" not in err, err
        result = json.loads(out)
        for pair in head.get("json", "").split():
            key, value = pair.split("=")
            assert result[key] == int(value), (key, result[key])
