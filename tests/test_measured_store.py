"""Scoring measured runs on the sweep's runners and store (issue 37 item 3): every scored run
is kept as it finishes, a resumed scoring takes the kept ones instead of scoring them again
and scores only the rest, failed runs are tried again, and the options' misuse is one line
with exit status 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from simulator.measured import scoring
from simulator.measured.detect import read_measurements
from simulator.measured.scenario import map_run
from simulator.measured.scoring import FAILED, run_key, score_all
from simulator.sweep.runners import ray_available
from simulator.sweep.store import ResultStore
from tests.test_measured import DENSE, frontier, write_csv


def _mapped(tmp_path: Path) -> list[Any]:
    rows = [{**DENSE, "id": f"c{c}", "concurrency": str(c), "batch_size": str(c),
             "osl": "64"} for c in (1, 2, 4)]
    return [map_run(r, None) for r in read_measurements([write_csv(tmp_path / "r.csv", rows)])]


def _timeless(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records without their wall time (`seconds`), which no two scorings share."""
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count the runs predict.score is asked for (in this process: one worker)."""
    seen: list[str] = []
    real = scoring.score

    def counted(item: Any) -> dict[str, Any]:
        seen.append(item[0].run.run_id)
        return real(item)

    monkeypatch.setattr(scoring, "score", counted)
    return seen


def test_a_resumed_scoring_scores_only_what_the_store_lacks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mapped = _mapped(tmp_path)
    seen = _counting(monkeypatch)
    (tmp_path / "s").mkdir()
    with ResultStore(tmp_path / "s" / "store.jsonl") as store:
        first = score_all(mapped[:2], "estimate", store=store)  # interrupted after two runs
    assert seen == ["c1", "c2"]
    with ResultStore(tmp_path / "s" / "store.jsonl", resume=True) as store:
        whole = score_all(mapped, "estimate", store=store)
        assert len(store.records()) == 3
    assert seen == ["c1", "c2", "c4"]  # only the third was scored again
    assert whole[:2] == first  # the kept records, as they were scored
    assert [r["id"] for r in whole] == ["c1", "c2", "c4"]  # in input order
    # The same as one scoring from scratch.
    assert _timeless(whole) == _timeless(score_all(mapped, "estimate"))


def test_the_key_holds_how_a_run_is_scored(tmp_path: Path) -> None:
    m = _mapped(tmp_path)[0]
    assert run_key((m, "estimate", (), True)) == run_key((m, "estimate", (), True))
    assert len({run_key((m, "estimate", (), True)), run_key((m, "simulate", (), True)),
                run_key((m, "simulate", (), False))}) == 3


def test_failed_runs_are_tried_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mapped = _mapped(tmp_path)[:1]
    real = scoring.score

    def failing(item: Any) -> dict[str, Any]:
        return {**real(item), "status": "refused", "reason": FAILED, "detail": "stalled"}

    monkeypatch.setattr(scoring, "score", failing)
    path = tmp_path / "s" / "store.jsonl"
    path.parent.mkdir()
    with ResultStore(path) as store:
        assert score_all(mapped, "estimate", store=store)[0]["reason"] == FAILED
        assert [r["point_status"] for r in store.records().values()] == ["error"]
    monkeypatch.setattr(scoring, "score", real)
    with ResultStore(path, resume=True) as store:
        assert score_all(mapped, "estimate", store=store)[0]["status"] == "scored"


def test_local_workers_give_the_in_process_records(tmp_path: Path) -> None:
    mapped = _mapped(tmp_path)
    assert _timeless(score_all(mapped, "estimate", workers=2)) == _timeless(
        score_all(mapped, "estimate"))


@pytest.mark.skipif(not ray_available(), reason="Ray is not installed")
def test_ray_backend_gives_the_same_records(tmp_path: Path) -> None:
    mapped = _mapped(tmp_path)[:2]
    assert _timeless(score_all(mapped, "estimate", workers=1, backend="ray")) == _timeless(
        score_all(mapped, "estimate"))


def test_cli_store_resume_and_misuse(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "r.csv", [DENSE])
    store = tmp_path / "kept"
    runner = CliRunner()
    args = ["--measurements", str(path), "--method", "estimate", "--store", str(store)]
    ok = runner.invoke(frontier, args)
    assert ok.exit_code == 0, ok.output
    assert (store / "store.jsonl").read_text().count("\n") == 1
    again = runner.invoke(frontier, args)  # results there: neither resumed nor fresh
    assert again.exit_code == 2 and "already holds results" in again.output
    assert len(again.output.strip().splitlines()) == 1
    assert runner.invoke(frontier, [*args, "--resume"]).exit_code == 0
    assert runner.invoke(frontier, [*args, "--fresh"]).exit_code == 0
    for bad in (["--resume"], ["--resume", "--fresh"]):
        base = ["--measurements", str(path), "--method", "estimate"]
        extra = [] if bad == ["--resume"] else ["--store", str(store)]
        res = runner.invoke(frontier, [*base, *extra, *bad])
        assert res.exit_code == 2, res.output
