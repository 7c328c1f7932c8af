"""The GPU side of a calibration: per GPU profile, the streaming fraction (`hbm_fraction`) of
each GEMM kernel class the measured runs actually run through, as declared free parameters.

Why streaming fractions, and only they: a serving benchmark's TPOT is a decode step, and a
decode step's GEMMs are memory-bound (a few rows against whole weight matrices), so it is the
classes' streaming rate that the runs see; their main-loop compute fractions show only in
prefill, where TTFT also carries queueing and the host's scheduling, and are left to kernel
rows. A fraction moves a run's GPU time, where an engine style's host cost moves its host
time. The fit runs in stages (calibration/stages.py): host costs first on every run, then GPU
factors on TPOT with the host costs held, so a GPU factor fits only what the host costs leave.
Identifiability (calibration/identify.py) is checked within each stage, not across them: a
GPU factor the runs cannot tell from a host cost is not left at its prior by that check; the
staging is what keeps it from absorbing the host cost.

Bounds: a fraction of datasheet bandwidth lies in [0.2, 0.95]. 0.95 is above any streaming
kernel's reach (copy kernels measure about 0.92 of the datasheet figure), 0.2 below any
tuned GEMM's; they are the edges of physical sense, not fitted figures. A shipped value
outside them widens its own bound to include it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from simulator.calibration.params import FreeParameter, Target
from simulator.hardware.gemm_classes import STREAMING_KEY_PATHS

HBM_FRACTION_LOWER = 0.2
HBM_FRACTION_UPPER = 0.95
# A (GPU, kernel class) pair gets a free parameter only when at least this many runs, of at
# least MIN_CONFIGS configurations, run through it: fewer is a value fitted to one deployment
# (a "factor that only makes one row right"), and cross-validation grouped by configuration
# could not hold any of it out.
MIN_RUNS = 20
MIN_CONFIGS = 3
# The key paths the fit may move: the streaming fraction of each kernel class.
GPU_KEYS = tuple(sorted({k for keys in STREAMING_KEY_PATHS.values() for k in keys}))


def parameter_name(gpu: str, key: str) -> str:
    """`b200.gemm_classes.fp4_block_scaled.hbm_fraction`: the GPU, then the key path."""
    return f"{gpu}.{key}"


def streaming_keys(engine: Any) -> tuple[tuple[str, str], ...]:
    """(GPU profile name, key path) of every streaming fraction a run's engine (and its
    prefill pool's) GEMMs run through: its projections and MLP, MoE experts, LM head."""
    from simulator.cost.explain import gemm_kernel_classes

    engines = [engine] if engine.prefill_pool is None else [engine, engine.prefill_pool]
    found: dict[tuple[str, str], None] = {}
    for e in engines:
        for label in gemm_kernel_classes(e.step_model, 1).values():
            for key in STREAMING_KEY_PATHS.get(label.split(" ")[0], ()):
                found[(e.hw.name, key)] = None
    return tuple(sorted(found))


def gpu_parameters(run_keys: Sequence[Iterable[tuple[str, str]]], configs: Sequence[str],
                   shipped: Mapping[tuple[str, str], float]) -> tuple[FreeParameter, ...]:
    """One free parameter per (GPU, key path) that at least MIN_RUNS runs of MIN_CONFIGS
    configurations run through; `run_keys[i]` and `configs[i]` are run i's pairs and
    configuration, `shipped` the profiles' values (the priors)."""
    runs: Counter[tuple[str, str]] = Counter()
    seen: dict[tuple[str, str], set[str]] = {}
    for keys, config in zip(run_keys, configs, strict=True):
        for pair in set(keys):
            runs[pair] += 1
            seen.setdefault(pair, set()).add(config)
    out = []
    for pair in sorted(runs):
        if runs[pair] < MIN_RUNS or len(seen[pair]) < MIN_CONFIGS:
            continue
        gpu, key = pair
        prior = shipped[pair]
        out.append(FreeParameter(parameter_name(gpu, key), Target("hardware", gpu, key), prior,
                                 min(HBM_FRACTION_LOWER, prior),
                                 max(HBM_FRACTION_UPPER, prior)))
    return tuple(out)
