"""The benchmark's first measured round as a burst into the idle engine (measured/first_round.py):
which runs have one, that the cut outputs change no first token, how the simulated run's TTFT
takes it in, and that the closed form's first wave agrees with the burst simulated."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simulator
from simulator.measured import first_round
from simulator.measured.detect import read_measurements
from simulator.measured.first_round import burst_clients, burst_ttft_s, with_first_round
from simulator.measured.predict import _predict
from simulator.measured.scenario import map_run
from tests.test_measured import DENSE, write_csv


def _mapped(tmp_path: Path, **row: str) -> Any:
    [run] = read_measurements([write_csv(tmp_path / "r.csv", [{**DENSE, **row}])])
    return map_run(run, None)


def test_which_runs_start_with_a_burst(tmp_path: Path) -> None:
    m = _mapped(tmp_path, concurrency="16", batch_size="16")
    s = m.scenario
    # The silicon mapping: closed loop of 16 at random phases, a warm-up of 16, 20 x 16 more.
    assert s["workload"]["arrival"] == {"kind": "closed_loop", "concurrency": 16,
                                        "start": "random_phase"}
    assert s["workload"]["num_requests"] == 21 * 16
    assert burst_clients(s, 16) == 16
    assert burst_clients(s, 0) == 16  # no warm-up: the first round is the burst itself
    assert burst_clients(s, 8) is None  # a warm-up of half a round: not an idle engine
    together = copy.deepcopy(s)
    together["workload"]["arrival"]["start"] = "together"
    assert burst_clients(together, 16) is None  # already simulated as a burst
    short = copy.deepcopy(s)
    short["workload"]["num_requests"] = 16 + 16  # one measured round: nothing to stand in for
    assert burst_clients(short, 16) is None
    poisson = copy.deepcopy(s)
    poisson["workload"]["arrival"] = {"kind": "poisson", "rate_per_s": 4.0}
    assert burst_clients(poisson, 16) is None


def test_cut_outputs_leave_every_first_token_where_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = _mapped(tmp_path, concurrency="32", batch_size="32", osl="512").scenario
    cut = burst_ttft_s(s, 32)
    # The whole output (the cut's start raised past it): the same first tokens, to the bit.
    monkeypatch.setattr(first_round, "BURST_FIRST_OUTPUT", 512)
    whole = burst_ttft_s(s, 32)
    assert np.array_equal(np.sort(cut), np.sort(whole))
    # A burst queues: the last prompt waits for the 31 before it, the first for none.
    assert whole.max() > 5 * whole.min()


def test_a_burst_of_one_is_the_idle_engines_single_request(tmp_path: Path) -> None:
    s = _mapped(tmp_path, concurrency="1", batch_size="1").scenario
    one = copy.deepcopy(s)
    one["workload"]["arrival"]["start"] = "together"
    one["workload"]["num_requests"] = 1
    r = simulator.simulate(simulator.load_scenario(one))
    assert burst_ttft_s(s, 1)[0] == pytest.approx(r.summary["ttft_s"]["mean"], rel=1e-12)


def test_simulated_run_takes_the_burst_for_its_first_round(tmp_path: Path) -> None:
    m = _mapped(tmp_path, concurrency="8", batch_size="8", osl="128")
    predicted, _ = _predict(m, "simulate")
    # By hand: the whole run at random phases, its warm-up (8) and first measured round (8)
    # left out, plus the 8 TTFTs of the burst.
    loaded = simulator.load_scenario(m.scenario)
    res = simulator.simulate(loaded)
    later = res.requests[16:]
    fe = loaded.engine.style.front_end
    ttft = later["first_token_s"] - later["arrival_s"] + later["front_end_s"] + fe.first_chunk_s
    burst = burst_ttft_s(m.scenario, 8)
    # The burst stands for the engine's closed_loop_burst_rounds rounds (vLLM: 2.4), the
    # later rounds' mean for the rest: (k sum(burst) + (n - 8 k) mean(later)) / n.
    k = loaded.engine.style.closed_loop_burst_rounds
    n = ttft.size + burst.size
    by_hand = (k * burst.sum() + (n - k * burst.size) * ttft.mean()) / n
    assert predicted["ttft.mean"] == pytest.approx(by_hand * 1e3, rel=1e-9)
    assert with_first_round(ttft, burst, k) == pytest.approx(by_hand, rel=1e-12)
    one_round = (ttft.sum() + burst.sum()) / n
    assert with_first_round(ttft, burst) == pytest.approx(one_round, rel=1e-12)


@pytest.mark.parametrize(("concurrency", "isl"),
                         [("8", "1024"), ("32", "1024"), ("128", "1024"), ("16", "8192")])
def test_closed_form_first_wave_agrees_with_the_simulated_burst(
        tmp_path: Path, concurrency: str, isl: str) -> None:
    # The estimate weighs a first wave of C requests (for k rounds), each waiting half the
    # wave's prefill on top of its own unqueued TTFT, against the run's 21 C; the burst
    # simulated as a run of its own lands within 10 % of it (two implementations of one
    # queue: 0.93-0.99 of the simulated burst here; the larger of the steady TTFT and the
    # half wave, the form before, gave 0.75-0.91).
    m = _mapped(tmp_path, concurrency=concurrency, batch_size=concurrency, isl=isl)
    s = m.scenario
    c, n = int(concurrency), s["workload"]["num_requests"]
    est = simulator.estimate(simulator.load_scenario(s)).ttft_mean_s
    long_run = copy.deepcopy(s)
    long_run["workload"]["num_requests"] = n * 100  # a first wave of 1/2100: the steady TTFT
    steady = simulator.estimate(simulator.load_scenario(long_run)).ttft_mean_s
    # The wave weighs k rounds (the style's closed_loop_burst_rounds: identical requests).
    k = simulator.load_scenario(s).engine.style.closed_loop_burst_rounds  # type: ignore[union-attr]
    first_wave_est = (est * n - steady * (n - k * c)) / (k * c)
    burst = burst_ttft_s(s, c).mean()
    assert first_wave_est == pytest.approx(burst, rel=0.10)
    assert burst > 2 * steady  # and the wave is no small correction
