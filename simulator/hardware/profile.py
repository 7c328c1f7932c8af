"""GPU hardware profiles: strict schema over hardware_profiles/*.yaml, converted to SI once.

Datasheet peaks and measured efficiency factors are separate blocks so a reader sees what is
published and what is calibration. No hardware number lives in Python code.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from simulator.errors import InputError, format_validation_error
from simulator.hardware.attention_classes import (
    AttentionClasses,
    AttentionClassesSpec,
    AttentionKernelsSpec,
    to_attention_classes,
)
from simulator.hardware.gemm_classes import (
    KERNEL_MODEL_ENV,
    GemmClasses,
    GemmClassesSpec,
    check_formats,
    to_gemm_classes,
)
from simulator.hardware.provenance import Provenance, check_keys, schema_paths
from simulator.hardware.spec_base import StrictSpec
from simulator.yamlsafe import safe_load_bounded

Positive = Annotated[float, Field(gt=0)]
Fraction = Annotated[float, Field(gt=0, le=1.2)]
# Tensor-core formats a chip may list; weight-only formats (int4) never run on tensor cores.
TensorFormat = Literal["fp64", "tf32", "bf16", "fp16", "fp8", "int8", "fp4"]




class ComputeSpec(StrictSpec):
    dense_tflops: dict[TensorFormat, Positive]  # dense (not 2:4 sparse) tensor-core peaks
    sm_count: Annotated[int, Field(gt=0)]
    source: str


class MemorySpec(StrictSpec):
    hbm_gb: Positive  # decimal GB, as datasheets print it
    # The memory the CUDA driver reports (cudaMemGetInfo's total, nvidia-smi memory.total), in
    # binary GiB: what engines size weights, activations and KV pools against. Datasheets'
    # "GB" are close to this in GiB, not in 1e9 bytes (B200: 180 GB printed, 178.4 GiB =
    # 191.6e9 bytes reported). Absent: hbm_gb x 1e9.
    device_gib: Positive | None = None
    hbm_tb_per_s: Positive
    l2_mb: Positive
    source: str


class ScaleUpSpec(StrictSpec):
    interconnect: str  # e.g. "NVLink 4"
    gb_per_s_per_direction: Positive  # per GPU, one direction
    domain_size: Annotated[int, Field(gt=0)]  # GPUs that share the NVLink domain
    source: str


class ScaleOutSpec(StrictSpec):
    gbit_per_s_per_gpu: Positive  # NIC line rate per GPU
    source: str


class HostSpec(StrictSpec):
    """The host a GPU offloads KV to: the link between them and the host memory per GPU."""

    link: str  # e.g. PCIe Gen5 x16, NVLink-C2C
    gb_per_s_per_direction: Positive  # per GPU
    memory_gb_per_gpu: Positive  # the host's DRAM over its GPUs
    source: str


class PowerSpec(StrictSpec):
    board_w: Positive
    source: str


class PriceSpec(StrictSpec):
    usd_per_gpu_hour: Positive
    source: str


class EfficiencySpec(StrictSpec):
    """Measured fractions of peak and fixed costs; each says in the YAML where it came from."""

    gemm_compute_fraction: Fraction  # large, well-shaped GEMM, fraction of dense peak
    hbm_bandwidth_fraction: Fraction  # streaming reads, fraction of datasheet HBM bandwidth
    attention_compute_fraction: Fraction  # prefill attention kernels, fraction of bf16 peak
    attention_hbm_fraction: Fraction  # decode attention KV streaming (asymptotic), of HBM peak
    attention_decode_fixed_us: Annotated[float, Field(ge=0)]  # per layer: launch, split-KV merge
    kernel_launch_overhead_us: Annotated[float, Field(ge=0)]  # per kernel, inside a CUDA graph
    allreduce_latency_us: Annotated[float, Field(ge=0)]  # small-message all-reduce (scale-up)
    # What each GPU beyond two adds to a small collective's latency inside the NVLink domain
    # (a ring's steps and a one-shot kernel's peer reads and flags grow with the group), so
    # allreduce_latency_us is the 2-GPU figure; 0: the same at every size (cost/comm.py).
    allreduce_latency_per_peer_us: Annotated[float, Field(ge=0)] = 0.0
    allreduce_bus_gb_per_s: Positive  # achievable bus bandwidth at serving message sizes
    alltoall_latency_us: Annotated[float, Field(ge=0)]
    alltoall_gb_per_s: Positive  # achievable per-GPU all-to-all bandwidth over scale-up
    scale_out_latency_us: Annotated[float, Field(ge=0)]
    scale_out_fraction: Fraction  # achievable fraction of NIC line rate
    # Relative spread of the measured rows around the chosen factors: the uncertainty band
    # scales every fraction by (1 -/+ spread) and every fixed cost by (1 +/- spread).
    spread: Annotated[float, Field(ge=0, lt=1)]
    source: str


class KernelSpec(StrictSpec):
    """Output-tile shapes of the tensor-core GEMM kernels serving engines run on this chip."""

    gemm_tile_m_small: Annotated[int, Field(gt=0)]  # CTA tile M for skinny (decode) GEMMs
    gemm_tile_m: Annotated[int, Field(gt=0)]  # CTA tile M otherwise
    gemm_tile_n: Annotated[int, Field(gt=0)]
    gemm_min_split_k: Annotated[int, Field(gt=0)]  # smallest K slice when splitting K
    source: str


class HardwareFile(StrictSpec):
    schema_version: Literal[1] = 1
    name: str
    description: str
    architecture: Literal["ampere", "hopper", "blackwell", "cdna3"]
    compute: ComputeSpec
    memory: MemorySpec
    scale_up: ScaleUpSpec
    scale_out: ScaleOutSpec
    power: PowerSpec
    price: PriceSpec | None = None
    # The host side (KV offload tier); absent: not recorded for this system.
    host: HostSpec | None = None
    efficiency: EfficiencySpec
    kernels: KernelSpec
    # GEMM kernel classes (hardware/gemm_classes.py); absent: the flat efficiency fractions.
    gemm_classes: GemmClassesSpec | None = None
    # Attention kernel classes (hardware/attention_classes.py); absent: the generic fractions.
    attention_classes: AttentionClassesSpec | None = None
    # Prefill attention kernels other than the default, for deployment.attention_kernel.
    attention_kernels: AttentionKernelsSpec | None = None
    # Status and origin of each calibration value, keyed by its key path (provenance.py);
    # read by tests and reports, never by the cost model.
    provenance: Provenance | None = None

    @field_validator("provenance")
    @classmethod
    def _provenance_names_values(cls, value: Provenance | None) -> Provenance | None:
        check_keys(value, calibration_paths(), "/".join(CALIBRATION_BLOCKS))
        return value

    @model_validator(mode="after")
    def _classes_cover_formats(self) -> HardwareFile:
        if self.gemm_classes is not None:
            problem = check_formats(self.gemm_classes, set(self.compute.dense_tflops))
            if problem:
                raise ValueError(problem)
        return self


# The blocks whose values are calibration or modelling choices (each needs a provenance entry);
# compute, memory, scale_up, scale_out, power and price are datasheet figures with a source.
CALIBRATION_BLOCKS = ("efficiency", "kernels", "gemm_classes", "attention_classes",
                      "attention_kernels")


@functools.cache
def calibration_paths() -> frozenset[str]:
    """Every key path a profile's provenance may name."""
    specs: tuple[type[BaseModel], ...] = (
        EfficiencySpec, KernelSpec, GemmClassesSpec, AttentionClassesSpec, AttentionKernelsSpec
    )
    pairs = zip(CALIBRATION_BLOCKS, specs, strict=True)
    return frozenset().union(*(schema_paths(spec, f"{block}.") for block, spec in pairs))


@dataclass(frozen=True, slots=True)
class GemmTiling:
    m_small: int
    m: int
    n: int
    min_split_k: int


@dataclass(frozen=True, slots=True)
class Hardware:
    """One GPU in SI units: what cost/ functions read."""

    name: str
    description: str
    architecture: str
    dense_flops_per_s: dict[str, float]  # tensor format -> FLOP/s
    sm_count: int
    hbm_bytes: float
    hbm_bytes_per_s: float
    l2_bytes: float
    scale_up_bytes_per_s: float  # per GPU per direction
    scale_up_domain_size: int
    scale_out_bytes_per_s: float  # per GPU
    board_power_w: float
    usd_per_gpu_hour: float | None
    gemm_compute_fraction: float
    hbm_bandwidth_fraction: float
    attention_compute_fraction: float
    attention_hbm_fraction: float
    attention_decode_fixed_s: float
    kernel_launch_overhead_s: float
    allreduce_latency_s: float
    allreduce_bus_bytes_per_s: float
    allreduce_latency_per_peer_s: float
    alltoall_latency_s: float
    alltoall_bytes_per_s: float
    scale_out_latency_s: float
    scale_out_fraction: float
    efficiency_spread: float
    gemm_tiling: GemmTiling
    gemm_classes: GemmClasses | None = None  # None: the flat gemm/hbm fractions
    attention_classes: AttentionClasses | None = None  # None: generic attention fractions
    # The prefill attention kernel attention_compute_fraction measures, and each other kernel
    # with a published figure as its fraction over that one (None, (): none named).
    default_prefill_kernel: str | None = None
    prefill_kernel_ratios: tuple[tuple[str, float], ...] = ()
    # The host link (per GPU per direction) and host memory per GPU; None: not recorded.
    host_link_bytes_per_s: float | None = None
    host_memory_bytes_per_gpu: float | None = None

    def with_prefill_kernel(self, name: str) -> Hardware:
        """This chip running prefill attention on kernel `name` (deployment.attention_kernel):
        the prefill fraction scaled by that kernel's figure over the default's."""
        ratios = dict(self.prefill_kernel_ratios)
        if name == self.default_prefill_kernel:
            return self
        if name not in ratios:
            known = [f"{self.default_prefill_kernel} (default)", *ratios] \
                if self.default_prefill_kernel else []
            raise InputError(
                f"deployment.attention_kernel: {name!r} has no published prefill figure on "
                f"{self.name} (attention_kernels in its profile); known: "
                f"{', '.join(known) or 'none'}")
        return replace(self, attention_compute_fraction=self.attention_compute_fraction
                       * ratios[name])

    def supports(self, tensor_format: str) -> bool:
        return tensor_format in self.dense_flops_per_s


def _to_hardware(f: HardwareFile) -> Hardware:
    e = f.efficiency
    return Hardware(
        name=f.name,
        description=f.description,
        architecture=f.architecture,
        dense_flops_per_s={k: v * 1e12 for k, v in f.compute.dense_tflops.items()},
        sm_count=f.compute.sm_count,
        hbm_bytes=(f.memory.hbm_gb * 1e9 if f.memory.device_gib is None
                   else f.memory.device_gib * 2**30),
        hbm_bytes_per_s=f.memory.hbm_tb_per_s * 1e12,
        l2_bytes=f.memory.l2_mb * 1e6,
        scale_up_bytes_per_s=f.scale_up.gb_per_s_per_direction * 1e9,
        scale_up_domain_size=f.scale_up.domain_size,
        scale_out_bytes_per_s=f.scale_out.gbit_per_s_per_gpu * 1e9 / 8,
        board_power_w=f.power.board_w,
        usd_per_gpu_hour=None if f.price is None else f.price.usd_per_gpu_hour,
        gemm_compute_fraction=e.gemm_compute_fraction,
        hbm_bandwidth_fraction=e.hbm_bandwidth_fraction,
        attention_compute_fraction=e.attention_compute_fraction,
        attention_hbm_fraction=e.attention_hbm_fraction,
        attention_decode_fixed_s=e.attention_decode_fixed_us * 1e-6,
        kernel_launch_overhead_s=e.kernel_launch_overhead_us * 1e-6,
        allreduce_latency_s=e.allreduce_latency_us * 1e-6,
        allreduce_bus_bytes_per_s=e.allreduce_bus_gb_per_s * 1e9,
        allreduce_latency_per_peer_s=e.allreduce_latency_per_peer_us * 1e-6,
        alltoall_latency_s=e.alltoall_latency_us * 1e-6,
        alltoall_bytes_per_s=e.alltoall_gb_per_s * 1e9,
        scale_out_latency_s=e.scale_out_latency_us * 1e-6,
        scale_out_fraction=e.scale_out_fraction,
        efficiency_spread=e.spread,
        gemm_tiling=GemmTiling(
            f.kernels.gemm_tile_m_small,
            f.kernels.gemm_tile_m,
            f.kernels.gemm_tile_n,
            f.kernels.gemm_min_split_k,
        ),
        gemm_classes=to_gemm_classes(f.gemm_classes),
        attention_classes=to_attention_classes(f.attention_classes),
        default_prefill_kernel=None if f.attention_kernels is None
        else f.attention_kernels.default_prefill,
        prefill_kernel_ratios=() if f.attention_kernels is None else tuple(
            (k, v / e.attention_compute_fraction)
            for k, v in f.attention_kernels.prefill_compute_fraction.items()),
        host_link_bytes_per_s=None if f.host is None else f.host.gb_per_s_per_direction * 1e9,
        host_memory_bytes_per_gpu=None if f.host is None else f.host.memory_gb_per_gpu * 1e9,
    )


def _checkout_dir() -> Path | None:
    here = Path(__file__).resolve().parents[2] / "hardware_profiles"
    return here if here.is_dir() else None


def profile_dirs(extra: list[Path] | None = None) -> list[Path]:
    """Folders searched for profiles, later ones overriding earlier: shipped, env var, flag."""
    dirs: list[Path] = []
    checkout = _checkout_dir()
    if checkout is not None:
        dirs.append(checkout)
    else:
        # The installed package's own folder (importlib.resources would cost start-up).
        dirs.append(Path(__file__).resolve().parents[1] / "_shipped" / "hardware_profiles")
    for part in os.environ.get("FRONTIER_HARDWARE_PATH", "").split(os.pathsep):
        if part:
            if not Path(part).is_dir():  # a typo would silently drop the user's profiles
                raise InputError(f"FRONTIER_HARDWARE_PATH: {part}: no such folder (give "
                                 f"folders of GPU profile YAMLs, separated by '{os.pathsep}')")
            dirs.append(Path(part))
    dirs.extend(extra or [])
    return dirs


def profile_paths(extra: list[Path] | None = None) -> dict[str, Path]:
    """Profile name -> YAML path over all search folders."""
    found: dict[str, Path] = {}
    for d in profile_dirs(extra):
        if d.is_dir():
            for p in sorted(d.glob("*.yaml")):
                found[p.stem] = p
    return found


def read_profile_mapping(path: Path) -> dict[str, Any]:
    """The plain mapping of one profile YAML (not yet validated): what a calibration overlay's
    values are set into before `hardware_from_mapping` checks and converts it."""
    try:
        raw = safe_load_bounded(path.read_text())
    except (OSError, UnicodeDecodeError, RecursionError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: cannot read YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise InputError(f"{path}: top level must be a mapping of profile keys")
    return raw


def hardware_from_mapping(raw: Mapping[str, Any], source: str, stem: str) -> Hardware:
    """Validate a profile's plain mapping (a file's, or one a calibration overlay changed)
    and convert it to SI; `stem` is the name the profile must carry."""
    try:
        parsed = HardwareFile.model_validate(raw)
    except ValidationError as exc:
        raise InputError(format_validation_error(source, exc)) from None
    if parsed.name != stem:
        raise InputError(f"{source}: name {parsed.name!r} must equal the file stem {stem!r}")
    return _to_hardware(parsed)


def load_profile_file(path: Path) -> Hardware:
    """Parse and validate one profile YAML."""
    return hardware_from_mapping(read_profile_mapping(path), str(path), path.stem)


def profile_path(name: str, extra: list[Path] | None = None) -> Path:
    """The YAML file of a profile by name (file stem); an unknown name is one InputError line
    with the nearest valid one."""
    paths = profile_paths(extra)
    path = paths.get(name)
    if path is None:
        from difflib import get_close_matches

        near = get_close_matches(name, list(paths), n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise InputError(f"unknown GPU {name!r}{hint} (valid: {', '.join(sorted(paths))})")
    return path


_CACHE: dict[tuple[str, str, str], Hardware] = {}


def load_hardware(name: str, extra: list[Path] | None = None) -> Hardware:
    """A profile by name (file stem), from the shipped folder or the user's own."""
    path = profile_path(name, extra)
    key = (name, str(path), os.environ.get(KERNEL_MODEL_ENV, ""))
    if key not in _CACHE:
        _CACHE[key] = load_profile_file(path)
    return _CACHE[key]
