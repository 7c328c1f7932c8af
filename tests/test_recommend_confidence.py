"""Uncertainty in the planner's answer (issue 31, item 3): capacities judged on the GPU's
pessimistic profile, the simulator's measured error printed beside the answer, and a note
where the answer's margin is inside that error."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simulator.sweep.capacity import Capacity, slo_capacity
from simulator.sweep.recommend import Candidate, Recommendation, margin_notes
from simulator.validation.accuracy import Accuracy, MetricError, load_accuracy
from tests.cli_helpers import run_cli

ROOT = Path(__file__).resolve().parent.parent
CHAT = yaml.safe_load((ROOT / "scenarios" / "chat-llama-3.1-8b-h100.yaml").read_text())
TARGETS = {"ttft_s.p99": 1.0, "tpot_s.p99": 0.05}
ACC = Accuracy("test", "simulate", {"ttft": MetricError("ttft", 0.8, 6.0, 0.5, 100),
                                    "tpot": MetricError("tpot", 0.2, 0.8, 0.0, 100)})


def _cand(rate: float, usd: float, why: str = "tpot_s.p99 0.06 s > 0.05 s") -> Candidate:
    cap = Capacity(rate, True, rate * 1.05, 6, rate, why, config=str(usd))
    return Candidate({"point_id": str(usd)}, "h100-sxm", 1, rate, 1, usd, (usd,), cap)


def test_headroom_inside_the_binding_metrics_error_is_said() -> None:
    """One copy of capacity 22 req/s asked 20: headroom 22 / 20 - 1 = 10 %, under TPOT's 20 %
    median error (TPOT is what its capacity missed): a note. Asked 15: 47 %, no note."""
    rec = Recommendation("rate", TARGETS, [_cand(22.0, 2.0)], [], True, load=20.0)
    [note] = margin_notes(rec, ACC)
    assert "10% headroom over 20 req/s, within the TPOT median error (20%" in note
    rec.load = 15.0
    assert margin_notes(rec, ACC) == []


def test_a_runner_up_within_the_error_makes_the_order_uncertain() -> None:
    """Winner $2.00/h, runner-up $2.20/h: 10 % apart on the goal, within 20 %; at $3.00/h
    (50 %) the order stands. A TTFT-bound winner reads TTFT's 80 %."""
    rec = Recommendation("rate", TARGETS, [_cand(40.0, 2.0), _cand(40.0, 2.2)], [], True,
                         load=20.0)
    [note] = margin_notes(rec, ACC)
    assert "runner-up is 10% from the winner" in note and "TPOT median error (20%)" in note
    rec.ranked[1] = _cand(40.0, 3.0)
    assert margin_notes(rec, ACC) == []
    rec.ranked = [_cand(40.0, 2.0, "ttft_s.p99 1.2 s > 1 s"), _cand(40.0, 3.0)]
    assert "TTFT median error (80%)" in margin_notes(rec, ACC)[0]


def test_the_pessimistic_profile_lowers_the_capacity() -> None:
    nominal = slo_capacity(CHAT, TARGETS)
    pessimistic = slo_capacity(CHAT, TARGETS, pessimistic=True)
    assert 0 < pessimistic.rate_per_s < nominal.rate_per_s


def test_the_shipped_accuracy_file_loads() -> None:
    acc = load_accuracy()
    assert set(acc.metrics) == {"ttft", "tpot"}
    assert "measured error against real engines" in acc.line()


def test_pessimistic_without_the_search_is_one_line_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "points").mkdir()
    (tmp_path / "results.csv").write_text("point_id,point_status\n")
    code, out, err = run_cli(["recommend", str(tmp_path), "--slo", "ttft_p99_s=1",
                              "--confidence", "pessimistic", "--no-capacity"], capsys)
    lines = [ln for ln in (out + err).splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "--confidence pessimistic" in lines[0]
