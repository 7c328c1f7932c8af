"""What an outside audit broke in sweeps (issue 34), each fault injected for real: the parent
killed alone (its workers live on), a worker killed as the out-of-memory killer does, a file a
point reads edited between a sweep and its --resume, another sweep file resumed into the same
--out, and links planted in --out in the place of every file a sweep writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sweep_helpers import REPO, small_sweep, write_sweep
from test_fuzz import run_cli

from simulator.model.load import CATALOG_DIR
from simulator.sweep import pipeline, run_sweep, runners
from simulator.sweep.grid import expand, load_sweep
from simulator.sweep.runners import Task
from simulator.sweep.store import Record
from simulator.sweep.table import read_csv

POINTS = 8  # tensor_parallel 2 × concurrency 2 × zip 2 of the small sweep
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
DEADLINE_S = 120.0  # generous: how long a waited-for event may take on a loaded machine


def _rows(out: Path) -> list[dict[str, object]]:
    return read_csv(out / "results.csv")[1]


def _wait_for(cond: object, what: str) -> None:
    """Poll `cond()` until it holds; fail (naming `what`) only past a generous deadline."""
    end = time.monotonic() + DEADLINE_S
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (an orphan whose reaper has not reaped it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text()
        found += [int(c) for c in text.split()]
    return found


# ----------------------------------------------------------------- the parent killed alone


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads children from /proc")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killing_only_the_parent_never_blocks_resume(
    sig: signal.Signals, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = small_sweep(num_requests=3000, output_tokens={"kind": "fixed", "value": 64})
    data["sweep"]["workload.arrival.concurrency"] = [1, 2]  # slow points: a kill lands mid-run
    sweep_file = write_sweep(tmp_path / "slow.yaml", data)
    out = tmp_path / "out"
    parent = subprocess.Popen(
        [sys.executable, "-m", "simulator", "sweep", str(sweep_file), "--out", str(out),
         "--workers", "2", "--no-report"],
        cwd=REPO, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = out / "store.jsonl"
    _wait_for(lambda: store.exists() and store.read_bytes().count(b"\n") >= 1,
              "the first stored point")
    workers = _children(parent.pid)
    assert workers, "the sweep runs its points in worker processes"
    try:
        parent.send_signal(sig)  # the parent alone: its workers are not signalled
        parent.wait(timeout=DEADLINE_S)
        # Straight away, while the orphaned workers may still be mid-point: the lock died
        # with the parent, so the resume runs.
        code, _, err = run_cli(["sweep", str(sweep_file), "--out", str(out), "--resume",
                                "--workers", "2", "--no-report"], capsys)
        assert code == 0, err
        rows = _rows(out)
        assert len(rows) == POINTS and all(r["point_status"] == "ok" for r in rows)
        # ... and the orphans do not live on: each sees its parent gone and exits.
        _wait_for(lambda: not any(_alive(w) for w in workers), "the orphaned workers to exit")
    finally:  # a failed check leaves no orphan behind
        for w in workers:
            if _alive(w):
                os.kill(w, signal.SIGKILL)


# -------------------------------------------------------------- a worker killed (OOM killer)


def _killed_on_one_point(task: Task) -> Record:
    """The real evaluation, except that the worker taking the chosen point is SIGKILLed."""
    if task.values.get("deployment.tensor_parallel") == 2 and \
            task.values.get("workload.arrival.concurrency") == 8 and \
            task.values.get("deployment.precision.weights") == "fp8":
        os.kill(os.getpid(), signal.SIGKILL)
    return runners.evaluate_point(task)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_killed_worker_is_a_crashed_row_and_a_failing_exit_then_resume_completes(
    workers: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sweep_file = write_sweep(tmp_path / "s.yaml", small_sweep())
    out = tmp_path / "out"
    outcome = run_sweep(sweep_file, out, workers=workers, evaluate=_killed_on_one_point)
    rows = _rows(out)
    assert len(rows) == POINTS  # never a missing row
    crashed = [r for r in rows if r["point_status"] == "error"]
    assert any(r["deployment.tensor_parallel"] == 2 and r["workload.arrival.concurrency"] == 8
               and r["deployment.precision.weights"] == "fp8" for r in crashed)
    assert all("worker process died" in str(r["point_error"]) for r in crashed)
    assert outcome.crashed_total == len(crashed) and outcome.missing == 0
    assert outcome.incomplete_line() is not None

    # The CLI says so in its exit status (the rows are written all the same).
    def killing_run_local(tasks: list[Task], n: int, on_record: runners.OnRecord,
                          evaluate: runners.Evaluate) -> None:
        runners.run_local(tasks, n, on_record, _killed_on_one_point)

    monkeypatch.setattr(pipeline, "run_local", killing_run_local)
    code, _, err = run_cli(["sweep", str(sweep_file), "--out", str(tmp_path / "cli"),
                            "--workers", str(workers), "--no-report"], capsys)
    assert code == 1 and "crashed" in err and "--resume" in err, err
    monkeypatch.undo()
    code, _, err = run_cli(["sweep", str(sweep_file), "--out", str(tmp_path / "cli"),
                            "--workers", str(workers), "--no-report", "--resume"], capsys)
    assert code == 0, err
    assert [r["point_status"] for r in _rows(tmp_path / "cli")] == ["ok"] * POINTS


# ---------------------------------------------------------------- stale and crossed resumes


def _model_sweep(tmp_path: Path) -> tuple[Path, Path]:
    config = tmp_path / "m" / "config.json"
    config.parent.mkdir()
    config.write_text((CATALOG_DIR / "llama-3.1-8b.json").read_text())
    data = small_sweep()
    data["model"] = "m/config.json"  # relative to the sweep file
    return write_sweep(tmp_path / "s.yaml", data), config


def test_resume_after_a_referenced_file_changed_runs_its_points_again(tmp_path: Path) -> None:
    sweep_file, config = _model_sweep(tmp_path)
    out = tmp_path / "out"
    first = run_sweep(sweep_file, out, workers=2)
    assert first.ran == POINTS
    again = run_sweep(sweep_file, out, workers=2, resume=True)
    assert again.resumed == POINTS and again.ran == 0  # unchanged: every point reused
    before = {r["point_id"]: r["output_tokens_per_s"] for r in _rows(out)}
    config.write_text(config.read_text().replace('"num_hidden_layers": 32',
                                                 '"num_hidden_layers": 16'))
    changed = run_sweep(sweep_file, out, workers=2, resume=True)
    assert changed.resumed == 0 and changed.ran == POINTS  # none of the stale results reused
    after = {r["point_id"]: r["output_tokens_per_s"] for r in _rows(out)}
    assert not set(before) & set(after)
    assert sum(after.values()) > sum(before.values())  # half the layers: faster  # type: ignore


def test_empirical_length_file_is_part_of_the_point_key(tmp_path: Path) -> None:
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("prompt\n100\n200\n")
    data = small_sweep(input_tokens={"kind": "empirical", "path": "lengths.csv",
                                     "column": "prompt"})
    sweep_file = write_sweep(tmp_path / "s.yaml", data)
    keys = [p.key for p in expand(load_sweep(sweep_file)).points]
    lengths.write_text("prompt\n100\n300\n")
    assert not set(keys) & {p.key for p in expand(load_sweep(sweep_file)).points}


def test_resume_with_another_sweep_file_is_refused_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = write_sweep(tmp_path / "first.yaml", small_sweep())
    second = write_sweep(tmp_path / "second.yaml", small_sweep(num_requests=30))
    out = tmp_path / "out"
    code, _, err = run_cli(["sweep", str(first), "--out", str(out), "--no-report"], capsys)
    assert code == 0, err
    results = (out / "results.csv").read_bytes()
    for extra in (["--resume"], []):
        code, _, err = run_cli(["sweep", str(second), "--out", str(out), "--no-report", *extra],
                               capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        if extra:
            assert str(first.resolve()) in err and str(second.resolve()) in err, err
    assert (out / "results.csv").read_bytes() == results  # nothing replaced
    code, _, err = run_cli(["sweep", str(second), "--out", str(out), "--no-report", "--fresh"],
                           capsys)
    assert code == 0, err


# ------------------------------------------------------------------------ links in --out


def _link_names(sweep_file: Path) -> list[str]:
    key = expand(load_sweep(sweep_file)).points[0].key
    return ["sweep.lock", "store.jsonl", "results.csv", "frontier.csv", "sweep.json",
            "report.html", "points", f"points/{key}.yaml"]


def test_a_link_in_place_of_any_output_is_refused_and_its_target_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep_file = write_sweep(tmp_path / "s.yaml", small_sweep())
    for i, name in enumerate(_link_names(sweep_file)):
        out = tmp_path / f"out{i}"
        (out / "points").mkdir(parents=True)
        victim = tmp_path / f"victim{i}"
        victim.write_text("precious\n")
        link = out / name
        if name == "points":
            link.rmdir()
        link.symlink_to(victim)
        code, _, err = run_cli(["sweep", str(sweep_file), "--out", str(out)], capsys)
        assert code == 2 and "symbolic link" in err and str(link) in err, (name, err)
        assert len(err.strip().splitlines()) == 1, err
        assert victim.read_text() == "precious\n", name


def test_a_user_profile_and_a_routing_file_are_part_of_the_point_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU profile from FRONTIER_HARDWARE_PATH and a measured per-expert load file are files
    a point reads: editing one between a sweep and its resume gives new keys; a shipped
    profile's points keep theirs."""
    import yaml as _yaml

    from simulator.hardware.profile import profile_path

    profiles = tmp_path / "profiles"
    profiles.mkdir()
    mine = _yaml.safe_load(profile_path("h100-sxm").read_text())
    mine["name"] = "my-h100"
    (profiles / "my-h100.yaml").write_text(_yaml.safe_dump(mine))
    monkeypatch.setenv("FRONTIER_HARDWARE_PATH", str(profiles))
    shipped = expand(load_sweep(write_sweep(tmp_path / "a.yaml", small_sweep()))).points
    data = small_sweep()
    data["hardware"]["gpu"] = "my-h100"
    spec = load_sweep(write_sweep(tmp_path / "b.yaml", data))
    keys = {p.key for p in expand(spec).points}
    mine["efficiency"]["hbm_bandwidth_fraction"] = 0.7
    (profiles / "my-h100.yaml").write_text(_yaml.safe_dump(mine))
    assert not keys & {p.key for p in expand(spec).points}
    monkeypatch.delenv("FRONTIER_HARDWARE_PATH")
    assert {p.key for p in shipped} == {
        p.key for p in expand(load_sweep(write_sweep(tmp_path / "a.yaml", small_sweep()))).points}
