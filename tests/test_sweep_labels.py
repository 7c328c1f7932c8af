"""Short labels for mapping-valued axes in tables and legends, and the SLO and cost in the
sweep report's summary (issue 31, item 6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.report import write_sweep_report
from simulator.sweep.recommend import describe
from simulator.sweep.table import value_label
from tests.cli_helpers import run_cli
from tests.sweep_helpers import small_sweep, write_sweep


@pytest.mark.parametrize(("value", "label"), [
    ({"weights": "fp8", "activations": "fp8", "kv_cache": "fp8"}, "fp8"),
    ({"weights": "nvfp4", "activations": "fp8", "kv_cache": "bf16"}, "w=nvfp4 a=fp8 kv=bf16"),
    ({"weights": "fp8", "activations": None, "kv_cache": "fp8"}, "fp8"),
    ({"method": "eagle3", "num_speculative_tokens": 3, "acceptance_length": 2.5},
     "eagle3 k=3 tau=2.5"),
    (None, "none"), (0.123456, "0.1235"), (4, "4"), ("bf16", "bf16"),
])
def test_value_labels(value: object, label: str) -> None:
    assert value_label(value) == label


def test_recommend_describes_mapping_axes_by_their_labels() -> None:
    row = {"deployment.precision": {"weights": "fp8", "activations": "fp8", "kv_cache": "fp8"},
           "deployment.speculative": None}
    assert describe(row, list(row)) == "precision=fp8, speculative=none"


def test_sweep_report_states_the_slo_and_how_many_points_meet_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = small_sweep()  # slo: ttft_p99_s 2.0
    out = tmp_path / "out"
    code, _, err = run_cli(["sweep", str(write_sweep(tmp_path / "s.yaml", data)), "--out",
                            str(out), "--no-report", "--gpu-price", "h100-sxm=2"], capsys)
    assert code == 0, err
    html = write_sweep_report(out, tmp_path / "r.html", breakdown=False).read_text()
    assert "ttft_s.p99 &lt;= 2 s (met by " in html
    assert "per million output tokens at the points&#x27; loads" in html
