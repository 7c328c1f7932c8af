"""Sweeps: grid, zip and constraints; the Pareto frontier; the durable store and --resume after
a kill; crashed points; recommend; export; cost and energy columns."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sweep_helpers import REPO, small_sweep, write_sweep

import simulator
from simulator.cli.app import main
from simulator.errors import InputError
from simulator.progress import Progress
from simulator.sweep import expand, load_sweep, pareto_mask, run_sweep
from simulator.sweep.cost import energy_j_per_output_token, usd_per_million_output_tokens
from simulator.sweep.export import bench_command, hf_repo_id, launch_commands
from simulator.sweep.expr import parse_constraint
from simulator.sweep.recommend import format_recommendation, recommend
from simulator.sweep.slo import parse_slo
from simulator.sweep.store import ResultStore, make_record
from simulator.sweep.table import read_csv

# ------------------------------------------------------------------------------------ grid


def test_grid_is_the_product_of_axes_with_zip_groups_moving_together() -> None:
    exp = expand(load_sweep(small_sweep()))
    assert exp.total == 2 * 2 * 2 and len(exp.points) == 8 and not exp.dropped
    combos = {(p.values["deployment.tensor_parallel"], p.values["workload.arrival.concurrency"],
               p.values["deployment.precision.weights"], p.values["deployment.precision.kv_cache"])
              for p in exp.points}
    assert len(combos) == 8
    assert all(w == kv for _, _, w, kv in combos)  # zipped: never bf16 weights with fp8 KV
    p = exp.points[0]
    assert p.scenario["deployment"]["tensor_parallel"] == p.values["deployment.tensor_parallel"]
    assert p.scenario["deployment"]["replicas"] == 1  # full scenario: defaults filled in
    assert len({q.key for q in exp.points}) == 8


@pytest.mark.parametrize("path", sorted((REPO / "scenarios" / "sweeps").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_shipped_sweeps_expand(path: Path) -> None:
    exp = expand(load_sweep(path))
    assert exp.points and exp.total <= 200
    assert all(p.scenario["workload"]["num_requests"] <= 500 for p in exp.points)


def test_zip_of_unequal_lengths_names_the_group() -> None:
    data = small_sweep()
    data["sweep"]["zip"] = [{"deployment.precision.weights": ["bf16", "fp8"],
                             "deployment.precision.kv_cache": ["bf16"]}]
    with pytest.raises(InputError, match=r"sweep\.zip\[0\].*deployment\.precision\.weights"):
        load_sweep(data)


@pytest.mark.parametrize("bad", [
    {"deployment.tensor_parallel": 4},
    {"deployment.tensor_parallel": []},
    {"deployment..x": [1]},
])
def test_bad_axes_are_refused(bad: dict[str, Any]) -> None:
    data = small_sweep()
    data["sweep"] = bad
    with pytest.raises(InputError):
        load_sweep(data)


def test_constraints_drop_points_and_count_the_reason() -> None:
    data = small_sweep()
    data["constraints"] = ["deployment.tensor_parallel * deployment.replicas <= 1",
                           "workload.arrival.concurrency > 1 or deployment.precision.weights == "
                           "'fp8'"]
    exp = expand(load_sweep(data))
    # tp=2 dropped by the first (replicas comes from the schema default), then
    # (concurrency 1, bf16) by the second
    assert len(exp.points) == 3
    assert exp.dropped["constraint 'deployment.tensor_parallel * deployment.replicas <= 1'"] == 4
    assert sum(exp.dropped.values()) == 5


def test_schema_refusals_are_dropped_with_their_reason() -> None:
    data = small_sweep()
    data["sweep"] = {"deployment.tensor_parallel": [1, 16]}  # 16 GPUs on an 8-GPU node
    exp = expand(load_sweep(data))
    assert len(exp.points) == 1
    (reason, n), = exp.dropped.items()
    assert n == 1 and "deployment" in reason and "16" in exp.examples[reason]


def test_unknown_key_in_a_constraint_is_an_error() -> None:
    data = small_sweep()
    data["constraints"] = ["deployment.tensr_parallel < 4"]
    with pytest.raises(InputError, match="tensr_parallel"):
        expand(load_sweep(data))


@pytest.mark.parametrize("text", [
    "__import__('os')",
    "__import__('os').system('echo pwned')",
    "().__class__.__bases__[0].__subclasses__()",
    "open('/etc/passwd')",
    "deployment.__class__",
    "deployment.tensor_parallel ** 99999999",
    "lambda: 1",
    "[x for x in (1, 2)]",
    "deployment.tensor_parallel[0]",
    "exec('1')",
    "f'{deployment}'",
    "(deployment := 1)",
    "1 if deployment.tensor_parallel else 2",
    "",
    "x" * 600,
    "(" * 300 + "1" + ")" * 300,
])
def test_malicious_or_unsupported_constraints_are_refused(text: str) -> None:
    with pytest.raises(InputError, match="constraint"):
        parse_constraint(text)


@pytest.mark.parametrize("text", [
    "(a.b + 2) * 3 // 2 % 5 - -1 >= 2",
    "a.b / 4 == 0.5 and not a.c == 'x'",
    "a.d in (1, 2) and 1 < a.b <= 3",
    "a.d not in [2, 3] or a.b * a.d != 4",
    "a.b > 5 or a.c != 'y'",
    "not (a.b - a.d) and +a.b % 2 == 0",
])
def test_constraints_agree_with_python_semantics(text: str) -> None:
    from types import SimpleNamespace

    values = {"a.b": 2, "a.c": "y", "a.d": 2}
    expected = bool(eval(text, {}, {"a": SimpleNamespace(b=2, c="y", d=2)}))  # fixed test text
    assert parse_constraint(text).holds(values.__getitem__) is expected


def test_constraint_errors_name_the_constraint() -> None:
    values = {"a.b": 2, "a.c": "y", "a.d": 2}
    assert parse_constraint("a.b + a.d < 9 and a.c == 'y'").paths == ("a.b", "a.d", "a.c")
    with pytest.raises(InputError, match="arithmetic needs numbers"):
        parse_constraint("a.c * 100000000 > 1").holds(values.__getitem__)
    with pytest.raises(InputError, match="division by zero"):
        parse_constraint("a.b / 0 > 1").holds(values.__getitem__)


# -------------------------------------------------------------------------------- frontier


def test_pareto_frontier_on_hand_made_points() -> None:
    #          A          B          C (dominated by B)  D (tie of B)  E (dominated by A)
    xs = [10.0, 20.0, 15.0, 20.0, 10.0, 30.0, None]
    ys = [100.0, 50.0, 40.0, 50.0, 90.0, 10.0, 500.0]
    assert pareto_mask(xs, ys) == [True, True, False, True, False, True, False]
    # minimizing x (e.g. TTFT p99): A (x=10, y=100) dominates everything with x >= 10 and
    # y <= 100 that is strictly worse somewhere
    assert pareto_mask(xs, ys, (False, True)) == [True, False, False, False, False, False, False]
    # equal x, different y: only the best y of the group
    assert pareto_mask([1.0, 1.0], [2.0, 3.0]) == [False, True]
    assert pareto_mask([1.0, 1.0], [3.0, 3.0]) == [True, True]


def test_dominated_points_are_never_on_the_frontier_randomized() -> None:
    import random

    rng = random.Random(1)
    for _ in range(50):
        pts = [(float(rng.randint(0, 6)), float(rng.randint(0, 6))) for _ in range(25)]
        mask = pareto_mask([p[0] for p in pts], [p[1] for p in pts])
        for i, (x, y) in enumerate(pts):
            dominated = any(a >= x and b >= y and (a > x or b > y) for a, b in pts)
            assert mask[i] == (not dominated)


# ------------------------------------------------------------------------ store and resume


def test_torn_last_line_is_ignored_and_cut(tmp_path: Path) -> None:
    path = tmp_path / "store.jsonl"
    with ResultStore(path) as s:
        s.append(make_record("aaa", {}, "ok", result={"x": 1}))
        s.append(make_record("bbb", {}, "error", error="boom"))
    with open(path, "ab") as fh:
        fh.write(b'{"key": "ccc", "point_st')  # killed mid-write
    with ResultStore(path, resume=True) as s:
        assert s.torn_bytes > 0 and set(s.records()) == {"aaa", "bbb"}
        assert s.finished() == {"aaa"}  # crashed points are retried on resume
        s.append(make_record("ccc", {}, "ok"))
    lines = path.read_text().splitlines()
    assert [json.loads(line)["key"] for line in lines] == ["aaa", "bbb", "ccc"]
    with pytest.raises(ValueError, match="--resume"):
        ResultStore(path)


def _keys_in(csv_path: Path) -> list[str]:
    with open(csv_path, newline="") as fh:
        return [row["point_id"] for row in csv.DictReader(fh)]


def test_resume_after_sigkill_gives_every_point_exactly_once(tmp_path: Path) -> None:
    data = small_sweep(num_requests=300, output_tokens={"kind": "fixed", "value": 64})
    data["sweep"]["workload.arrival.concurrency"] = [1, 4, 16, 64]
    sweep_file = write_sweep(tmp_path / "s.yaml", data)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "simulator", "sweep", str(sweep_file), "--out", str(out),
           "--workers", "1", "--no-report"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = out / "store.jsonl"
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if store.exists() and store.read_bytes().count(b"\n") >= 3:
                break
            if proc.poll() is not None:
                pytest.fail("the sweep finished before it could be killed; make points slower")
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the parent and its worker processes
        proc.wait()
    done_before = store.read_bytes().count(b"\n")
    assert 3 <= done_before < 16
    assert not (out / "results.csv").exists()
    result = subprocess.run([*cmd, "--resume"], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"({done_before} already in the store, skipped)" in result.stdout
    keys = _keys_in(out / "results.csv")
    expected = {p.key for p in expand(load_sweep(sweep_file)).points}
    assert sorted(keys) == sorted(expected) and len(keys) == 16
    stored = [json.loads(line)["key"] for line in store.read_text().splitlines()]
    assert len(stored) == len(set(stored)) == 16  # nothing ran twice


def test_a_crashed_point_is_recorded_and_the_sweep_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = simulator.simulate

    def flaky(loaded: Any, **kw: Any) -> Any:
        if loaded.scenario.deployment.tensor_parallel == 2:
            raise RuntimeError("boom in the engine")
        return real(loaded, **kw)

    monkeypatch.setattr(simulator, "simulate", flaky)  # inherited by the forked workers
    outcome = run_sweep(small_sweep(), tmp_path, workers=2)
    assert outcome.crashed == 4 and outcome.ok == 4
    _, rows = read_csv(tmp_path / "results.csv")
    crashed = [r for r in rows if r["point_status"] == "error"]
    assert len(crashed) == 4
    assert all("RuntimeError: boom in the engine" in r["point_error"] for r in crashed)
    assert all(r["deployment.tensor_parallel"] == 2 for r in crashed)


def test_engine_refusals_are_dropped_and_outputs_are_complete(tmp_path: Path) -> None:
    data = small_sweep()
    data["model"] = "llama-3.1-70b"
    data["sweep"] = {"deployment.tensor_parallel": [1, 8]}  # 70B BF16 does not fit on one GPU
    outcome = run_sweep(data, tmp_path, workers=1)
    assert outcome.dropped["model does not fit in GPU memory"] == 1 and outcome.ok == 1
    columns, rows = read_csv(tmp_path / "results.csv")
    assert columns[:4] == ["point_id", "point_status", "point_error",
                           "deployment.tensor_parallel"]
    assert {"ttft_s.p99", "output_tokens_per_s_per_user.p50", "gpu_busy_fraction"} <= set(
        columns)
    assert [r["point_status"] for r in rows] == ["dropped", "ok"]
    # every point's full scenario runs alone
    for r in rows:
        assert (tmp_path / "points" / f"{r['point_id']}.yaml").is_file()
    ok = rows[1]
    again = simulator.simulate(simulator.load_scenario(
        tmp_path / "points" / f"{ok['point_id']}.yaml")).to_dict()
    assert again["output_tokens_per_s"] == pytest.approx(ok["output_tokens_per_s"], rel=1e-12)
    _, front = read_csv(tmp_path / "frontier.csv")
    assert [r["point_id"] for r in front] == [ok["point_id"]]


def test_cost_and_energy_columns(tmp_path: Path) -> None:
    assert usd_per_million_output_tokens(8, 2.5, 1000.0) == pytest.approx(8 * 2.5 / 3600 / 1e-3)
    assert usd_per_million_output_tokens(8, None, 1000.0) is None
    assert energy_j_per_output_token(700.0, 2, 0.5, 100.0) == pytest.approx(7.0)
    run_sweep(small_sweep(), tmp_path, workers=2, prices={"h100-sxm": 3.0})
    _, rows = read_csv(tmp_path / "results.csv")
    for r in rows:
        want = r["num_gpus"] * 3.0 / 3600 / r["output_tokens_per_s"] * 1e6
        assert r["usd_per_million_output_tokens"] == pytest.approx(want)
        assert 0 < r["gpu_busy_fraction"] <= 1
        assert r["energy_j_per_output_token"] == pytest.approx(
            700.0 * r["num_gpus"] * r["gpu_busy_fraction"] / r["output_tokens_per_s"], rel=0.5)


def test_progress_prints_plain_lines_off_a_terminal() -> None:
    buf = io.StringIO()
    p = Progress(3, buf, every_s=0.0)
    for _ in range(3):
        p.step()
    p.close()
    lines = buf.getvalue().splitlines()
    assert lines[-1].startswith("sweep: 3/3 points") and "\r" not in buf.getvalue()
    assert "points/s" in lines[0] and "ETA" in lines[0]


def test_progress_rewrites_one_line_on_a_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    buf = Tty()
    p = Progress(2, buf)
    p.step()
    time.sleep(0.25)
    p.step()
    p.close()
    text = buf.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n") and text.count("\n") == 1


def test_ray_backend_without_ray_exits_2_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    sweep_file = write_sweep(tmp_path / "s.yaml", small_sweep())
    with pytest.raises(SystemExit) as exc:
        main(["sweep", str(sweep_file), "--out", str(tmp_path / "o"), "--backend", "ray"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install" in err[0] and "[ray]" in err[0]


# ------------------------------------------------------------------- recommend and export


def _row(pid: str, tp: int, gpus: int, rps: float, ttft: float, per_user: float) -> dict[str, Any]:
    return {"point_id": pid, "point_status": "ok", "deployment.tensor_parallel": tp,
            "status": "completed", "requests_dropped": 0, "num_gpus": gpus,
            "requests_per_s": rps, "ttft_s.p99": ttft, "tpot_s.p99": 0.02,
            "output_tokens_per_s_per_user.p50": per_user}


SYNTHETIC = [
    _row("a", 1, 1, 2.0, 0.5, 80.0),   # 2 req/s per GPU
    _row("b", 2, 2, 5.0, 0.8, 60.0),   # 2.5 req/s per GPU: the obvious winner
    _row("c", 4, 4, 12.0, 3.0, 40.0),  # 3 req/s per GPU but misses TTFT p99 <= 2
    _row("d", 8, 8, 12.0, 1.0, 90.0),  # 1.5 req/s per GPU
]


def test_recommend_picks_the_obvious_winner() -> None:
    targets = parse_slo(["ttft_p99_s=2", "tpot_p99_s=0.05"])
    assert targets == {"ttft_s.p99": 2.0, "tpot_s.p99": 0.05}
    rec = recommend(SYNTHETIC, targets)
    assert [c.row["point_id"] for c in rec.ranked] == ["b", "a", "d"]
    assert [r["point_id"] for r, _ in rec.failing] == ["c"]
    # serve 10 req/s: b needs 2 copies = 4 GPUs, a needs 5 GPUs, d needs 8
    rec = recommend(SYNTHETIC, targets, rate=10.0, gpu_of=dict.fromkeys("abcd", "h100-sxm"))
    assert [(c.row["point_id"], c.total_gpus) for c in rec.ranked] == [
        ("b", 4), ("a", 5), ("d", 8)]
    text = "\n".join(format_recommendation(rec, ["deployment.tensor_parallel"], None))
    assert "recommended: tensor_parallel=2" in text
    assert "needs 5 GPUs" in text and "no GPU price known" in text
    assert "ttft_s.p99 3 s > 2 s" in text
    # with a price, the ranking is in dollars per hour
    rec = recommend(SYNTHETIC, targets, rate=10.0, prices={"h100-sxm": 2.0},
                    gpu_of=dict.fromkeys("abcd", "h100-sxm"))
    assert rec.priced and rec.ranked[0].usd_per_hour == pytest.approx(8.0)
    # within 8 GPUs: d fits once (12 req/s), b four times (20 req/s)
    rec = recommend(SYNTHETIC, targets, gpus=8)
    assert rec.ranked[0].row["point_id"] == "b" and rec.ranked[0].copies == 4


def test_recommend_cli_on_a_real_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_sweep(small_sweep(), tmp_path, workers=2)
    main(["recommend", str(tmp_path), "--slo", "ttft_p99_s=5", "--rate", "20"])
    out = capsys.readouterr().out
    assert "recommended:" in out and "runner-ups" in out and "frontier simulate" in out


def test_hf_repo_ids_come_from_the_catalog() -> None:
    assert hf_repo_id("llama-3.1-8b") == "meta-llama/Llama-3.1-8B"
    assert hf_repo_id("llama-3.3-70b") == "meta-llama/Llama-3.3-70B-Instruct"


SCENARIO = {
    "model": "llama-3.3-70b",
    "hardware": {"gpu": "h100-sxm"},
    "deployment": {"replicas": 2, "tensor_parallel": 4, "pipeline_parallel": 1,
                   "precision": {"weights": "fp8", "activations": "fp8", "kv_cache": "fp8"},
                   "scheduler": {"max_num_seqs": 128, "max_num_batched_tokens": 4096,
                                 "chunked_prefill": False},
                   "gpu_memory_utilization": 0.85},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 4.0},
                 "input_tokens": {"kind": "fixed", "value": 1000},
                 "output_tokens": {"kind": "uniform", "min": 100, "max": 300},
                 "num_requests": 500, "seed": 3},
}


@pytest.mark.parametrize("engine,flags", [
    ("vllm", ["vllm serve meta-llama/Llama-3.3-70B-Instruct", "--tensor-parallel-size 4",
              "--pipeline-parallel-size 1", "--max-num-seqs 128",
              "--max-num-batched-tokens 4096", "--no-enable-chunked-prefill",
              "--gpu-memory-utilization 0.85", "--kv-cache-dtype fp8", "--quantization fp8",
              "CUDA_VISIBLE_DEVICES=4,5,6,7"]),
    ("sglang", ["python -m sglang.launch_server --model-path meta-llama/Llama-3.3-70B-Instruct",
                "--tp-size 4", "--max-running-requests 128", "--chunked-prefill-size -1",
                "--mem-fraction-static 0.85", "--kv-cache-dtype fp8_e4m3",
                "--quantization fp8"]),
    ("trtllm", ["trtllm-serve meta-llama/Llama-3.3-70B-Instruct", "--tp_size 4", "--pp_size 1",
                "--max_batch_size 128", "--max_num_tokens 4096",
                "--kv_cache_free_gpu_memory_fraction 0.85", "--extra_llm_api_options",
                "enable_chunked_prefill: false", "dtype: fp8"]),
])
def test_export_uses_the_engines_real_flag_names(engine: str, flags: list[str]) -> None:
    text = "\n".join(launch_commands(SCENARIO, engine)).replace(" \\\n    ", " ")
    for flag in flags:
        assert flag in text, f"{flag!r} missing from:\n{text}"
    bench = "\n".join(bench_command(SCENARIO, engine)).replace(" \\\n    ", " ")
    for flag in ("vllm bench serve", "--dataset-name random", "--random-input-len 1000",
                 "--random-output-len 200", "--random-range-ratio 0.5", "--request-rate 4",
                 "--num-prompts 500", "--seed 3"):
        assert flag in bench, f"{flag!r} missing from:\n{bench}"


def test_export_bench_for_closed_loop_uses_max_concurrency() -> None:
    sc = dict(SCENARIO, workload=dict(SCENARIO["workload"],
                                      arrival={"kind": "closed_loop", "concurrency": 32}))
    bench = "\n".join(bench_command(sc, "vllm"))
    assert "--max-concurrency 32" in bench and "--request-rate inf" in bench


def test_export_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_sweep(small_sweep(), tmp_path, workers=2)
    main(["export", str(tmp_path), "--top", "2", "--engine", "sglang"])
    out = capsys.readouterr().out
    assert out.count("python -m sglang.launch_server") == 2
    assert out.count("vllm bench serve") == 2


def test_point_ids_that_look_like_numbers_read_back_as_text(tmp_path: Path) -> None:
    """A point ID is 16 hex digits: '1234567890123456' would read back as an int and
    '0123e45678901234' as a float (inf past 1e308) unless the ID columns stay text."""
    from simulator.sweep.table import write_csv

    ids = ["1234567890123456", "0123e45678901234", "9e99999999999999", "abcdef0123456789"]
    rows = [{"point_id": i, "point_status": "ok", "point_error": None, "x": 1.5} for i in ids]
    write_csv(tmp_path / "r.csv", rows, ["point_id", "point_status", "point_error", "x"])
    _, back = read_csv(tmp_path / "r.csv")
    assert [r["point_id"] for r in back] == ids
    assert back[0]["point_error"] is None and back[0]["x"] == 1.5
