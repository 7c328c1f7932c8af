"""Hardware profiles: every shipped YAML loads, units convert once, bad input fails clearly."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simulator.errors import InputError
from simulator.hardware.profile import (
    HardwareFile,
    load_hardware,
    load_profile_file,
    profile_paths,
)

REQUIRED = ("h100-sxm", "h200-sxm", "b200", "gb200", "a100-sxm")


def _shipped(name: str) -> Path:
    return profile_paths()[name]


def _raw(name: str) -> dict:
    return yaml.safe_load(_shipped(name).read_text())


@pytest.mark.parametrize(("name", "path"), sorted(profile_paths().items()))
def test_every_profile_loads(name: str, path: Path) -> None:
    hw = load_hardware(name)
    assert hw.name == name == path.stem
    assert load_profile_file(path) == hw
    # Every published block names where its figures come from.
    parsed = HardwareFile.model_validate(yaml.safe_load(path.read_text()))
    blocks = (parsed.compute, parsed.memory, parsed.scale_up, parsed.scale_out, parsed.power)
    for block in (*blocks, parsed.efficiency):
        assert block.source.strip()


def test_required_profiles_exist() -> None:
    assert set(REQUIRED) <= set(profile_paths())


@pytest.mark.parametrize("name", ["h100-sxm", "h200-sxm", "a100-sxm"])
def test_hopper_and_ampere_have_no_fp4(name: str) -> None:
    hw = load_hardware(name)
    assert not hw.supports("fp4")
    assert hw.supports("bf16")


@pytest.mark.parametrize("name", ["b200", "gb200"])
def test_blackwell_has_fp4(name: str) -> None:
    hw = load_hardware(name)
    assert hw.architecture == "blackwell"
    assert hw.supports("fp4")
    assert hw.dense_flops_per_s["fp4"] == pytest.approx(2 * hw.dense_flops_per_s["fp8"])


def test_a100_has_no_fp8() -> None:
    assert not load_hardware("a100-sxm").supports("fp8")


def test_unit_conversions() -> None:
    h100 = load_hardware("h100-sxm")
    assert h100.hbm_bytes_per_s == 3.35e12
    assert h100.hbm_bytes == 79.65 * 2**30  # what CUDA reports, not the datasheet's 80e9
    assert h100.l2_bytes == 50e6
    assert h100.scale_up_bytes_per_s == 450e9  # 900 GB/s counts both directions
    assert h100.scale_out_bytes_per_s == 50e9  # 400 Gb/s NIC
    assert h100.dense_flops_per_s["bf16"] == 989e12
    assert h100.dense_flops_per_s["fp8"] == 1979e12
    raw = _raw("h100-sxm")["efficiency"]
    assert h100.kernel_launch_overhead_s == pytest.approx(raw["kernel_launch_overhead_us"] * 1e-6)
    assert h100.allreduce_bus_bytes_per_s == pytest.approx(raw["allreduce_bus_gb_per_s"] * 1e9)
    assert h100.scale_up_domain_size == 8

    gb200 = load_hardware("gb200")
    assert gb200.scale_up_domain_size == 72
    assert gb200.scale_up_bytes_per_s == 900e9
    assert gb200.dense_flops_per_s["fp4"] == 10000e12


def test_efficiency_fractions_are_fractions() -> None:
    for name in REQUIRED:
        hw = load_hardware(name)
        for value in (
            hw.gemm_compute_fraction,
            hw.hbm_bandwidth_fraction,
            hw.attention_compute_fraction,
            hw.attention_hbm_fraction,
            hw.scale_out_fraction,
        ):
            assert 0 < value <= 1


def test_unknown_name_suggests_closest() -> None:
    with pytest.raises(InputError, match="did you mean 'h100-sxm'"):
        load_hardware("h100")


def _write(tmp_path: Path, name: str, raw: dict) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_unknown_key_names_its_path(tmp_path: Path) -> None:
    raw = _raw("h100-sxm")
    raw["efficiency"]["bogus_factor"] = 0.5
    with pytest.raises(InputError, match=r"efficiency\.bogus_factor"):
        load_profile_file(_write(tmp_path, "h100-sxm", raw))


@pytest.mark.parametrize(("block", "key", "value"), [
    ("compute", "sm_count", True),
    ("memory", "hbm_gb", "80"),
    ("efficiency", "hbm_bandwidth_fraction", "0.8"),
    ("gemm_classes", "dense", {"compute_fraction": {"bf16": True}, "tile_fixed_us": 2.2,
                               "hbm_fraction": 0.8}),
])
def test_a_boolean_or_a_string_is_no_number(tmp_path: Path, block: str, key: str,
                                            value: object) -> None:
    """A profile is as strict as a scenario (issue 34): `sm_count: true` was read as 1 and
    `hbm_gb: "80"` as 80; now each is one error naming its key."""
    raw = _raw("h100-sxm")
    raw[block][key] = value
    with pytest.raises(InputError, match=rf"{block}\.{key}"):
        load_profile_file(_write(tmp_path, "h100-sxm", raw))


def test_negative_bandwidth_names_its_path(tmp_path: Path) -> None:
    raw = _raw("h100-sxm")
    raw["memory"]["hbm_tb_per_s"] = -3.35
    with pytest.raises(InputError, match=r"memory\.hbm_tb_per_s"):
        load_profile_file(_write(tmp_path, "h100-sxm", raw))


def test_name_must_match_file_stem(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file stem"):
        load_profile_file(_write(tmp_path, "not-h100", _raw("h100-sxm")))


def test_env_path_adds_user_profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = _raw("h100-sxm")
    raw["name"] = "my-gpu"
    _write(tmp_path, "my-gpu", raw)
    assert "my-gpu" not in profile_paths()
    monkeypatch.setenv("FRONTIER_HARDWARE_PATH", str(tmp_path))
    assert profile_paths()["my-gpu"] == tmp_path / "my-gpu.yaml"
    hw = load_hardware("my-gpu")
    assert hw.name == "my-gpu"
    assert hw.hbm_bytes_per_s == load_hardware("h100-sxm").hbm_bytes_per_s
    # Shipped profiles stay visible alongside the user's folder.
    assert set(REQUIRED) <= set(profile_paths())


def test_hardware_path_flag_adds_a_user_folder(tmp_path: Path) -> None:
    """`frontier --hardware-path DIR` adds DIR's profiles like FRONTIER_HARDWARE_PATH does."""
    import subprocess
    import sys

    src = (Path(__file__).parent.parent / "hardware_profiles" / "h100-sxm.yaml").read_text()
    (tmp_path / "my-gpu.yaml").write_text(src.replace("name: h100-sxm", "name: my-gpu", 1))
    out = subprocess.run(
        [sys.executable, "-m", "simulator", "--hardware-path", str(tmp_path),
         "explain", "llama-3.1-8b", "--gpu", "my-gpu", "--json"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert '"step_time_s"' in out
