"""Blackwell Ultra profiles (b300, gb300) through the physics they change, not their numbers:
an FP4 GEMM at a compute-bound shape runs at the datasheet FP4 peak x the class fraction, so
B300 is 14/9 and GB300 1.5x their predecessors where the datasheets say FP4 grew and the same
where FP8 did not; decode streaming is unchanged (same HBM3e rate); and the GB300 NVL72 domain
keeps a 72-GPU expert group on NVLink where an HGX B300 node leaves it for the NIC.

Datasheet figures (dense FP4, FP8): B200 9000 / 4500, B300 14000 / 4500, GB200 10000 / 5000,
GB300 15000 / 5000 TFLOP/s (hardware_profiles/*.yaml cite NVIDIA's datasheets).
"""

from __future__ import annotations

import math

import pytest

from simulator.cost.comm import allreduce_time_s, alltoall_time_s
from simulator.cost.gemm import gemm_kernel_s, gemm_rates
from simulator.hardware.profile import load_hardware
from simulator.measured.scenario import domain_size

B200, B300 = load_hardware("b200"), load_hardware("b300")
GB200, GB300 = load_hardware("gb200"), load_hardware("gb300")
FP4_BYTES = 0.5625  # NVFP4: 4 bits + one FP8 scale per 16 elements


def _main_loop_s(hw_name: str, m: int, n: int, k: int, fmt: str) -> float:
    """Kernel compute seconds minus the per-tile fixed cost: the part the MMA rate sets."""
    hw = load_hardware(hw_name)
    rates = gemm_rates(hw, fmt)
    kernel = gemm_kernel_s(hw, rates, m, n, k, 1, FP4_BYTES, FP4_BYTES)
    tm, tn = 128, 128  # FP4 block-scaled tiles (PTX tcgen05.mma kind::mxf4nvf4: M = 128)
    waves = math.ceil(math.ceil(m / tm) * math.ceil(n / tn) / hw.sm_count)
    return kernel.compute_s - waves * rates.tile_fixed_s


def test_b300_fp4_gemm_runs_at_its_peak_times_the_class_fraction() -> None:
    # 16384^3 NVFP4: 128 x 128 = 16,384 tiles over 148 SMs = 111 waves, each tile
    # 2 x 128 x 128 x 16384 FLOP at (0.56 x 14,000 TFLOP/s) / 148 per SM: 10.12 us + 1 us.
    rates = gemm_rates(B300, "fp4")
    assert rates.kernel_class == "fp4_block_scaled"
    assert rates.flops_per_s == pytest.approx(0.56 * 14_000e12, rel=1e-12)
    tile_s = 2 * 128 * 128 * 16384 / (0.56 * 14_000e12 / 148)
    kernel = gemm_kernel_s(B300, rates, 16384, 16384, 16384, 1, FP4_BYTES, FP4_BYTES)
    assert kernel.compute_s == pytest.approx(111 * (tile_s + 1e-6), rel=1e-12)
    assert kernel.time_s == kernel.compute_s  # compute-bound: 111 waves vs 0.3 ms of streaming


def test_fp4_main_loop_is_the_datasheet_ratio_and_fp8_is_unchanged() -> None:
    shape = (16384, 16384, 16384)
    # Same 148 SMs and the same FP4 class fraction: B300 / B200 is 14,000 / 9,000 = 1.56x.
    assert _main_loop_s("b200", *shape, "fp4") / _main_loop_s("b300", *shape, "fp4") == (
        pytest.approx(14_000 / 9_000, rel=1e-9))
    # FP8 peaks are equal (4,500): the same kernel time on both.
    fp8 = [gemm_kernel_s(hw, gemm_rates(hw, "fp8"), *shape, 1, 1.0, 1.0).time_s
           for hw in (B200, B300)]
    assert fp8[0] == pytest.approx(fp8[1], rel=1e-12)
    # GB300 / GB200 achievable FP4 rate: 15,000 / 10,000 = 1.5x (the class fraction is shared).
    assert gemm_rates(GB300, "fp4").flops_per_s / gemm_rates(GB200, "fp4").flops_per_s == (
        pytest.approx(1.5, rel=1e-12))


def test_decode_streaming_is_unchanged_from_b200() -> None:
    # M=1 FP8 GEMV 8192 x 8192: streaming-bound, 67 MB at 0.80 x 8 TB/s on both chips.
    times = [gemm_kernel_s(hw, gemm_rates(hw, "fp8"), 1, 8192, 8192, 1, 1.0, 1.0)
             for hw in (B200, B300)]
    assert times[0].memory_s == pytest.approx(times[1].memory_s, rel=1e-12)
    nbytes = 8192 * 8192 + 8192 + 8192 * 2.0
    assert times[1].memory_s == pytest.approx(nbytes / (0.80 * 8e12), rel=1e-12)


def test_gb300_keeps_a_72_gpu_expert_group_on_nvlink() -> None:
    # Silicon rows are laid out over one NVLink domain per "node": 72 GPUs on GB300 NVL72, the
    # eight of an HGX B300 baseboard.
    assert (domain_size("gb300"), domain_size("b300")) == (72, 8)
    # EP72 dispatch of 64 MB per GPU: GB300 stays on NVLink (20 us + 71/72 x 64 MB at
    # 780 GB/s = 101 us); on B300 the group leaves the node for ConnectX-8 at 800 Gb/s x 0.90
    # (20 + 16 us + 71/72 x 64 MB / 90 GB/s = 737 us).
    nbytes = 64e6
    nvlink = 20e-6 + 71 / 72 * nbytes / 780e9
    nic = 36e-6 + 71 / 72 * nbytes / (800e9 / 8 * 0.90)
    assert alltoall_time_s(nbytes, 72, GB300) == pytest.approx(nvlink, rel=1e-12)
    assert alltoall_time_s(nbytes, 72, B300) == pytest.approx(nic, rel=1e-12)
    # TP across 64 GPUs: NVLink all-reduce on GB300 (6 us + 2 x 63/64 x 8 MB / 420 GB/s).
    assert allreduce_time_s(8e6, 64, GB300) == pytest.approx(
        6e-6 + 2 * 63 / 64 * 8e6 / 420e9, rel=1e-12)


def test_usable_memory_is_what_cuda_reports() -> None:
    # B300: 267.7 GiB reported by torch.cuda.mem_get_info (SGLang issue #25225), B200 178.4
    # GiB there too; GB300 assumed at the same 0.991 of its 279 GB datasheet figure.
    assert B300.hbm_bytes == pytest.approx(267.7 * 2**30)
    assert GB300.hbm_bytes == pytest.approx(276.5 * 2**30)
    assert B300.hbm_bytes / B200.hbm_bytes == pytest.approx(267.7 / 178.4)
