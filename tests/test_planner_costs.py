"""Costs people compare (issue 31, item 5): per hour, per request and per million tokens, by
hand; a price for a GPU that is no profile is refused with one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.errors import InputError
from simulator.sweep.cost import gpu_prices, serving_costs
from tests.cli_helpers import run_cli


def test_serving_costs_by_hand() -> None:
    """$16/h serving 20 req/s of 1000 tokens in and 200 out:
    per request 16 / 3600 / 20 = $0.000222; per million output tokens 16 / 3600 / (20 x 200)
    x 1e6 = $1.111; input 16 / 3600 / 20000 x 1e6 = $0.2222; blended over 1200 tokens a
    request 16 / 3600 / 24000 x 1e6 = $0.1852."""
    c = serving_costs(16.0, 20.0, 1000.0, 200.0)
    assert c["usd_per_hour"] == 16.0
    assert c["usd_per_request"] == pytest.approx(16 / 3600 / 20)
    assert c["usd_per_million_output_tokens"] == pytest.approx(1.1111, rel=1e-4)
    assert c["usd_per_million_input_tokens"] == pytest.approx(0.22222, rel=1e-4)
    assert c["usd_per_million_tokens_blended"] == pytest.approx(0.18519, rel=1e-4)


def test_nothing_served_has_only_an_hourly_cost() -> None:
    assert serving_costs(16.0, 0.0, 1000.0, 200.0) == {"usd_per_hour": 16.0}


def test_a_price_for_an_unknown_gpu_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FRONTIER_GPU_PRICES", raising=False)
    assert gpu_prices(["h100-sxm=2"]) == {"h100-sxm": 2.0}
    with pytest.raises(InputError, match=r"unknown GPU 'h100'.*known: .*h100-sxm"):
        gpu_prices(["h100=2"])
    monkeypatch.setenv("FRONTIER_GPU_PRICES", "b20=5")
    with pytest.raises(InputError, match="FRONTIER_GPU_PRICES b20=5: unknown GPU 'b20'"):
        gpu_prices([])


def test_cli_unknown_gpu_price_is_one_line_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "points").mkdir()
    code, out, err = run_cli(["recommend", str(tmp_path), "--slo", "ttft_p99_s=1",
                              "--gpu-price", "h100=2"], capsys)
    assert code == 2
    lines = [ln for ln in (out + err).splitlines() if ln.strip()]
    assert len(lines) == 1 and "unknown GPU 'h100'" in lines[0]
