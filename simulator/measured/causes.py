"""Before and after for each cause fitted to the calibration file's measured runs: the closed-form
errors per (GPU, engine, mode) group with every cause on, and overall with one cause switched
off at a time (REPORT.md's measured-runs section, `frontier validate --write-report`).

A switch goes through the path the model itself uses: a mapped run's scenario (the token
budgets the benchmark deployed with, the KV-cache format of pre-quantized checkpoints, the
engines' FP8 MoE path through the deployment's overhead), its GPU profile (the MXFP4 MoE
kernels' token tile), its engine (MiniMax-M2's q/k norm, the request latency) or, for what
the mapping reads off a row (the layout a run id names), the mapping itself, run again
without it (MappingCause). Scored with the estimate, which the
calibration iterates on; the simulation's figures are accuracy.yaml's.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from simulator.hardware.profile import Hardware
from simulator.measured.ordering import NEAR_TIE, Point, order_group, pair_ordering
from simulator.measured.predict import estimate_figures, signed_errors
from simulator.measured.run import MeasuredRun
from simulator.measured.scenario import DEFAULT_TOKEN_BUDGET, Mapped, layout_in_doubt, map_run
from simulator.measured.scoring import error_stats
from simulator.serving.engine_build import Engine
from simulator.validation.ablation import NO_REQUEST_LATENCY, Cause, variant_loaded

METRICS = ("ttft.mean", "tpot.mean")
# Where a checkout finds the calibration file: the shared reference folder beside it.
CALIBRATION_FILE = Path(__file__).resolve().parents[3] / "shared" / "reference" / (
    "silicon_calibration.csv")


def _pools(s: dict[str, Any]) -> list[dict[str, Any]]:
    dep = s["deployment"]
    return [dep["prefill"], dep["decode"]] if dep.get("kind") == "disaggregated" else [dep]


def _old_budgets(s: dict[str, Any]) -> dict[str, Any]:
    """Every pool at max(8192, max_num_seqs) tokens per step and no prefill cap: the mapping
    before the benchmark generator's budgets (scenario.py BENCH_BUDGET_MARGIN)."""
    s = copy.deepcopy(s)
    for pool in _pools(s):
        sched = pool["scheduler"]
        sched.pop("max_prefill_tokens", None)
        sched["max_num_batched_tokens"] = max(DEFAULT_TOKEN_BUDGET, sched["max_num_seqs"])
    return s


def _trtllm_defaults(s: dict[str, Any]) -> dict[str, Any]:
    """TensorRT-LLM pools back on the schema's defaults: chunked prefill, 16-token blocks,
    0.9 of memory (scenario.py TRTLLM_FREE_MEMORY_FRACTION)."""
    s = copy.deepcopy(s)
    for pool in _pools(s):
        if pool.get("engine") == "trtllm":
            pool.pop("gpu_memory_utilization", None)
            pool["scheduler"].pop("chunked_prefill", None)
            pool["scheduler"].pop("block_size", None)
    return s


def _sglang_unmixed(s: dict[str, Any]) -> dict[str, Any]:
    """SGLang pools back on the engine's default: prefill batches apart from decodes
    (scenario.py SGLANG_AGG_MIXED_CHUNK)."""
    s = copy.deepcopy(s)
    for pool in _pools(s):
        pool["scheduler"].pop("mix_prefill_decode", None)
    return s


def _bf16_kv(s: dict[str, Any]) -> dict[str, Any]:
    s = copy.deepcopy(s)
    for pool in _pools(s):
        pool["precision"]["kv_cache"] = "bf16"
    return s


def _no_fp8_moe_path(s: dict[str, Any]) -> dict[str, Any]:
    """Every pool's FP8 MoE expert path at the GPU profile's grouped block alone
    (engine_styles.yaml moe_fp8_block_fixed_us 0), through the deployment's overhead."""
    s = copy.deepcopy(s)
    for pool in _pools(s):
        pool.setdefault("overhead", {})["moe_fp8_block_fixed_s"] = 0.0
    return s


def _per_head_qk_norm(e: Engine) -> Engine:
    """The engine's model (and its prefill pool's, when disaggregated) with q/k norms per
    head: no TP all-reduce of their sums."""
    arch = replace(e.arch, qk_norm_across_heads=False)
    pool = None if e.prefill_pool is None else _per_head_qk_norm(e.prefill_pool)
    return replace(e, arch=arch, step_model=e.step_model.with_arch(arch), prefill_pool=pool)


def _mean_ep_rank(e: Engine) -> Engine:
    """The engine's MoE (and its prefill pool's) costed at the mean EP rank's routed counts,
    not the busiest of a random draw (cost/moe_routing.py busiest_rank)."""
    pool = None if e.prefill_pool is None else _mean_ep_rank(e.prefill_pool)
    return replace(e, step_model=e.step_model.with_changes(routing_scatter=False),
                   prefill_pool=pool)


def _no_token_tile(hw: Hardware) -> Hardware:
    classes = hw.gemm_classes
    if classes is None:
        return hw
    return replace(hw, gemm_classes=replace(classes, grouped_token_tile_weights=frozenset()))


# The published rows' Cause (validation/ablation.py): scenario, hardware and engine switches.
CAUSES: tuple[Cause, ...] = (
    Cause("b1", "the benchmark generator's token budgets",
          "every pool at max(8192, batch) tokens per step, no prefill cap",
          scenario=_old_budgets),
    Cause("b2", "FP8 KV cache (NVFP4 and TensorRT-LLM FP8 checkpoints, SGLang DSA on Blackwell)",
          "those rows keep a BF16 KV cache", scenario=_bf16_kv),
    Cause("b3", "MXFP4 MoE kernels' token tile (Blackwell)",
          "MXFP4 experts pad to the chip's 64-row tile", hardware=_no_token_tile),
    Cause("b4", "MiniMax-M2's q/k norm over all heads (TP all-reduce)",
          "q/k normalised per head, no all-reduce", engine=_per_head_qk_norm),
    Cause("b5", "TensorRT-LLM's generated engine arguments",
          "chunked prefill on, 16-token blocks, 0.9 of memory", scenario=_trtllm_defaults),
    Cause("b6", "SGLang's mixed chunk (--enable-mixed-chunk, aggregated)",
          "prefill batches apart from the decodes", scenario=_sglang_unmixed),
    Cause("b7", "the request latency (fitted at concurrency <= 16)",
          "no request latency (request_latency_us 0)", engine=NO_REQUEST_LATENCY),
    Cause("b8", "the busiest EP rank of random routing",
          "MoE costed at the mean EP rank's hit experts and routed pairs", engine=_mean_ep_rank),
    Cause("b10", "the engines' FP8 MoE expert path (fitted at concurrency <= 16)",
          "FP8 experts at the GPU profile's grouped block alone (moe_fp8_block_fixed_us 0)",
          scenario=_no_fp8_moe_path),
)


@dataclass(frozen=True)
class MappingCause:
    """A cause the mapping carries (what it reads off a row), switched off by mapping the run
    again without it."""

    key: str
    title: str
    switch: str
    remap: Callable[[MeasuredRun], Mapped]


MAPPING_CAUSES: tuple[MappingCause, ...] = (
    MappingCause("b9", "the layout a run id names where the columns count ep times the GPUs, "
                 "and a P/D twin's recorded workers",
                 "the layout columns as recorded (tp x adp = id tp x ep GPUs; P/D rows without "
                 "workers one and one)",
                 remap=lambda run: map_run(run, None, named_layouts=False)),
)


def _predicted(m: Mapped, cause: Cause | None) -> dict[str, float] | None:
    """The run's estimate with `cause` off (None: all on), or None where it is refused."""
    import simulator

    assert m.scenario is not None
    try:
        return estimate_figures(simulator.estimate(variant_loaded(m.scenario, cause)))
    except (ValueError, RuntimeError):  # memory, layout or model refusals: not scored
        return None


def _remapped(m: Mapped, cause: MappingCause) -> dict[str, float] | None:
    """The run's estimate mapped without the cause (refused that way: not scored)."""
    again = cause.remap(m.run)
    if again.scenario is None:
        return None
    return _predicted(again, None)


def _stats(errors: Sequence[dict[str, float]]) -> dict[str, dict[str, float]]:
    return {k: error_stats([e[k] for e in errors if k in e]) for k in METRICS
            if any(k in e for e in errors)}


def measured_ablation(path: Path) -> dict[str, Any]:
    """Per group with every cause on, and overall per cause switched off, over the runs of
    `path` whose layout the file records and does not contradict (scenario.py
    layout_in_doubt)."""
    from simulator.measured.detect import read_measurements

    mapped = [map_run(r, None) for r in read_measurements([path])]
    usable = [m for m in mapped if m.refused is None and m.scenario is not None
              and not layout_in_doubt(m.defaults)]
    per: dict[str | None, list[tuple[Mapped, dict[str, float]]]] = {}
    points: list[Point] = []
    every: tuple[Cause | MappingCause, ...] = tuple(
        sorted((*CAUSES, *MAPPING_CAUSES), key=lambda c: int(c.key[1:])))
    for cause in (None, *every):
        rows = []
        for m in usable:
            got = (_remapped(m, cause) if isinstance(cause, MappingCause)
                   else _predicted(m, cause))
            if got is None:
                continue
            rows.append((m, signed_errors(m.run.measured, got)))
            if cause is None:
                points.append((order_group(m.run, m.group), dict(m.run.measured), got))
        per[None if cause is None else cause.key] = rows
    groups: dict[str, list[dict[str, float]]] = {}
    for m, e in per[None]:
        groups.setdefault(" ".join(m.group), []).append(e)
    return {
        "file": path.name,
        "runs": len(mapped),
        "usable": len(usable),
        "groups": {g: {"runs": len(es), **_stats(es)} for g, es in sorted(groups.items())},
        "overall": {"runs": len(per[None]), **_stats([e for _, e in per[None]])},
        "ordering": pair_ordering(points),
        "causes": [
            {"key": c.key, "title": c.title, "switch": c.switch, "runs": len(per[c.key]),
             **_stats([e for _, e in per[c.key]])}
            for c in every
        ],
    }


def _cell(stats: dict[str, Any], metric: str) -> str:
    s = stats.get(metric)
    if s is None:
        return "-"
    return (f"{s['median_abs_error']:.1%} / {s['p90_abs_error']:.0%} "
            f"({s['median_signed_error']:+.0%})")


def measured_markdown(result: dict[str, Any] | None, source: str) -> list[str]:
    """REPORT.md's section for the calibration file (None: the file was not found)."""
    head = ["## Measured runs of real engines, cause by cause", ""]
    if result is None:
        return [*head, f"`{source}` was not found where the report was generated, so this "
                "section is empty; rerun `frontier validate --write-report` beside it.", ""]
    lines = [
        *head,
        f"`{source}` ({result['runs']} runs; {result['usable']} of shipped models and GPUs "
        "with their layout recorded and not contradicted by another row: P/D runs without "
        "worker counts and measurements listed twice under different layouts left out), "
        "scored with the "
        "closed-form estimate (the calibration's inner loop; accuracy.yaml holds the "
        "simulation's figures on a sample). Cells: median / p90 |error| (median signed).",
        "",
        "| cause | switched off by | runs | TTFT | TPOT |",
        "|---|---|---:|---|---|",
        f"| all on | - | {result['overall']['runs']} | {_cell(result['overall'], 'ttft.mean')} "
        f"| {_cell(result['overall'], 'tpot.mean')} |",
    ]
    for c in result["causes"]:
        lines.append(f"| {c['key']} {c['title']} | {c['switch']} | {c['runs']} | "
                     f"{_cell(c, 'ttft.mean')} | {_cell(c, 'tpot.mean')} |")
    order = result.get("ordering", {})
    if order:
        lines += ["", "Configurations ordered as measured (every cause on): pairs of different "
                  "configurations within one model, GPU, engine, mode and lengths whose "
                  f"predicted order is the measured one (the issue's target: 90 %); beside it, "
                  f"the pairs measured more than {NEAR_TIE:.0%} apart.", "",
                  "| metric | groups | groups at 90 % | pairs | ordered | pairs apart | ordered |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {k} | {o['groups']} | {o['groups_at_target']} | {o['pairs']} | "
                  f"{o['ordered']:.1%} | {o['pairs_apart']} | {o['ordered_apart']:.1%} |"
                  for k, o in order.items()]
    lines += ["", "Per (GPU, engine, mode) group, every cause on:", "",
              "| group | runs | TTFT | TPOT |", "|---|---:|---|---|"]
    for g, s in result["groups"].items():
        lines.append(f"| {g} | {s['runs']} | {_cell(s, 'ttft.mean')} | "
                     f"{_cell(s, 'tpot.mean')} |")
    return [*lines, ""]
