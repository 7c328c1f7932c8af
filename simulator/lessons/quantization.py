"""Lesson quantization: BF16 → FP8 → FP4 weights, activations and KV cache, on a chip without
FP4 tensor cores (H100) and one with them (B200), each format beside its published quality."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simulator.lessons.core import Findings, col
from simulator.model.precision import get_format
from simulator.report.format_report import format_section
from simulator.report.page import Section
from simulator.sweep.frontier import DEFAULT_X, DEFAULT_Y
from simulator.sweep.table import Row, number

GPU = "hardware.gpu"
WEIGHTS = "deployment.precision.weights"
KV = "deployment.precision.kv_cache"
LOAD = "workload.arrival.concurrency"
TPS = "output_tokens_per_s_per_gpu"
FP4 = ("nvfp4", "mxfp4")


def pick(rows: Sequence[Row], gpu: str, weights: str, kv: str, load: float) -> Row | None:
    return next((r for r in rows if r.get(GPU) == gpu and r.get(WEIGHTS) == weights
                 and r.get(KV) == kv and col(r, LOAD) == load), None)


def _ratio(a: Row, b: Row, column: str) -> float:
    return col(b, column) / col(a, column)


def _gpu_lines(rows: Sequence[Row], gpu: str, lo: float, hi: float, fp4: str) -> list[str]:
    """FP8 against BF16, then FP4 against FP8, on one GPU (KV cache held at BF16, then FP8)."""
    out = []
    b16, f8 = pick(rows, gpu, "bf16", "bf16", hi), pick(rows, gpu, "fp8", "bf16", hi)
    b16_1, f8_1 = pick(rows, gpu, "bf16", "bf16", lo), pick(rows, gpu, "fp8", "bf16", lo)
    if b16 and f8 and b16_1 and f8_1:
        out.append(
            f"On {gpu}, FP8 weights and activations (BF16 KV cache) reach "
            f"{col(f8, TPS):.0f} output tokens/s per GPU at concurrency {hi:.0f} against "
            f"{col(b16, TPS):.0f} for BF16 ({_ratio(b16, f8, TPS):.2f}×), and "
            f"{'cut' if col(f8_1, 'tpot_s.p50') < col(b16_1, 'tpot_s.p50') else 'move'} "
            f"TPOT at concurrency {lo:.0f} from {col(b16_1, 'tpot_s.p50') * 1e3:.1f} to "
            f"{col(f8_1, 'tpot_s.p50') * 1e3:.1f} ms: half the weight bytes to stream, and "
            f"FP8 tensor cores twice as fast as BF16 ones.")
    f8, f4 = pick(rows, gpu, "fp8", "fp8", hi), pick(rows, gpu, fp4, "fp8", hi)
    f8_1, f4_1 = pick(rows, gpu, "fp8", "fp8", lo), pick(rows, gpu, fp4, "fp8", lo)
    if not (f8 and f4 and f8_1 and f4_1):
        return out
    gain, ttft = _ratio(f8, f4, TPS), _ratio(f8_1, f4_1, "ttft_s.p50")
    head = (f"{fp4.upper()} weights against FP8 (FP8 KV cache) on {gpu}: {gain:.2f}× the "
            f"tokens/s per GPU at concurrency {hi:.0f} ({col(f8, TPS):.0f} → {col(f4, TPS):.0f}), "
            f"TPOT at concurrency {lo:.0f} {col(f8_1, 'tpot_s.p50') * 1e3:.1f} → "
            f"{col(f4_1, 'tpot_s.p50') * 1e3:.1f} ms, and the compute-bound prefill (TTFT at "
            f"concurrency {lo:.0f}) {col(f8_1, 'ttft_s.p50') * 1e3:.1f} → "
            f"{col(f4_1, 'ttft_s.p50') * 1e3:.1f} ms")
    faster = col(f4_1, "tpot_s.p50") < col(f8_1, "tpot_s.p50")
    if ttft > 0.95 and faster:
        out.append(head + f": {gpu} has no FP4 tensor cores, so FP4 weights halve the bytes "
                   "each step streams (the low-load gain) but are dequantized and multiplied at "
                   "FP8, and once the step is compute-bound they buy next to nothing.")
    elif ttft > 0.95:
        out.append(head + f": {gpu} has no FP4 tensor cores, so FP4 weights are dequantized "
                   "and multiplied at FP8; here that work costs more than the halved weight "
                   "bytes save, so FP4 is slower at low load too, and buys memory, not speed.")
    elif faster:
        out.append(head + f": {gpu} multiplies FP4 on its own tensor cores, so the gain holds "
                   "where the step is compute-bound too.")
    else:
        out.append(head + f": {gpu} multiplies FP4 on its own tensor cores, so FP4 gains where "
                   "the step is compute-bound; at low load it is slower, because this "
                   "profile's small-batch FP4 kernels stream weights below the FP8 ones' rate.")
    return out


def _fp4_pair_line(rows: Sequence[Row], gpu: str, lo: float) -> str | None:
    """NVFP4 against MXFP4: the same FP4 elements, scales of different size and granularity."""
    nv, mx = pick(rows, gpu, "nvfp4", "fp8", lo), pick(rows, gpu, "mxfp4", "fp8", lo)
    if nv is None or mx is None:
        return None
    b_nv, b_mx = (get_format(f).bits_per_element for f in ("nvfp4", "mxfp4"))
    return (f"NVFP4 and MXFP4 store the same 4-bit elements with different scales ({b_nv:g} "
            f"against {b_mx:g} bits per element with the scale amortized): on {gpu} at "
            f"concurrency {lo:.0f}, TPOT {col(nv, 'tpot_s.p50') * 1e3:.2f} against "
            f"{col(mx, 'tpot_s.p50') * 1e3:.2f} ms. NVFP4's finer scales are there for "
            "accuracy, not speed.")


def _kv_line(rows: Sequence[Row], gpu: str, hi: float) -> str | None:
    caps = {kv: pick(rows, gpu, "fp8", kv, hi) for kv in ("bf16", "fp8", "nvfp4")}
    if any(r is None or number(r, "kv_capacity_tokens") is None for r in caps.values()):
        return None
    a, b, c = (caps[k] for k in ("bf16", "fp8", "nvfp4"))
    assert a is not None and b is not None and c is not None
    return (
        f"The KV cache format buys capacity, not FLOPs: with FP8 weights on {gpu} the cache "
        f"holds {col(a, 'kv_capacity_tokens') / 1e6:.2f}M tokens at BF16, "
        f"{col(b, 'kv_capacity_tokens') / 1e6:.2f}M at FP8 and "
        f"{col(c, 'kv_capacity_tokens') / 1e6:.2f}M at NVFP4; at concurrency {hi:.0f} that "
        f"moves tokens/s per GPU from {col(a, TPS):.0f} to {col(b, TPS):.0f} and "
        f"{col(c, TPS):.0f}, by reading fewer KV bytes each step"
        + (": no request waits for cache space even at BF16." if col(a, "preemptions") == 0
           else f" and from {col(a, 'preemptions'):.0f} preemptions at BF16 that a smaller "
           "format avoids."))


def _quality_line(rows: Sequence[Row]) -> str:
    """The published quality of each format combination the run holds, `unknown` ones summed
    up by the weight or KV format that has no figure at all."""
    known: dict[str, str] = {}
    unknown: dict[str, tuple[str, str]] = {}  # formats -> (weights, kv)
    for r in rows:
        formats = str(r.get("quality.formats"))
        delta = number(r, "quality.delta_pct")
        if delta is None:
            unknown[formats] = (str(r.get(WEIGHTS)), str(r.get(KV)))
        elif r.get("quality.basis") == "measured" and delta == 0.0:
            known[formats] = f"{formats} is the published checkpoint"
        else:
            borrowed = " (borrowed from a sibling model: basis family)" if (
                r.get("quality.basis") == "family") else ""
            known[formats] = (f"{formats} {delta:+.2f} % on {r.get('quality.benchmark')}"
                              f"{borrowed}")
    text = ("Quality (weights/activations/KV against the published checkpoint): "
            + "; ".join(known.values()) + ".")
    if unknown:
        ok_w = {f.split("/")[0] for f in known}
        ok_kv = {f.split("/")[-1] for f in known}
        none_w = sorted({w for w, _ in unknown.values() if w not in ok_w})
        none_kv = sorted({kv for _, kv in unknown.values() if kv not in ok_kv})
        parts = [f"{w} weights" for w in none_w] + [f"a KV cache at {kv}" for kv in none_kv]
        rest = [f for f, (w, kv) in unknown.items() if w in ok_w and kv in ok_kv]
        text += (f" Unknown for {', '.join(parts + rest)}: nothing is published for this model "
                 "at those formats, so this page does not guess (the table gives each "
                 "figure's source).")
    return text


def analyze(rows: list[Row], spec: Mapping[str, Any], out_dir: Path) -> Findings:
    loads = sorted({col(r, LOAD) for r in rows})
    lo, hi = loads[0], loads[-1]
    gpus = list(dict.fromkeys(str(r.get(GPU)) for r in rows))
    fp4 = next((f for f in FP4 if any(r.get(WEIGHTS) == f for r in rows)), FP4[0])
    lines: list[str] = []
    for gpu in gpus:
        lines.extend(_gpu_lines(rows, gpu, lo, hi, fp4))
    pair = _fp4_pair_line(rows, gpus[-1], lo)
    if pair:
        lines.append(pair)
    kv = _kv_line(rows, gpus[0], hi)
    if kv:
        lines.append(kv)
    lines.append(_quality_line(rows))
    points = [r for gpu in gpus for w in ("fp8", fp4)
              if (r := pick(rows, gpu, w, "fp8", hi)) is not None]
    # The text quotes every format at the lightest and the heaviest load.
    cited = [r for r in rows if col(r, LOAD) in (lo, hi)]
    figures = {f"{f} bits per element": get_format(f).bits_per_element
               for f in ("nvfp4", "mxfp4")}
    extra = []
    table = format_section(rows, [GPU, WEIGHTS, KV, LOAD], DEFAULT_X, DEFAULT_Y)
    if table is not None:
        extra.append(Section(
            table.title, "Each GPU and format combination at its best, with its published "
            "quality delta against the model's checkpoint and the figure's source. `unknown`: "
            "nothing is published for this model at those formats, and the simulator does not "
            "guess; a family basis borrows a sibling model's figure.",
            html_body=table.html_body))
    return Findings(lines, points, extra, cited=cited, figures=figures)
