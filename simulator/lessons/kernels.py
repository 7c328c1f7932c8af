"""Lesson kernels: a leaner forward pass pushes the whole frontier. One model on the same GPUs,
the engine's software one switch at a time (unfused experts to a fused MoE, eager launch to CUDA
graphs, FlashAttention-2 to -3, serial host work to an overlapped scheduler), each switch's gain
read at the lightest and the heaviest load and explained with the figures behind it: the
model's experts, the engine style's (engines/engine_styles.yaml) and the GPU profile's."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simulator.cost import BatchShape
from simulator.engines.style import EngineStyle, engine_style
from simulator.hardware.profile import Hardware, load_hardware
from simulator.inputs.deployment import Scheduler
from simulator.lessons.core import Findings, col
from simulator.lessons.physics import prefill_s, step_model
from simulator.model.load import load_architecture
from simulator.sweep.table import Row

LOAD = "workload.arrival.concurrency"
STAGE = "software"  # derived: "CUDA graphs, overlapped host"
ENGINE = "deployment.engine"
VERSION = "deployment.engine_version"
GRAPHS = "deployment.cuda_graphs"
KERNEL = "deployment.attention_kernel"
MOE = "deployment.moe_kernel"
GPU = "output_tokens_per_s_per_gpu"
TPOT = "tpot_s.p50"
LONG_PROMPT = 32_768  # tokens: a long-document prompt, where attention dominates a prefill
# A factor inside this of 1 reads as "as fast either way" (a reading threshold of the page).
SAME = 1.03


def _style(r: Row) -> EngineStyle:
    """The row's engine style; the lesson sweeps every switch it names (engine, version, CUDA
    graphs, attention kernel), so each is a column of the row."""
    style = engine_style(str(r.get(ENGINE)), r.get(VERSION) or None)
    return style if r.get(GRAPHS) is not False else style.eager()


def _kernel(r: Row) -> str:
    """The row's prefill attention kernel: the one it names, else its GPU's default."""
    named = r.get(KERNEL)
    return str(named) if named else "the default attention kernel"


def _moe(r: Row) -> str:
    """The row's MoE kernel: fused unless it names unfused."""
    return "unfused" if r.get(MOE) == "unfused" else "fused"


def _parts(r: Row) -> tuple[str, str, str, str]:
    """(MoE kernel, launch, prefill attention kernel, host) of a row's engine software."""
    moe = "unfused experts" if _moe(r) == "unfused" else "fused MoE"
    launch = "CUDA graphs" if r.get(GRAPHS) is not False else "eager launch"
    host = "overlapped host" if _style(r).overlap_cpu_with_gpu else "serial host"
    return moe, launch, _kernel(r).replace("flashattention-", "FlashAttention-"), host


def stage_label(r: Row) -> str:
    return ", ".join(_parts(r))


def _change(a: Row, b: Row) -> str:
    """What the later stage switched: '+ CUDA graphs'."""
    return " ".join(f"+ {y}" for x, y in zip(_parts(a), _parts(b), strict=True) if x != y)


def derive(r: Row) -> dict[str, Any]:
    return {STAGE: stage_label(r)}


def _at(rows: Sequence[Row], stage: str, load: float) -> Row | None:
    return next((r for r in rows if r[STAGE] == stage and col(r, LOAD) == load), None)


def analyze(rows: list[Row], spec: Mapping[str, Any], out_dir: Path) -> Findings:
    stages = list(dict.fromkeys(str(r[STAGE]) for r in rows))
    loads = sorted({col(r, LOAD) for r in rows})
    lo, hi = loads[0], loads[-1]
    if len(stages) < 2 or len(loads) < 2:
        return Findings(["Fewer than two switches or loads simulated; see results.csv."])
    at_lo = [_at(rows, s, lo) for s in stages]
    at_hi = [_at(rows, s, hi) for s in stages]
    cited = [r for r in (*at_lo, *at_hi) if r is not None]
    lo_rows = [r for r in at_lo if r is not None]
    hi_rows = [r for r in at_hi if r is not None]
    if len(lo_rows) < 2 or len(hi_rows) < 2:
        return Findings(["A switch is missing at the lightest or heaviest load; see "
                         "results.csv."])
    base_lo, base_hi = lo_rows[0], hi_rows[0]
    lines = [
        f"At {lo:.0f} request in flight, TPOT p50 is {col(base_lo, TPOT) * 1e3:.1f} ms with "
        f"{stages[0]}, then " + "; ".join(
            f"{_change(a, b)} {col(b, TPOT) * 1e3:.1f} ms (each user "
            f"×{col(a, TPOT) / col(b, TPOT):.2f} as fast)"
            for a, b in itertools.pairwise(lo_rows)) + ".",
        f"At {hi:.0f} in flight, output tokens/s per GPU are {col(base_hi, GPU):.0f} with "
        f"{stages[0]}, then " + "; ".join(
            f"{_change(a, b)} {col(b, GPU):.0f} (×{col(b, GPU) / col(a, GPU):.2f})"
            for a, b in itertools.pairwise(hi_rows)) + ".",
    ]
    figures: dict[str, float] = {}
    layers = load_architecture(str(spec["model"])).num_layers
    hw = load_hardware(str(spec["hardware"]["gpu"]))
    for (a_lo, a_hi), (b_lo, b_hi) in itertools.pairwise(zip(at_lo, at_hi, strict=True)):
        if None in (a_lo, a_hi, b_lo, b_hi):
            continue
        assert a_lo is not None and a_hi is not None and b_lo is not None and b_hi is not None
        lines.append(_why(_change(a_lo, b_lo), a_lo, a_hi, b_lo, b_hi, layers, figures, hw,
                          spec))
    return Findings(lines, [r for r in at_lo if r is not None], cited=cited, figures=figures)


def _why(cur: str, a_lo: Row, a_hi: Row, b_lo: Row, b_hi: Row, layers: int,
         figures: dict[str, float], hw: Hardware, spec: Mapping[str, Any]) -> str:
    """The cause of one switch's gain, from the two styles' figures, and how it holds up as
    the batch grows (the factor per user at the lightest and at the heaviest load)."""
    sa, sb = _style(a_lo), _style(b_lo)
    f_lo = col(a_lo, TPOT) / col(b_lo, TPOT)
    f_hi = col(a_hi, TPOT) / col(b_hi, TPOT)
    trend = (f"×{f_lo:.2f} per user at {col(a_lo, LOAD):.0f} in flight, ×{f_hi:.2f} at "
             f"{col(a_hi, LOAD):.0f}")
    if _moe(a_lo) != _moe(b_lo):
        return _moe_why(cur, a_lo, a_hi, spec, hw, figures, sa.dispatch_s_per_layer * layers,
                        trend)
    if sa.dispatch_s_per_layer > sb.dispatch_s_per_layer:
        per = sa.dispatch_s_per_layer
        floor = per * layers
        figures |= {"layers": layers, "eager launch per layer (us)": per * 1e6,
                    "eager floor per step (ms)": floor * 1e3}
        text = (f"{cur}: without graphs the host launches each layer's kernels from Python, "
                f"{per * 1e6:.0f} µs a layer (the engine style's eager figure, from its "
                f"published eager against graph runs), so a step takes at least {layers} × "
                f"{per * 1e6:.0f} µs = {floor * 1e3:.1f} ms whatever the GPU needs; one graph "
                f"replay removes that floor. It matters while the GPU's own step is shorter "
                f"than the floor, at small batches: {trend}.")
        g_hi = col(b_hi, GPU) / col(a_hi, GPU)
        if f_hi < SAME and g_hi > SAME:
            text += (f" At {col(a_hi, LOAD):.0f} in flight each request streams as fast either "
                     f"way, yet the run of the same requests ends in {col(b_hi, 'duration_s'):.1f}"
                     f" s against {col(a_hi, 'duration_s'):.1f} s (×{g_hi:.2f} tokens/s per "
                     "GPU): as the last requests drain the batch shrinks, and the eager steps "
                     "fall back to the floor.")
        return text
    if _kernel(a_lo) != _kernel(b_lo):
        return _attention_why(cur, a_lo, b_lo, spec, hw, figures)
    host_1 = sa.host_time_s(1)
    host_hi = sa.host_time_s(int(col(a_hi, LOAD)))
    figures |= {"host per step at batch 1 (ms)": host_1 * 1e3,
                f"host per step at batch {col(a_hi, LOAD):.0f} (ms)": host_hi * 1e3}
    if sa.overlap_cpu_with_gpu != sb.overlap_cpu_with_gpu:
        return (f"{cur}: the scheduler's host work ({host_1 * 1e3:.2f} ms a step at batch 1, "
                f"{host_hi * 1e3:.2f} ms at {col(a_hi, LOAD):.0f}: a fixed part and a part per "
                f"sequence) runs while the GPU computes the step before instead of between "
                f"steps, so it leaves the step time wherever it is shorter than the GPU's: "
                f"{trend}.")
    return f"{cur}: {trend}."


def _attention_why(cur: str, a: Row, b: Row, spec: Mapping[str, Any], hw: Hardware,
                   figures: dict[str, float]) -> str:
    """The prefill attention kernel's gain: its fraction of the peak against the other's, the
    run's TTFT at the lightest load, and one long prompt's prefill on the step model."""
    ka, kb = (str(r.get(KERNEL) or hw.default_prefill_kernel) for r in (a, b))
    ha, hb = hw.with_prefill_kernel(ka), hw.with_prefill_kernel(kb)
    chunk = _chunk(spec)
    long_a, long_b = (prefill_s(step_model(spec, h, _moe(a)), LONG_PROMPT, chunk)
                      for h in (ha, hb))
    figures |= {f"{ka} prefill attention, share of BF16 peak": ha.attention_compute_fraction,
                f"{kb} prefill attention, share of BF16 peak": hb.attention_compute_fraction,
                "long prompt (tokens)": LONG_PROMPT, f"long prompt's prefill, {ka} (ms)":
                long_a * 1e3, f"long prompt's prefill, {kb} (ms)": long_b * 1e3}
    return (f"{cur}: prefill attention runs at {hb.attention_compute_fraction:.0%} of the BF16 "
            f"peak against {ha.attention_compute_fraction:.0%} (the GPU profile's figures for "
            f"{kb} and {ka}), {hb.attention_compute_fraction / ha.attention_compute_fraction:.1f}"
            f"× as fast. Attention FLOPs grow with the square of the prompt and the GEMMs' with "
            f"its length, so on this traffic's prompts TTFT p50 at {col(a, LOAD):.0f} in flight "
            f"only moves from {col(a, 'ttft_s.p50') * 1e3:.1f} to "
            f"{col(b, 'ttft_s.p50') * 1e3:.1f} ms, while one {LONG_PROMPT:,}-token prompt's "
            f"prefill takes {long_b * 1e3:.0f} ms against {long_a * 1e3:.0f} ms "
            f"(×{long_a / long_b:.2f}).")


EXPERT_ROWS = ("moe_experts_up_gate", "moe_experts_down")


def _moe_why(cur: str, a_lo: Row, a_hi: Row, spec: Mapping[str, Any], hw: Hardware,
             figures: dict[str, float], floor_s: float, trend: str) -> str:
    """The fused MoE's gain from the step model's rows: the expert weights a one-token step
    reads and its GPU time either way, the eager floor that may hold it, and at the heaviest
    load, where some token touches every expert either way, a decode step and a prefill chunk,
    where the unfused experts' extra FLOPs show."""
    moe = load_architecture(str(spec["model"])).moe
    assert moe is not None  # the scenario refuses moe_kernel on a dense model
    e, k = moe.num_experts, moe.experts_per_token
    batch = int(col(a_hi, LOAD))
    chunk = _chunk(spec)
    shapes = {"one": BatchShape(decode_seqs=1, decode_context_tokens=1000),
              "decode": BatchShape(decode_seqs=batch, decode_context_tokens=batch * 1000),
              "prefill": BatchShape.one_chunk(chunk)}
    models = {kind: step_model(spec, moe_kernel=kind) for kind in ("unfused", "fused")}
    ms = {(kind, shape): m.cost(b).step_time_s * 1e3
          for kind, m in models.items() for shape, b in shapes.items()}
    gb = {kind: sum(o.bytes for o in m.cost(shapes["one"]).ops if o.op in EXPERT_ROWS) / 1e9
          for kind, m in models.items()}
    figures |= {"experts": e, "experts per token": k, "prefill chunk (tokens)": chunk,
                "expert weights a one-token step reads per GPU, unfused (GB)": gb["unfused"],
                "expert weights a one-token step reads per GPU, fused (GB)": gb["fused"]}
    figures |= {f"GPU step, {shape}, {kind} (ms)": v for (kind, shape), v in ms.items()}
    held = ""
    if floor_s * 1e3 > ms["fused", "one"]:
        figures["eager floor per step (ms)"] = floor_s * 1e3
        held = (f"; but eager launch keeps every step at its {floor_s * 1e3:.1f} ms floor, so "
                f"at a light load the gain stops there")
    return (f"{cur}: a token picks {k} of {e} experts. Unfused, every expert runs as its own "
            f"MLP over every token and its output is masked, so a one-token step reads "
            f"{gb['unfused']:.1f} GB of expert weights per GPU against {gb['fused']:.1f} GB "
            f"fused, and the GPU's step takes {ms['unfused', 'one']:.1f} against "
            f"{ms['fused', 'one']:.1f} ms{held}. At {batch} in flight some token touches every "
            f"expert, so a decode step of {batch} reads the same weights either way "
            f"({ms['unfused', 'decode']:.1f} against {ms['fused', 'decode']:.1f} ms); what "
            f"remains is that each token is computed by {e} experts instead of {k}, which a "
            f"prefill chunk of {chunk:,} tokens pays: {ms['unfused', 'prefill']:.0f} against "
            f"{ms['fused', 'prefill']:.0f} ms; {trend}.")


def _chunk(spec: Mapping[str, Any]) -> int:
    """The scenario's prefill chunk (max_num_batched_tokens), else the Scheduler default."""
    return int(((spec.get("deployment") or {}).get("scheduler") or {}).get(
        "max_num_batched_tokens", Scheduler().max_num_batched_tokens))
