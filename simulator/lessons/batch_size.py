"""Lesson batch-size: per-user speed against tokens per GPU and cost, as the batch grows."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from simulator.cost import BatchShape
from simulator.cost.explain import bound_of
from simulator.lessons.core import Findings, col
from simulator.lessons.physics import MAX_BATCH, compute_crossover_batch, step_model
from simulator.sweep.table import Row, number

BATCH = "deployment.scheduler.max_num_seqs"


def analyze(rows: list[Row], spec: Mapping[str, Any], out_dir: Path) -> Findings:
    rows = sorted(rows, key=lambda r: col(r, BATCH))
    lo, hi = rows[0], rows[-1]
    b_lo, b_hi = int(col(lo, BATCH)), int(col(hi, BATCH))
    tps = col(hi, "output_tokens_per_s_per_gpu") / col(lo, "output_tokens_per_s_per_gpu")
    tpot = col(hi, "tpot_s.p50") / col(lo, "tpot_s.p50")
    lines = [
        f"From batch {b_lo} to {b_hi}, output tokens/s per GPU grow {tps:.1f}× "
        f"({col(lo, 'output_tokens_per_s_per_gpu'):.0f} → "
        f"{col(hi, 'output_tokens_per_s_per_gpu'):.0f}) while TPOT grows {tpot:.1f}× "
        f"({col(lo, 'tpot_s.p50') * 1e3:.1f} → {col(hi, 'tpot_s.p50') * 1e3:.1f} ms), so each "
        f"user's speed falls from {col(lo, 'output_tokens_per_s_per_user.p50'):.0f} to "
        f"{col(hi, 'output_tokens_per_s_per_user.p50'):.0f} tokens/s."
    ]
    c_lo, c_hi = (number(r, "usd_per_million_output_tokens") for r in (lo, hi))
    if c_lo is not None and c_hi is not None:
        lines.append(f"The cost per million output tokens falls from ${c_lo:.2f} to "
                     f"${c_hi:.2f}: the same GPU-hour is shared by more tokens.")
    else:
        gpu = str((spec.get("hardware") or {}).get("gpu", "GPU"))
        lines.append(f"The cost per token is unknown here: give the GPU a price "
                     f"(FRONTIER_GPU_PRICES={gpu}=USD_PER_HOUR) and this lesson quotes $/Mtok "
                     f"too.")
    model = step_model(spec)
    cross = compute_crossover_batch(model)
    gpu = str((spec.get("hardware") or {}).get("gpu", ""))
    if cross is None:
        lines.append(f"Up to batch {MAX_BATCH} the linear layers of a decode step stay "
                     "HBM-bound: the weights are read faster than they are multiplied.")
    else:
        lines.append(
            f"On {gpu} the linear layers of a decode step spend more time on tensor-core work "
            f"than on streaming their weights from batch {cross} (the chip's ridge is "
            f"{model.ridge_flops_per_byte:.0f} FLOP per byte): below it a step mostly waits for "
            f"the weights, so TPOT barely moves as the batch grows and every extra sequence is "
            f"nearly free.")
    context = _mean_context(spec)
    figures: dict[str, float] = {"mean decode context (tokens)": context,
                                 "ridge (FLOP per byte)": model.ridge_flops_per_byte}
    if cross is not None:
        figures["linear layers compute-bound from batch"] = cross
    for b in sorted({cross or b_hi, b_hi}):
        what, share = bound_of(model.cost(BatchShape(decode_seqs=b,
                                                     decode_context_tokens=b * context)))
        figures[f"batch {b}: decode step batch"] = b
        figures[f"batch {b}: share bound by {what}"] = share
        lines.append(
            f"The whole decode step at batch {b} (mean context {context} tokens) is bound by "
            f"{what}: {share:.0%} of it, as `frontier explain {spec['model']} --gpu {gpu} "
            f"--decode-batch {b} --context {context}` prints; attention stays HBM-bound at any "
            f"batch, since each sequence reads its own KV cache.")
    return Findings(lines, [lo, rows[len(rows) // 2], hi], figures=figures)


def _mean_context(spec: Mapping[str, Any]) -> int:
    """A decoding sequence's mean context: its prompt plus half its output (fixed lengths)."""
    wl = spec.get("workload") or {}
    prompt = int((wl.get("input_tokens") or {}).get("value", 0))
    out = int((wl.get("output_tokens") or {}).get("value", 0))
    return prompt + out // 2
