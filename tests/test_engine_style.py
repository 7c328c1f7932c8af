"""Engine styles: the shipped file loads, step-time arithmetic, one-line errors for bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.engines.style import EngineStyle, load_engine_styles
from simulator.errors import InputError

GOOD_BODY = (
    "{description: d, cpu_step_us: 100, cpu_per_seq_us: 2, overlap_cpu_with_gpu: true, source: s}"
)


def test_shipped_styles_load() -> None:
    styles = load_engine_styles()
    assert set(styles) == {"vllm", "sglang", "trtllm"}
    for name, style in styles.items():
        assert style.name == name
        assert style.cpu_step_s >= 0 and style.cpu_per_seq_s >= 0
        # All three engines overlap host work with the GPU by default in current releases.
        assert style.overlap_cpu_with_gpu
        assert style.host_time_s(1) > 0
    assert styles["trtllm"].kv_admission == "reserve_full"
    assert styles["vllm"].kv_admission == "on_demand"


def test_host_time_is_fixed_plus_per_sequence() -> None:
    style = EngineStyle("x", cpu_step_s=1e-3, cpu_per_seq_s=10e-6, overlap_cpu_with_gpu=False)
    # 1 ms + 100 * 10 us = 2 ms
    assert style.host_time_s(100) == pytest.approx(2e-3)
    assert style.host_time_s(0) == pytest.approx(1e-3)


def test_serial_style_adds_host_to_gpu() -> None:
    style = EngineStyle("serial", cpu_step_s=2e-3, cpu_per_seq_s=0.0, overlap_cpu_with_gpu=False)
    # gpu 10 ms + host 2 ms = 12 ms
    assert style.step_time_s(10e-3, num_seqs=8) == pytest.approx(12e-3)


def test_overlapped_style_takes_the_longer_of_gpu_and_host() -> None:
    hidden = EngineStyle("ovl", cpu_step_s=2e-3, cpu_per_seq_s=0.0, overlap_cpu_with_gpu=True)
    # host 2 ms hides under gpu 10 ms
    assert hidden.step_time_s(10e-3, num_seqs=8) == pytest.approx(10e-3)
    exposed = EngineStyle("ovl", cpu_step_s=5e-3, cpu_per_seq_s=100e-6, overlap_cpu_with_gpu=True)
    # host 5 ms + 100 * 0.1 ms = 15 ms > gpu 10 ms
    assert exposed.step_time_s(10e-3, num_seqs=100) == pytest.approx(15e-3)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "styles.yaml"
    path.write_text(text)
    return path


def test_unknown_key_names_style_and_key(tmp_path: Path) -> None:
    body = GOOD_BODY[:-1] + ", cpu_per_token_us: 3}"
    path = _write(tmp_path, f"good: {GOOD_BODY}\nbadstyle: {body}\n")
    with pytest.raises(InputError) as err:
        load_engine_styles(path)
    msg = str(err.value)
    assert "badstyle" in msg and "cpu_per_token_us" in msg
    assert "\n" not in msg


def test_negative_value_names_style_and_key(tmp_path: Path) -> None:
    body = GOOD_BODY.replace("cpu_per_seq_us: 2", "cpu_per_seq_us: -1")
    path = _write(tmp_path, f"negstyle: {body}\n")
    with pytest.raises(InputError) as err:
        load_engine_styles(path)
    msg = str(err.value)
    assert "negstyle" in msg and "cpu_per_seq_us" in msg


def test_missing_key_and_non_mapping_top_level(tmp_path: Path) -> None:
    body = GOOD_BODY.replace(", source: s", "")
    with pytest.raises(InputError, match=r"nosource.*source"):
        load_engine_styles(_write(tmp_path, f"nosource: {body}\n"))
    with pytest.raises(InputError, match="top level"):
        load_engine_styles(_write(tmp_path, "- just a list\n"))


def test_good_tmp_file_converts_microseconds_to_seconds(tmp_path: Path) -> None:
    styles = load_engine_styles(_write(tmp_path, f"s: {GOOD_BODY}\n"))
    assert styles["s"].cpu_step_s == pytest.approx(100e-6)
    assert styles["s"].cpu_per_seq_s == pytest.approx(2e-6)
