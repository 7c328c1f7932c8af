"""How many rounds of a closed loop its start-up burst sets TTFT for (an engine style's
closed_loop_burst_rounds, a deployment overhead's burst_rounds; docs/closed-loops.md): the
weighting by hand, the closed form's first wave growing in proportion, and `frontier
calibrate --fit burst` recovering a value from figures made with it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import simulator
from simulator.errors import InputError
from simulator.measured.first_round import with_first_round
from tests.test_calibrate import _row, fit_one_kind

KEY = "closed_loop_burst_rounds"
PARAM = f"vllm.{KEY}"
TRUE_ROUNDS = 3.5  # a value away from vLLM's shipped 2.4


def test_the_burst_stands_for_its_rounds_by_hand() -> None:
    """Two clients (a burst of 2 TTFTs of 3 s) and four later requests of 1 s: 6 requests.
    One round: (2 x 3 + 4 x 1) / 6 = 10/6. Two rounds: the burst's mean for 4 requests, the
    later mean for the other 2: (2 x 6 + 2 x 1) / 6 = 14/6. Three rounds (all 6) and more:
    3 s, the burst's mean."""
    later, burst = np.ones(4), np.full(2, 3.0)
    assert with_first_round(later, burst) == pytest.approx(10 / 6, rel=1e-15)
    assert with_first_round(later, burst, 2.0) == pytest.approx(14 / 6, rel=1e-15)
    assert with_first_round(later, burst, 3.0) == pytest.approx(3.0, rel=1e-15)
    assert with_first_round(later, burst, 7.0) == pytest.approx(3.0, rel=1e-15)


def _closed_loop(rounds: float | None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
        "deployment": {"tensor_parallel": 1, "engine": "vllm"},
        "workload": {"arrival": {"kind": "closed_loop", "concurrency": 32},
                     "input_tokens": {"kind": "fixed", "value": 2048},
                     "output_tokens": {"kind": "fixed", "value": 256},
                     "num_requests": 32 * 21, "seed": 1},
    }
    if rounds is not None:
        doc["deployment"]["overhead"] = {"burst_rounds": rounds}
    return doc


def test_the_first_wave_weighs_in_proportion_to_its_rounds() -> None:
    """The estimate's mean TTFT is (1 - s) steady + s wave with s = rounds x C / n: linear in
    the rounds, so one more round adds the same each time; without an overhead the style's
    value holds (vLLM's fitted 2.4 rounds: 1.4 rounds' step above one round)."""
    from simulator.engines.style import engine_style

    ttft = [simulator.estimate(simulator.load_scenario(_closed_loop(k))).ttft_mean_s
            for k in (1.0, 2.0, 3.0)]
    assert ttft[1] - ttft[0] == pytest.approx(ttft[2] - ttft[1], rel=1e-9)
    assert ttft[1] > ttft[0]
    rounds = engine_style("vllm").closed_loop_burst_rounds
    assert rounds == 2.4
    default = simulator.estimate(simulator.load_scenario(_closed_loop(None))).ttft_mean_s
    assert default == pytest.approx(ttft[0] + (rounds - 1) * (ttft[1] - ttft[0]), rel=1e-9)


@pytest.mark.parametrize("rounds", [0.5, 21, "two"])
def test_bad_burst_rounds_are_one_line(rounds: Any) -> None:
    with pytest.raises(InputError) as err:
        simulator.load_scenario(_closed_loop(rounds))
    assert "burst_rounds" in str(err.value) and "\n" not in str(err.value).strip()


@pytest.fixture(scope="module")
def overlay(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Llama-3.1-8B on one H100 under vLLM at 4-64 in flight, two prompt lengths and two
    output lengths (20 runs of 4 configurations), figures from the estimate at 3.5 rounds."""
    folder = tmp_path_factory.mktemp("calburst")
    rows = [_row(i, "llama-3.1-8b", 1, conc, isl, osl) for i, (isl, osl, conc) in enumerate(
        (isl, osl, conc) for isl in (1024, 4096) for osl in (128, 512)
        for conc in (4, 8, 16, 32, 64))]
    return fit_one_kind(folder, rows, PARAM, TRUE_ROUNDS, "burst", 2.4)


def test_calibrate_fit_burst_recovers_the_rounds(overlay: Path) -> None:
    data = yaml.safe_load(overlay.read_text())
    (value,) = data["values"]
    assert value["target"] == {"kind": "engine_style", "name": "vllm", "key": KEY}
    assert value["value"] == pytest.approx(TRUE_ROUNDS, rel=0.02)
    assert value["prior"] == 2.4  # vLLM's shipped value


def test_the_overlay_applies_it_as_the_deployments_overhead(overlay: Path) -> None:
    from simulator.calibration.host_costs import calibrated, host_costs
    from simulator.calibration.overlay import read_overlay

    data = _closed_loop(None)
    with_fit = calibrated(copy.deepcopy(data), host_costs(read_overlay(overlay)))
    rounds = with_fit["deployment"]["overhead"]["burst_rounds"]
    assert rounds == pytest.approx(TRUE_ROUNDS, rel=0.02)
    loaded = simulator.load_scenario(with_fit)
    assert loaded.engine is not None
    assert loaded.engine.style.closed_loop_burst_rounds == rounds
