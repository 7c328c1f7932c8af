"""What start-up leaves out changes nothing: numpy's percentiles without numpy.ma give numpy's
figures, and `frontier simulate` neither loads numpy.ma nor replaces anything of the standard
library or of its dependencies to start faster.

(Start-up time itself is a benchmark figure, `frontier bench`, never a timed test.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

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


def _run(code: str, **env: str) -> str:
    full = {**os.environ, "PYDANTIC_DISABLE_PLUGINS": "__all__", **env}
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          text=True, cwd=ROOT, env=full).stdout


SCENARIO = json.dumps({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
                       "workload": {"arrival": {"kind": "poisson", "rate_per_s": 5.0},
                                    "input_tokens": {"kind": "fixed", "value": 300},
                                    "output_tokens": {"kind": "fixed", "value": 20},
                                    "num_requests": 30, "seed": 3}})


def test_simulate_loads_no_numpy_ma_and_leaves_the_libraries_as_they_are(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.json"
    path.write_text(SCENARIO)
    out = _run(
        "import sys, dataclasses, typing; from simulator.cli.app import main; "
        f"main(['simulate', {str(path)!r}]); "
        "import simpy, importlib.metadata as md; "
        "print('numpy.ma' in sys.modules, 'exec' in vars(dataclasses), "
        "'compile' in vars(typing), simpy.__version__ == md.version('simpy'), "
        "md.__spec__ is not None and md.__spec__.origin.endswith('__init__.py'))"
    )
    assert out.splitlines()[-1] == "False False False True True"
