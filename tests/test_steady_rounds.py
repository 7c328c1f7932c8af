"""Long closed loops of identical requests stop once their rounds repeat (measured/steady.py,
issue 37 item 2): the carried-over arithmetic by hand, the gate, and one run end to end against
its whole simulation (the 400-run sample of the calibration file: every mean within 0.68 %)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.measured.detect import read_measurements
from simulator.measured.predict import score
from simulator.measured.scenario import map_run
from simulator.measured.steady import Loop, carried_over_ms, closed_loop, steady_means_ms
from tests.test_measured import DENSE, write_csv


def test_carried_over_by_hand() -> None:
    """21 rounds (warm-up and 20 measured), 6 simulated: round 1 at 100 ms / 10 ms, rounds 2-4
    at 50 / 5, the drain at 40 / 4. The measured rounds are 1-4 as simulated, 15 more at 50 / 5
    and the drain: (100 + 18 x 50 + 40) / 20 = 52.0 ms and (10 + 18 x 5 + 4) / 20 = 5.2 ms."""
    means = [(999.0, 99.0), (100.0, 10.0), (50.0, 5.0), (50.0, 5.0), (50.0, 5.0), (40.0, 4.0)]
    got = carried_over_ms(means, 21)
    assert got == pytest.approx({"ttft.mean": 52.0, "tpot.mean": 5.2})


@pytest.mark.parametrize("middle", [
    [(50.5, 5.0), (50.0, 5.0), (50.0, 5.0)],   # spread alone: 0.67 % > 0.2 %, no drift
    [(50.0, 5.0), (50.0, 5.0), (50.5, 5.0)],   # spread 0.67 % > 0.2 %
    [(50.0, 5.0), (50.0, 5.0), (50.05, 5.0)],  # drift 0.1 % a round x 15 / 2 = 0.75 %
])
def test_rounds_not_yet_steady_are_not_carried_over(middle: list[tuple[float, float]]) -> None:
    means = [(999.0, 99.0), (100.0, 10.0), *middle, (40.0, 4.0)]
    assert carried_over_ms(means, 21) is None


def _scenario(**workload: object) -> dict[str, object]:
    wl = {"arrival": {"kind": "closed_loop", "concurrency": 4},
          "input_tokens": {"kind": "fixed", "value": 100},
          "output_tokens": {"kind": "fixed", "value": 10}, "num_requests": 84}
    return {"workload": {**wl, **workload}}


def test_the_gate() -> None:
    means = {"ttft.mean", "tpot.mean"}
    assert closed_loop(_scenario(), 4, means) == Loop(4, 21)
    assert closed_loop(_scenario(), 4, {*means, "ttft.p99"}) is None  # percentiles: whole run
    assert closed_loop(_scenario(), 0, means) is None  # no warm-up round
    assert closed_loop(_scenario(num_requests=40), 4, means) is None  # 10 rounds: too few
    assert closed_loop(_scenario(num_requests=85), 4, means) is None  # not whole rounds
    uniform = {"kind": "uniform", "min": 50, "max": 150}
    assert closed_loop(_scenario(input_tokens=uniform), 4, means) is None
    one = {"kind": "fixed", "value": 1}
    assert closed_loop(_scenario(output_tokens=one), 4, means) is None  # no TPOT to carry
    assert closed_loop(_scenario(), 4, {*means, "e2e.mean"}) is None  # a mean not carried
    phased = _scenario()
    phased["workload"]["arrival"]["start"] = "random_phase"  # settles later: whole run
    assert closed_loop(phased, 4, means) is None


def test_a_loop_that_never_settles_runs_whole() -> None:
    calls: list[int] = []

    def drifting(scenario: dict[str, object]) -> list[tuple[float, float]]:
        n = scenario["workload"]["num_requests"] // 4  # type: ignore[index]
        calls.append(n)
        return [(100.0 + 10 * i, 5.0) for i in range(n)]

    assert steady_means_ms(_scenario(), Loop(4, 21), drifting) is None
    assert calls == [6]  # 12 rounds would leave fewer than 12 unsimulated: the whole run


def test_a_measured_run_agrees_with_its_whole_simulation(tmp_path: Path) -> None:
    """With its clients started together (an override), a measured run's carried-over means
    agree with the whole run's within 1 %; mapped as it is (clients at random phases) it is
    simulated whole: the carry-over is not offered."""
    row = {**DENSE, "id": "c16", "concurrency": "16", "batch_size": "16", "osl": "256"}
    [run] = read_measurements([write_csv(tmp_path / "r.csv", [row])])
    together = map_run(run, None, ["workload.arrival.start=together"])
    steady = score((together, "simulate", (), True))
    whole = score((together, "simulate", (), False))
    assert any("steady state: 6 of 21 rounds" in n for n in steady["notes"]), steady["notes"]
    for key in ("ttft.mean", "tpot.mean"):
        assert steady["predicted"][key] == pytest.approx(whole["predicted"][key], rel=0.01)
    phased = score((map_run(run, None), "simulate", (), True))
    assert not any("steady state" in n for n in phased["notes"]), phased["notes"]


def test_a_one_token_run_is_scored_whole(tmp_path: Path) -> None:
    row = {**DENSE, "id": "osl1", "concurrency": "16", "batch_size": "16", "osl": "1"}
    [run] = read_measurements([write_csv(tmp_path / "r.csv", [row])])
    rec = score((map_run(run, None), "simulate", (), True))
    assert rec["status"] == "scored" and not any("steady" in n for n in rec["notes"])


def test_full_runs_is_for_the_simulation(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from tests.cli_helpers import run_cli

    path = write_csv(tmp_path / "r.csv", [DENSE])
    code, _, err = run_cli(["validate", "--measurements", str(path), "--method", "estimate",
                            "--full-runs"], capsys)
    assert code == 2 and "--full-runs applies to --method simulate" in err
