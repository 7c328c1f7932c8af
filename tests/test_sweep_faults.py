"""Sweep durability under faults, each injected for real: SIGKILL of the whole process group at
seeded random moments, a full disk (ENOSPC from the store's fsync), a read-only output folder,
a second sweep on a held `--out`; and determinism across worker counts and backends. After
every fault the resumed sweep's results.csv must equal an uninterrupted run's byte for byte."""

from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sweep_helpers import REPO, small_sweep, write_sweep
from test_fuzz import run_cli

from simulator.sweep import run_sweep
from simulator.sweep import store as store_module

POINTS = 8  # tensor_parallel 2 × concurrency 2 × zip 2 of the small sweep
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _sweep_file(tmp: Path) -> Path:
    # a few tenths of a second per point, so a kill lands between and inside points
    return write_sweep(tmp / "s.yaml", small_sweep(num_requests=400,
                                                   output_tokens={"kind": "fixed", "value": 64}))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """The sweep file and the results.csv of one uninterrupted run (1 worker, local)."""
    tmp = tmp_path_factory.mktemp("ref")
    sweep_file = _sweep_file(tmp)
    run_sweep(sweep_file, tmp / "out", workers=1)
    return sweep_file, (tmp / "out" / "results.csv").read_bytes()


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code, _, err = run_cli(argv, capsys)
    assert "Traceback" not in err, err
    return code, err


def _one_line(err: str) -> str:
    """The one error line (progress lines, `sweep: 3/8 points ...`, come before it)."""
    lines = [line for line in err.splitlines() if not line.startswith("sweep: ")]
    assert len(lines) == 1, err
    return lines[0]


def _stored(out: Path) -> int:
    path = out / "store.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


# ---------------------------------------------------------------------------------- SIGKILL


def test_sigkill_at_random_moments_then_resume_equals_an_uninterrupted_run(
    tmp_path: Path,
) -> None:
    # Slow points (~0.3 s each: 3000 requests one or two at a time) and one worker, so a kill
    # seen within milliseconds of the k-th stored point lands inside point k + 1.
    data = small_sweep(num_requests=3000, output_tokens={"kind": "fixed", "value": 64})
    data["sweep"]["workload.arrival.concurrency"] = [1, 2]
    sweep_file = write_sweep(tmp_path / "slow.yaml", data)
    run_sweep(sweep_file, tmp_path / "ref", workers=2)
    expected = (tmp_path / "ref" / "results.csv").read_bytes()
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "simulator", "sweep", str(sweep_file), "--out", str(out),
           "--workers", "1", "--no-report"]
    rng = random.Random(17)  # seeded: the same kill moments on every run
    for attempt in range(2):
        proc = subprocess.Popen([*cmd, *(["--resume"] if attempt else [])], cwd=REPO, env=ENV,
                                start_new_session=True, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        target = _stored(out) + rng.randint(1, 3)  # kill once this many points are stored,
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None and _stored(out) < target:
            time.sleep(0.002)
        time.sleep(rng.uniform(0.0, 0.01))  # plus a few random milliseconds
        assert proc.poll() is None, "the sweep finished before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)  # the parent and its worker processes
        proc.wait()
        assert target <= _stored(out) < POINTS  # it died mid-sweep, keeping what it stored
    assert not (out / "results.csv").exists()
    done = subprocess.run([*cmd, "--resume"], cwd=REPO, env=ENV, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (out / "results.csv").read_bytes() == expected


# -------------------------------------------------------------------------------- full disk


def test_full_disk_stops_with_one_line_keeps_the_points_and_resumes(
    reference: tuple[Path, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sweep_file, expected = reference
    out = tmp_path / "out"
    real_fsync = os.fsync
    calls = {"n": 0}

    def fsync_until_full(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] > 3:  # the disk fills up after three stored points
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(store_module.os, "fsync", fsync_until_full)
    code, err = _cli(["sweep", str(sweep_file), "--out", str(out), "--workers", "1",
                      "--no-report"], capsys)
    line = _one_line(err)
    assert code == 2
    assert "No space left on device" in line and "--resume" in line
    assert f"{out}: cannot write the sweep (No space left on device: {out / 'store.jsonl'})" in line
    assert not (out / "results.csv").exists()
    monkeypatch.setattr(store_module.os, "fsync", real_fsync)
    assert _stored(out) >= 3  # the points stored before the disk filled are kept
    code, err = _cli(["sweep", str(sweep_file), "--out", str(out), "--workers", "1",
                      "--no-report", "--resume"], capsys)
    assert code == 0, err
    assert (out / "results.csv").read_bytes() == expected


# ------------------------------------------------------------------------- read-only folder


@pytest.fixture
def read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder nothing can be written in: chmod 555, and for root (whom modes do not stop)
    EROFS from every open/mkdir below it, as a read-only mount answers."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    if os.geteuid() == 0:
        real_open, real_mkdir = os.open, os.mkdir

        def refuse(path: Any) -> None:
            if str(path).startswith(str(folder)):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

        def ro_open(path: Any, flags: int, *args: Any, **kw: Any) -> int:
            if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
                refuse(path)
            return real_open(path, flags, *args, **kw)

        def ro_mkdir(path: Any, *args: Any, **kw: Any) -> None:
            refuse(path)
            real_mkdir(path, *args, **kw)

        monkeypatch.setattr(os, "open", ro_open)
        monkeypatch.setattr(os, "mkdir", ro_mkdir)
    yield folder
    folder.chmod(0o755)


def test_read_only_output_folder_is_one_line(
    reference: tuple[Path, bytes], read_only: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep_file, _ = reference
    for out in (read_only, read_only / "sub"):
        code, err = _cli(["sweep", str(sweep_file), "--out", str(out), "--no-report"], capsys)
        line = _one_line(err)
        assert code == 2 and line.startswith(f"frontier: {out}: cannot write the sweep"), line
        assert "Read-only file system" in line or "Permission denied" in line, line


# ------------------------------------------------------------------------------ a held lock


def test_second_sweep_on_a_held_out_is_refused_with_one_line(
    reference: tuple[Path, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep_file, expected = reference
    out = tmp_path / "out"
    out.mkdir()
    # another process holds the folder's lock, as a running sweep does
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; "
         "from simulator.sweep.store import _lock_folder; "
         f"fd = _lock_folder(Path({str(out)!r})); print('held', flush=True); sys.stdin.read()"],
        cwd=REPO, env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        for extra in ([], ["--resume"], ["--fresh"]):
            code, err = _cli(["sweep", str(sweep_file), "--out", str(out), "--no-report",
                              *extra], capsys)
            line = _one_line(err)
            assert code == 2 and f"another sweep (pid {holder.pid}) is writing" in line, line
        assert not (out / "store.jsonl").exists()  # the refused sweeps wrote nothing
    finally:
        holder.communicate("", timeout=30)  # the holder exits and its lock goes with it
    code, err = _cli(["sweep", str(sweep_file), "--out", str(out), "--no-report",
                      "--workers", "2"], capsys)
    assert code == 0, err
    assert (out / "results.csv").read_bytes() == expected


# ------------------------------------------------------------------------------ determinism


def test_worker_counts_give_byte_identical_results(
    reference: tuple[Path, bytes], tmp_path: Path
) -> None:
    sweep_file, expected = reference
    run_sweep(sweep_file, tmp_path / "w2", workers=2)
    assert (tmp_path / "w2" / "results.csv").read_bytes() == expected
    assert expected.count(b"\n") == POINTS + 1


def test_ray_backend_gives_byte_identical_results(
    reference: tuple[Path, bytes], tmp_path: Path
) -> None:
    pytest.importorskip("ray", reason="ray is not installed (pip install '.[ray]')")
    sweep_file, expected = reference
    run_sweep(sweep_file, tmp_path / "ray", backend="ray", workers=2)
    assert (tmp_path / "ray" / "results.csv").read_bytes() == expected
