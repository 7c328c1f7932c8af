"""A small collective's latency per GPU beyond two (the GPU profile's
efficiency.allreduce_latency_per_peer_us, replaced by an engine style's or a deployment
overhead's allreduce_latency_per_peer_*; cost/comm.py) and `frontier calibrate --fit comm`,
which fits it per engine style."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import yaml

from simulator.calibration.fit import fit
from simulator.calibration.params import FreeParameter, Observation, ObservationSet, Target
from simulator.cost.comm import (
    PER_PEER_GROUP_MAX,
    allgather_time_s,
    allreduce_time_s,
    scale_up_latency_s,
)
from simulator.hardware.profile import load_hardware
from tests.test_calibrate import _row, fit_one_kind

COMM_KEY = "efficiency.allreduce_latency_per_peer_us"
STYLE_KEY = "allreduce_latency_per_peer_us"
PARAM = f"vllm.{STYLE_KEY}"


def _shipped_us() -> float:
    from simulator.engines.style import engine_style

    return (engine_style("vllm").allreduce_latency_per_peer_s or 0.0) * 1e6


TRUE_US = round(_shipped_us(), 9) + 2.0  # 2 us a peer above what vLLM's style ships


def test_latency_grows_per_gpu_beyond_two_up_to_eight() -> None:
    """H100 with 7 us at two GPUs and 2 us a peer: a 64 kB all-reduce (no bandwidth term
    worth the name: 2(n-1)/n x 64 kB at 300 GB/s is 0.3-0.4 us) takes 7 + 2 x (n - 2) us up to
    8 GPUs, 7 + 12 = 19 us at 8 and still 19 us at 16 (held at its 8-GPU value)."""
    hw = dataclasses.replace(load_hardware("h100-sxm"), allreduce_latency_s=7e-6,
                             allreduce_latency_per_peer_s=2e-6)
    nbytes = 64e3

    def bw_s(n: int) -> float:
        return 2 * (n - 1) / n * nbytes / hw.allreduce_bus_bytes_per_s

    for n, latency_us in ((2, 7.0), (4, 11.0), (8, 19.0)):
        assert allreduce_time_s(nbytes, n, hw) == pytest.approx(latency_us * 1e-6 + bw_s(n))
    # 16 GPUs of one domain (GB200 NVL72): held at the 8-GPU value, not 7 + 2 x 14 = 35 us
    assert PER_PEER_GROUP_MAX == 8
    assert scale_up_latency_s(16, hw) == pytest.approx(19e-6)
    nvl72 = dataclasses.replace(hw, scale_up_domain_size=72)
    assert allreduce_time_s(nbytes, 16, nvl72) == pytest.approx(19e-6 + bw_s(16))
    # an all-gather pays the same latency
    assert allgather_time_s(nbytes, 8, hw) == pytest.approx(
        19e-6 + 7 / 8 * nbytes / hw.allreduce_bus_bytes_per_s)
    # at 0 (every shipped profile) the latency is the same at every size, as before
    flat = dataclasses.replace(hw, allreduce_latency_per_peer_s=0.0)
    assert allreduce_time_s(nbytes, 8, flat) - bw_s(8) == pytest.approx(7e-6)


def test_a_fit_leaves_a_prior_that_sits_on_its_bound() -> None:
    """prediction = 1 s + value x 0.1 s, measured 1.3 s: the value is 3, and the fit finds it
    from a prior of 0 on its lower bound (from a bound, the trust-region method alone scales
    its steps to nothing)."""
    p = FreeParameter("x", Target("hardware", "h100-sxm", COMM_KEY), 0.0, 0.0, 10.0,
                      scale="linear")
    obs = ObservationSet.of([Observation(1.3, "tpot_s", f"c{i}", ("g", "e", "m"))
                             for i in range(5)])

    def predict(values: dict[str, float], indices: np.ndarray) -> np.ndarray:
        return np.full(len(indices), 1.0 + 0.1 * values["x"])

    got = fit([p], obs, predict)  # type: ignore[arg-type]
    assert got.parameters[0].value == pytest.approx(3.0, rel=1e-3)


def _comm_row(i: int, tp: int, conc: int, isl: int) -> dict[str, str]:
    return _row(i, "llama-3.1-8b", tp, conc, isl, 128)


@pytest.fixture(scope="module")
def overlay(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TP 4 and 8, two prompt lengths, five concurrencies on H100 under vLLM (20 runs of 4
    configurations), figures from the estimate at 2 us a peer above vLLM's shipped value."""
    folder = tmp_path_factory.mktemp("calcomm")
    rows = [_comm_row(i, tp, conc, isl) for i, (tp, isl, conc) in enumerate(
        (tp, isl, conc) for tp in (4, 8) for isl in (512, 2048) for conc in (1, 4, 16, 32, 64))]
    return fit_one_kind(folder, rows, PARAM, TRUE_US, "comm", round(_shipped_us(), 9))


def test_calibrate_fit_comm_recovers_the_engines_per_peer_latency(overlay: Path) -> None:
    data = yaml.safe_load(overlay.read_text())
    (value,) = [v for v in data["values"] if v["target"]["key"] == STYLE_KEY]
    assert value["target"] == {"kind": "engine_style", "name": "vllm", "key": STYLE_KEY}
    assert value["value"] == pytest.approx(TRUE_US, rel=0.05)
    assert value["prior"] == pytest.approx(_shipped_us())
    # only the collective's latency: no host cost or streaming fraction was declared
    assert len(data["values"]) == 1


def test_the_overlay_applies_it_as_the_deployments_overhead(overlay: Path) -> None:
    """--calibration sets deployment.overhead.allreduce_latency_per_peer_s, which the engine
    build puts on the GPU profile its step model costs with (the style's and the profile's
    value replaced)."""
    from simulator.calibration.host_costs import calibrated, host_costs
    from simulator.calibration.overlay import read_overlay
    from simulator.inputs.scenario import load_scenario_file
    from simulator.serving.engine_build import build_engine

    data = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
            "deployment": {"tensor_parallel": 8, "engine": "vllm"},
            "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1.0},
                         "input_tokens": {"kind": "fixed", "value": 100},
                         "output_tokens": {"kind": "fixed", "value": 10},
                         "num_requests": 5}}
    with_fit = calibrated(data, host_costs(read_overlay(overlay)))
    per_peer_s = with_fit["deployment"]["overhead"]["allreduce_latency_per_peer_s"]
    assert per_peer_s == pytest.approx(TRUE_US * 1e-6, rel=0.05)
    scenario, _ = load_scenario_file(with_fit)
    assert build_engine(scenario).hw.allreduce_latency_per_peer_s == per_peer_s


def test_the_deployment_overrides_the_style_which_overrides_the_profile() -> None:
    from simulator.inputs.deployment import Overhead
    from simulator.serving.engine_hardware import with_engine_collectives

    hw = dataclasses.replace(load_hardware("h100-sxm"), allreduce_latency_per_peer_s=1e-6)
    assert with_engine_collectives(hw, None, None) is hw
    assert with_engine_collectives(hw, 2e-6, None).allreduce_latency_per_peer_s == 2e-6
    both = with_engine_collectives(hw, 2e-6, Overhead(allreduce_latency_per_peer_s=3e-6))
    assert both.allreduce_latency_per_peer_s == 3e-6
    # an overhead that sets other keys only keeps the style's
    other = with_engine_collectives(hw, 2e-6, Overhead(step_s=0.001))
    assert other.allreduce_latency_per_peer_s == 2e-6
