"""What start-up leaves out or caches changes nothing: numpy's percentiles without numpy.ma, the
CLI's bytecode cache for dataclass methods and forward references, and simpy's version.

(Start-up time itself is a benchmark figure, `frontier bench`, never a timed test.)"""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
import typing
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator import code_cache
from simulator.metrics.summary import linear_percentiles

ROOT = Path(__file__).resolve().parent.parent

# Floats with many ties, zeros of both signs and infinities: where interpolation can go wrong.
values = st.lists(
    st.one_of(st.floats(allow_nan=False, width=64), st.sampled_from([0.0, -0.0, 1.0, 2.5])),
    min_size=1, max_size=60,
)


@given(values, st.lists(st.sampled_from([0, 1, 10, 50, 90, 99, 99.9, 100]), min_size=1,
                        max_size=4))
def test_linear_percentiles_equal_numpy_bit_for_bit(xs: list[float], qs: list[float]) -> None:
    arr = np.array(xs, dtype=np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf inside numpy's own interpolation
        want = np.percentile(arr, qs)
    got = linear_percentiles(arr, tuple(qs))
    assert np.array(got).tobytes() == np.asarray(want, dtype=np.float64).tobytes()
    assert arr.tobytes() == np.array(xs, dtype=np.float64).tobytes()  # input untouched


def test_linear_percentiles_are_nan_where_a_value_is_nan() -> None:
    # np.percentile([1, nan, 3], 50) is nan: a NaN sorts last and poisons every quantile
    assert all(np.isnan(linear_percentiles(np.array([1.0, np.nan, 3.0]), (0, 50))))


def test_linear_percentiles_of_hand_values() -> None:
    # n = 5 values 10..50: p90 sits at (5 - 1) * 0.9 = 3.6, between 40 and 50 with weight
    # 0.6 >= 0.5, so numpy computes 50 - (50 - 40) * (1 - 0.6) = 46.0; p50 at index 2 -> 30
    got = linear_percentiles(np.array([50.0, 10.0, 40.0, 20.0, 30.0]), (50, 90, 100))
    assert got == [30.0, 46.0, 50.0]


@pytest.fixture
def cache(tmp_path: Path) -> code_cache.CodeCache:
    return code_cache.CodeCache(str(tmp_path / "c.marshal"))


def test_cached_code_is_the_code_python_compiles(cache: code_cache.CodeCache) -> None:
    # dataclasses compile their methods with exec() in a module without __future__ imports:
    # the cache must not add this module's `annotations` flag (annotations would turn to text)
    text = "def __create_fn__(x):\n def f(self, a: x) -> None:\n  self.a = a\n return f"
    plain: dict[str, typing.Any] = {}
    exec(compile(text, "<string>", "exec", dont_inherit=True), {}, plain)
    cached: dict[str, typing.Any] = {}
    exec(cache.compile(text, "exec"), {}, cached)
    f, g = plain["__create_fn__"](int), cached["__create_fn__"](int)
    assert f.__annotations__ == g.__annotations__ == {"a": int, "return": None}
    assert f.__code__.co_code == g.__code__.co_code
    assert cache.compile(text, "exec") is cache.compile(text, "exec")


def test_cache_round_trips_through_its_file(cache: code_cache.CodeCache,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    code = cache.compile("1 + 2", "eval")
    cache.save()
    again = code_cache.CodeCache(cache.path)
    assert eval(again.compile("1 + 2", "eval")) == 3
    assert again.codes is not None and again.codes[("eval", "1 + 2")].co_code == code.co_code
    assert not again.added  # a hit compiles nothing and so writes nothing


def test_cache_writes_nothing_where_python_writes_no_bytecode(
    cache: code_cache.CodeCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    cache.compile("x", "eval")
    cache.save()
    assert not os.path.exists(cache.path)


@pytest.mark.parametrize("content", [b"", b"not marshal", marshal.dumps([1, 2]),
                                     marshal.dumps({("eval", "x"): "not code"})])
def test_an_unreadable_cache_file_is_ignored(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "c.marshal"
    path.write_bytes(content)
    c = code_cache.CodeCache(str(path))
    assert eval(c.compile("6 * 7", "eval")) == 42


def test_a_full_cache_keeps_what_this_process_used(
    cache: code_cache.CodeCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(code_cache, "MAX_ENTRIES", 2)
    stale = {("eval", str(i)): compile(str(i), "<string>", "eval") for i in range(5)}
    Path(cache.path).write_bytes(marshal.dumps(stale))
    cache.compile("7", "eval")
    cache.save()
    assert set(code_cache._read(cache.path)) == {("eval", "7")}


def _run(code: str, **env: str) -> str:
    full = {**os.environ, "PYDANTIC_DISABLE_PLUGINS": "__all__", **env}
    full.pop("PYTHONDONTWRITEBYTECODE", None)  # the cache is written as bytecode is
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          text=True, cwd=ROOT, env=full).stdout


SCENARIO = json.dumps({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
                       "workload": {"arrival": {"kind": "poisson", "rate_per_s": 5.0},
                                    "input_tokens": {"kind": "fixed", "value": 300},
                                    "output_tokens": {"kind": "fixed", "value": 20},
                                    "num_requests": 30, "seed": 3}})


def test_results_with_the_code_cache_equal_those_without(tmp_path: Path) -> None:
    """Cold cache, warm cache and no cache: the same result JSON, byte for byte."""
    path = tmp_path / "s.json"
    path.write_text(SCENARIO)
    code = (
        "import sys; from simulator.cli.app import main; "
        f"main(['simulate', {str(path)!r}, '--json'])"
    )
    cold = _run(code, PYTHONPYCACHEPREFIX=str(tmp_path / "pyc"))
    warm = _run(code, PYTHONPYCACHEPREFIX=str(tmp_path / "pyc"))
    off = _run(code, FRONTIER_NO_CODE_CACHE="1")
    assert list((tmp_path / "pyc").rglob("stdlib_code.*.marshal"))  # the cold run wrote it
    assert cold == warm == off


def test_simulate_loads_neither_numpy_ma_nor_importlib_metadata_and_simpy_knows_its_version(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.json"
    path.write_text(SCENARIO)
    out = _run(
        "import sys; from simulator.cli.app import main; "
        f"main(['simulate', {str(path)!r}]); "
        "loaded = [m for m in ('numpy.ma', 'importlib.metadata') if m in sys.modules]; "
        "import simpy, importlib.metadata as md; "
        "print(loaded, simpy.__version__ == md.version('simpy'))"
    )
    assert out.splitlines()[-1] == "[] True"


def test_install_routes_dataclasses_and_forward_refs_through_the_cache() -> None:
    out = _run(
        "import simulator.cli, dataclasses, typing; from simulator import code_cache as c; "
        "dataclasses.make_dataclass('P', [('x', int)], frozen=True); typing.ForwardRef('int'); "
        "print(sorted({m for m, _ in c._installed.codes}))"
    )
    assert out.strip() == "['eval', 'exec']"
