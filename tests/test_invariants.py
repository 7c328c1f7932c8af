"""Reliability: the invariant checker (`simulate(..., check=True)`, `simulate --check`), broken
schedulers it must catch, extreme but legal inputs, the "unstable" warning and memory per request.
"""

from __future__ import annotations

import math
import pickle
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simulator
from simulator.cli.app import EXIT_INVARIANT, main
from simulator.cost.step import StepModel
from simulator.serving.engine_build import build_engine
from simulator.serving.invariants import InvariantChecker, InvariantViolation
from simulator.serving.sched_types import PlannedStep
from simulator.serving.scheduler import Scheduler
from simulator.serving.simulation import run, unstable_queue
from simulator.workload.stream import build_stream

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "scenarios").glob("*.yaml"))
SHIPPED_CAP = 200  # requests per shipped scenario under --check (a debug mode: a few s each)


def small(**workload: Any) -> dict[str, Any]:
    """llama-3.1-8b on one H100 under a small Poisson load, workload keys overridable."""
    w: dict[str, Any] = {
        "arrival": {"kind": "poisson", "rate_per_s": 8.0},
        "input_tokens": {"kind": "uniform", "min": 50, "max": 3000},
        "output_tokens": {"kind": "uniform", "min": 1, "max": 300},
        "num_requests": 120,
        "seed": 3,
    }
    w.update(workload)
    return {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"}, "workload": w}


# ------------------------------------------------------------------ the checker passes


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_scenarios_keep_every_invariant(path: Path) -> None:
    loaded = simulator.load_scenario(path)
    n = min(loaded.scenario.workload.num_requests, SHIPPED_CAP)
    loaded = simulator.load_scenario(path, [f"workload.num_requests={n}"])
    r = simulator.simulate(loaded, check=True)
    assert r.status == "completed"
    assert r.summary["requests_completed"] + r.summary["requests_dropped"] == len(r.requests)


@pytest.mark.parametrize(
    "deployment",
    [
        {"scheduler": {"chunked_prefill": False, "max_num_seqs": 16}},
        {"scheduler": {"max_num_seqs": 32, "max_num_batched_tokens": 512}},
        {"engine": "trtllm", "scheduler": {"max_num_seqs": 64}},
        {"engine": "sglang", "scheduler": {"policy": "priority"}},
        {"replicas": 2, "router": "least_outstanding"},
        # a small KV pool: preemption and recompute on every path
        {"gpu_memory_utilization": 0.26, "scheduler": {"max_num_seqs": 128}},
        {"gpu_memory_utilization": 0.26, "scheduler": {"chunked_prefill": False}},
    ],
    ids=["no-chunking", "small-budget", "trtllm", "priority", "two-replicas", "preempt",
         "preempt-no-chunking"],
)
def test_checker_passes_varied_engines(deployment: dict[str, Any]) -> None:
    s = small(priorities={"values": [0, 1], "weights": [1, 3]})
    if "gpu_memory_utilization" in deployment:
        s["workload"]["arrival"] = {"kind": "offline"}  # everyone at once: the KV pool fills
    s["deployment"] = deployment
    if deployment.get("replicas") == 2:
        s["hardware"]["gpus_per_node"] = 2
    r = simulator.simulate(s, check=True)
    assert r.status == "completed"
    if "gpu_memory_utilization" in deployment:
        assert r.preemptions > 0  # the case meant to exercise preemption does


def test_checker_passes_closed_loop_offline_and_time_limit() -> None:
    simulator.simulate(small(arrival={"kind": "closed_loop", "concurrency": 7}), check=True)
    simulator.simulate(small(arrival={"kind": "offline"}), check=True)
    s = small(arrival={"kind": "poisson", "rate_per_s": 500.0}, num_requests=400)
    s["limits"] = {"max_simulated_time_s": 5.0}
    r = simulator.simulate(s, check=True)
    assert r.status == "time_limit"  # requests still in flight are allowed then


# ----------------------------------------------------------- broken schedulers are caught


def violation(scenario: dict[str, Any]) -> InvariantViolation:
    with pytest.raises(InvariantViolation) as info:
        simulator.simulate(scenario, check=True)
    return info.value


def test_admission_that_forgets_its_block_reservation_trips_kv_blocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    admit = Scheduler._admit

    def leaky(self: Scheduler, now_s: float, budget: int, decode_seqs: int, chunks: Any) -> Any:
        admitted = admit(self, now_s, budget, decode_seqs, chunks)
        self.free_blocks += sum(r.blocks for r, _ in admitted)  # reserved, then forgotten
        return admitted

    monkeypatch.setattr(Scheduler, "_admit", leaky)
    v = violation(small())
    assert v.invariant == "kv_blocks"
    assert v.replica == 0 and v.step == 0 and v.time_s > 0
    text = str(v)
    assert "\n" not in text
    assert "'kv_blocks'" in text and "replica 0" in text and "step 0" in text and "t=" in text


def test_double_counted_freed_blocks_trip_kv_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    leave = Scheduler._leave_decode

    def twice(self: Scheduler, r: Any, step: int) -> int:
        return 2 * leave(self, r, step)  # a finished decoder's blocks counted free twice

    monkeypatch.setattr(Scheduler, "_leave_decode", twice)
    assert violation(small()).invariant == "kv_blocks"


def test_too_many_sequences_trip_batch_seqs(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = Scheduler.plan

    def inflated(self: Scheduler, now_s: float) -> PlannedStep | None:
        p = plan(self, now_s)
        if p is not None:
            p.num_seqs = self.cfg.max_num_seqs + 1
        return p

    monkeypatch.setattr(Scheduler, "plan", inflated)
    assert violation(small()).invariant == "batch_seqs"


def test_ignoring_max_num_seqs_trips_running_seqs(monkeypatch: pytest.MonkeyPatch) -> None:
    s = small(arrival={"kind": "offline"}, num_requests=40)
    s["deployment"] = {"scheduler": {"max_num_seqs": 4, "max_num_batched_tokens": 65536}}
    admit = Scheduler._admit

    def greedy(self: Scheduler, now_s: float, budget: int, decode_seqs: int, chunks: Any) -> Any:
        cfg = self.cfg
        object.__setattr__(cfg, "max_num_seqs", 1000)  # the scheduler forgets its cap...
        try:
            return admit(self, now_s, budget, decode_seqs, chunks)
        finally:
            object.__setattr__(cfg, "max_num_seqs", 4)  # ...the checker still knows it

    monkeypatch.setattr(Scheduler, "_admit", greedy)
    assert violation(s).invariant in ("batch_seqs", "running_seqs")


def test_step_faster_than_the_roofline_trips_step_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(StepModel, "time_s", lambda self, b: 1e-6)
    v = violation(small())
    assert v.invariant == "step_time" and "roofline floor" in str(v)


def test_non_positive_step_trips_step_time(monkeypatch: pytest.MonkeyPatch) -> None:
    s = small()
    s["deployment"] = {"overhead": {"step_s": 0.0, "per_seq_s": 0.0}}
    monkeypatch.setattr(StepModel, "time_s", lambda self, b: 0.0)
    v = violation(s)
    assert v.invariant == "step_time" and "finite and positive" in str(v)


def test_clock_going_back_trips_time_monotone() -> None:
    loaded = simulator.load_scenario(small())
    engine = build_engine(loaded.scenario)
    checker = InvariantChecker(engine)
    checker.last_now = math.inf  # as if an earlier step had happened in the future
    stream, _ = build_stream(loaded.scenario, None)
    with pytest.raises(InvariantViolation) as info:
        run(loaded.scenario, engine, stream, check=checker)
    assert info.value.invariant == "time_monotone"


def checked_run(scenario: dict[str, Any]) -> tuple[InvariantChecker, Any]:
    loaded = simulator.load_scenario(scenario)
    engine = build_engine(loaded.scenario)
    checker = InvariantChecker(engine)
    stream, _ = build_stream(loaded.scenario, None)
    return checker, run(loaded.scenario, engine, stream, check=checker)


def test_lost_request_trips_conservation() -> None:
    checker, out = checked_run(small(num_requests=30))
    checker.finish(out)  # the honest output passes
    out.records["finish_s"][7] = np.nan  # a request that vanished in a "completed" run
    with pytest.raises(InvariantViolation) as info:
        checker.finish(out)
    assert info.value.invariant == "conservation" and info.value.step is None
    assert "at the end" in str(info.value) and "on run" in str(info.value)


def test_times_out_of_order_trip_request_times() -> None:
    checker, out = checked_run(small(num_requests=30))
    out.records["first_token_s"][3] = out.records["finish_s"][3] + 1.0
    with pytest.raises(InvariantViolation) as info:
        checker.finish(out)
    assert info.value.invariant == "request_times" and "request 3" in str(info.value)


def test_blocks_left_behind_trip_kv_freed() -> None:
    checker, out = checked_run(small(num_requests=30))
    checker.replicas[0].sched.free_blocks -= 1
    with pytest.raises(InvariantViolation) as info:
        checker.finish(out)
    assert info.value.invariant == "kv_freed" and info.value.replica == 0


def test_more_tokens_than_sampled_trip_sampled_tokens() -> None:
    checker, out = checked_run(small(num_requests=30))
    checker.sampled_rows = 10
    with pytest.raises(InvariantViolation) as info:
        checker.finish(out)
    assert info.value.invariant == "sampled_tokens"


class ResultChecker(InvariantChecker):
    """Keeps the result so a test can tamper with it and check it again."""

    result: Any = None

    def check_result(self, result: Any) -> None:
        super().check_result(result)
        self.result = result


def test_result_bounds_trip_throughput_and_finite() -> None:
    loaded = simulator.load_scenario(small(num_requests=40))
    checker = ResultChecker(build_engine(loaded.scenario))
    simulator.simulate(loaded, check=checker)
    r = checker.result
    bound = sum(checker.max_rate.values())
    assert 0 < r.summary["output_tokens_per_s"] <= bound
    r.summary["output_tokens_per_s"] = bound * 1.01
    with pytest.raises(InvariantViolation, match="throughput_bound"):
        checker.check_result(r)
    r.summary["output_tokens_per_s"] = bound / 2
    r.summary["ttft_s"]["p90"] = math.nan
    with pytest.raises(InvariantViolation, match=r"'finite_result'.*ttft_s\.p90 is nan"):
        checker.check_result(r)


def test_violation_pickles_with_its_fields() -> None:
    v = InvariantViolation("kv_blocks", 2, 17, 3.5, "detail")
    back = pickle.loads(pickle.dumps(v))
    assert (back.invariant, back.replica, back.step, back.time_s, str(back)) == (
        "kv_blocks", 2, 17, 3.5, str(v)
    )


def test_cli_check_reports_a_violation_in_one_line_with_status_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(small(num_requests=20)))
    leave = Scheduler._leave_decode
    monkeypatch.setattr(Scheduler, "_leave_decode", lambda self, r, s: 2 * leave(self, r, s))
    with pytest.raises(SystemExit) as info:
        main(["simulate", str(path), "--check"])
    assert info.value.code == EXIT_INVARIANT == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "'kv_blocks'" in err and "replica 0" in err and "step " in err
    # without --check the same bug is not looked for (the plain run is not slowed down)
    run_cli_ok(["simulate", str(path), "--json"])


def run_cli_ok(argv: list[str]) -> None:
    try:
        main(argv)
    except SystemExit as exc:
        assert exc.code in (None, 0)


# --------------------------------------------------------------- extreme but legal inputs


def test_128k_context_on_a_model_that_supports_it() -> None:
    s = small(
        arrival={"kind": "offline"},
        input_tokens={"kind": "fixed", "value": 120_000},
        output_tokens={"kind": "fixed", "value": 100},
        num_requests=2,
    )
    r = simulator.simulate(s, check=True)
    assert r.status == "completed" and r.summary["requests_completed"] == 2
    assert r.summary["ttft_s"]["p50"] > 0.5  # 120k tokens of prefill take a while on one H100


def test_one_token_outputs_have_no_tpot_and_no_itl() -> None:
    r = simulator.simulate(small(output_tokens={"kind": "fixed", "value": 1}), check=True)
    d = r.to_dict()
    assert d["requests_completed"] == 120
    assert d["tpot_s"] == {"mean": None, "p50": None, "p90": None, "p99": None}
    assert d["itl_s"] == {"mean": None, "p50": None, "p90": None, "p99": None}
    assert d["output_tokens_per_s_per_user"]["p50"] is None
    assert d["ttft_s"]["p50"] is not None


OVERLOAD = {"arrival": {"kind": "poisson", "rate_per_s": 2000.0}, "num_requests": 2000,
            "input_tokens": {"kind": "fixed", "value": 1000},
            "output_tokens": {"kind": "fixed", "value": 250}}  # ~100x what one H100 serves


@pytest.mark.parametrize(
    ("limits", "status"),
    [
        ({"max_simulated_time_s": 20.0}, "time_limit"),
        ({"max_waiting_requests": 300}, "queue_limit"),
    ],
)
def test_overload_with_limits_stops_early(limits: dict[str, Any], status: str) -> None:
    s = small(**OVERLOAD)
    s["limits"] = limits
    r = simulator.simulate(s)
    assert r.status == status
    assert r.summary["requests_completed"] < 2000
    assert any("stopped early" in w for w in r.warnings)


def test_overload_without_limits_ends_and_warns_unstable() -> None:
    """Arrivals are finite, so an open-loop run always ends; it says the queue kept growing."""
    r = simulator.simulate(small(**OVERLOAD), check=True)
    assert r.status == "completed" and r.summary["requests_completed"] == 2000
    (warning,) = [w for w in r.warnings if w.startswith("unstable:")]
    assert "queue grew throughout the run" in warning and "max_num_seqs × replicas = 256" in warning


def test_stable_and_offline_runs_do_not_warn_unstable() -> None:
    for s in (small(), small(arrival={"kind": "offline"}, num_requests=600)):
        assert not any(w.startswith("unstable") for w in simulator.simulate(s).warnings)


def test_unstable_rule() -> None:
    assert unstable_queue([10, 200, 400, 800], 256)
    assert not unstable_queue([10, 200, 400, 250], 256)  # not above one full batch at the end
    assert not unstable_queue([300, 900, 800, 1200], 256)  # a dip: not growing throughout
    assert not unstable_queue([300, 900], 256)  # stopped early: no verdict


# ----------------------------------------------------------------------- memory per request

MEMORY_REQUESTS = 20_000
MAX_BYTES_PER_REQUEST = 1024  # peak traced allocation per request; 1M requests -> < 1 GiB


def test_memory_per_request_is_bounded() -> None:
    """Peak Python/numpy allocations (tracemalloc) of a 20k-request run, per request.

    What a request costs: its row in the records (57 B), its stream lengths and arrival (32 B),
    summary temporaries (a few arrays of 8 B per request), a share of the per-step log (24 B
    per step), and its Request object while in flight. Offline arrivals put every request in
    flight at once (the worst case for Request objects) and need few steps, which keeps the
    run (slowed several times by tracemalloc) to a few seconds. Measured: ~330 B/request.
    `frontier bench-scale` reports the same at 1M requests (peak RSS).
    """
    s = small(
        input_tokens={"kind": "uniform", "min": 100, "max": 500},
        output_tokens={"kind": "uniform", "min": 1, "max": 40},
        arrival={"kind": "offline"},
        num_requests=MEMORY_REQUESTS,
    )
    loaded = simulator.load_scenario(s)
    simulator.simulate(small(num_requests=5))  # warm the caches outside the measurement
    tracemalloc.start()
    try:
        r = simulator.simulate(loaded)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r.status == "completed"
    assert peak / MEMORY_REQUESTS < MAX_BYTES_PER_REQUEST, f"{peak / MEMORY_REQUESTS:.0f} B/request"
