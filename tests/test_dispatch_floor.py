"""The dispatch floor of an eager-mode engine (engines/style.py): the host launches each
layer's kernels and the GPU runs behind it, so a step's GPU part takes at least layers per
stage x dispatch_us_per_layer. vllm-0.2's 460 us comes from the DistServe authors' profile of
that vLLM at TP1-4 (engine_styles.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest

import simulator
from simulator.cost.shape import BatchShape
from simulator.engines.style import EngineStyle, load_engine_styles
from simulator.errors import InputError
from simulator.inputs.scenario import load_scenario_file
from simulator.serving.engine_build import build_engine


def test_floor_holds_the_gpu_part_then_host_adds_or_overlaps() -> None:
    serial = EngineStyle("s", 6.6e-3, 0.0, False, dispatch_s_per_layer=0.46e-3).with_layers(64)
    # 64 layers x 0.46 ms = 29.44 ms floor
    assert serial.dispatch_floor_s == pytest.approx(29.44e-3)
    # GPU 25.8 ms is held to 29.44 ms, then 6.6 ms host in series: 36.04 ms
    assert serial.step_time_s(25.8e-3, 1) == pytest.approx(36.04e-3)
    # GPU 40 ms is above the floor: 40 + 6.6 = 46.6 ms
    assert serial.step_time_s(40e-3, 1) == pytest.approx(46.6e-3)
    ovl = EngineStyle("o", 50e-3, 0.0, True, dispatch_s_per_layer=0.46e-3).with_layers(64)
    # overlapped: max(max(25.8, 29.44), 50) = 50 ms
    assert ovl.step_time_s(25.8e-3, 1) == pytest.approx(50e-3)
    # no floor without a per-layer figure
    assert EngineStyle("n", 0.0, 0.0, False).with_layers(64).step_time_s(1e-3, 1) == 1e-3


def test_style_file_key(tmp_path: Path) -> None:
    body = "{description: d, cpu_step_us: 0, cpu_per_seq_us: 0, overlap_cpu_with_gpu: false, "
    path = tmp_path / "s.yaml"
    path.write_text(f"a: {body}dispatch_us_per_layer: 460, source: s}}\nb: {body}source: s}}\n")
    styles = load_engine_styles(path)
    assert styles["a"].dispatch_s_per_layer == pytest.approx(460e-6)
    assert styles["b"].dispatch_s_per_layer == 0.0
    bad = tmp_path / "neg.yaml"  # another path: files are parsed once per path
    bad.write_text(f"neg: {body}dispatch_us_per_layer: -1, source: s}}\n")
    with pytest.raises(InputError, match=r"neg.*dispatch_us_per_layer"):
        load_engine_styles(bad)


def _opt13b(tp: int, num_requests: int = 1) -> dict[str, object]:
    return {
        "model": "opt-13b",
        "hardware": {"gpu": "a100-sxm", "gpus_per_node": 8},
        "deployment": {"tensor_parallel": tp, "engine": "vllm-0.2",
                       "precision": {"weights": "fp16", "activations": "fp16",
                                     "kv_cache": "fp16"}},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 0.01},
                     "input_tokens": {"kind": "fixed", "value": 1000},
                     "output_tokens": {"kind": "fixed", "value": 21},
                     "num_requests": num_requests, "seed": 0},
    }


def test_vllm_02_opt13b_tp4_decode_steps_are_the_floor_plus_host() -> None:
    """OPT-13B (40 layers) at TP4 on A100: floor 40 x 0.46 ms = 18.4 ms, above the GPU's
    one-sequence decode step (~7 ms, the profile's TP4 step is 21.7 ms), so each of the 20
    decode steps of a lone request takes 18.4 + 6.6 ms host = 25.0 ms: its TPOT."""
    s, _ = load_scenario_file(_opt13b(4))
    engine = build_engine(s)
    assert engine.style.dispatch_floor_s == pytest.approx(18.4e-3)
    assert engine.step_model.time_s(BatchShape(decode_seqs=1, decode_context_tokens=1010)) < 10e-3
    d = simulator.simulate(_opt13b(4)).to_dict()
    assert d["tpot_s"]["p50"] == pytest.approx(25.0e-3, rel=1e-9)


def test_vllm_02_opt13b_tp1_step_is_the_larger_of_gpu_and_floor_plus_host() -> None:
    """At TP1 the GPU's OPT-13B decode step at a 1000-token context is 18.2 ms on the A100
    profile (26 GB of FP16 weights at 0.76 x 2.039 TB/s plus 1.5 us per kernel), just
    under the 18.4 ms floor: the step is max(GPU, floor) + 6.6 ms host = 25.0 ms. (With the
    former 4 us per kernel the GPU step was 18.6 ms and exceeded the floor.)"""
    s, _ = load_scenario_file(_opt13b(1))
    engine = build_engine(s)
    gpu = engine.step_model.time_s(BatchShape(decode_seqs=1, decode_context_tokens=1000))
    floor = engine.style.dispatch_floor_s
    assert gpu == pytest.approx(18.2e-3, rel=0.02)
    assert engine.style.step_time_s(gpu, 1) == pytest.approx(max(gpu, floor) + 6.6e-3)
    assert engine.style.step_time_s(floor * 1.1, 1) == pytest.approx(floor * 1.1 + 6.6e-3)
