"""Lesson batch-size: per-user speed against tokens per GPU and cost, as the batch grows."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

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
    if cross is None:
        lines.append(f"Up to batch {MAX_BATCH} the linear layers of a decode step stay "
                     "HBM-bound: the weights are read faster than they are multiplied.")
    else:
        lines.append(
            f"The linear layers of a decode step turn from memory- to compute-bound at batch "
            f"{cross} (the chip's ridge is {model.ridge_flops_per_byte:.0f} FLOP per byte): "
            f"below it a step mostly waits for the weights to stream from HBM, so TPOT barely "
            f"moves as the batch grows and every extra sequence is nearly free. Attention "
            f"stays HBM-bound at any batch, since each sequence reads its own KV cache.")
    return Findings(lines, [lo, rows[len(rows) // 2], hi])
