"""Lesson speculative: code against chat acceptance, EAGLE-3 / DFlash / DSpark / MTP, and the
batch past which drafting stops paying, each speed-up against the same model without it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simulator.lessons.core import Findings, col
from simulator.report.page import Section
from simulator.report.sweep_figures import metric_figure
from simulator.sweep.table import Row, number

KIND = "workload.kind"
LOAD = "workload.arrival.concurrency"
TPS = "output_tokens_per_s_per_gpu"
LABEL = "speculation"  # derived: "dspark, code" or "none"
NAMES = {"eagle3": "EAGLE-3", "dflash": "DFlash", "dspark": "DSpark", "mtp": "MTP",
         "draft_model": "a draft model", "ngram": "n-gram lookup"}


def method(r: Row) -> str | None:
    m = r.get("speculative.method")
    return str(m) if m else None


def derive(r: Row) -> dict[str, Any]:
    """The frontier's colour: method and workload kind, or `none` for the baseline."""
    m = method(r)
    return {LABEL: f"{NAMES.get(m, m)}, {r.get(KIND)}" if m else "none"}


def baseline(rows: Sequence[Row], r: Row) -> Row | None:
    """The same model, traffic and load without speculation."""
    return next((b for b in rows if method(b) is None and b.get("model") == r.get("model")
                 and b.get(KIND) == r.get(KIND) and col(b, LOAD) == col(r, LOAD)), None)


def speedup(rows: Sequence[Row], r: Row) -> float | None:
    """Tokens/s per GPU of `r` over its baseline."""
    base = baseline(rows, r)
    return None if base is None else col(r, TPS) / col(base, TPS)


def series(rows: Sequence[Row], m: str, kind: str) -> list[Row]:
    return sorted((r for r in rows if method(r) == m and r.get(KIND) == kind),
                  key=lambda r: col(r, LOAD))


def _tau(r: Row) -> float:
    v = number(r, "speculative.acceptance_length_mean")
    return v if v is not None else col(r, "speculative.acceptance_length_expected")


def _acceptance_line(rows: Sequence[Row], methods: list[str]) -> str | None:
    pairs: list[tuple[str, Row, Row]] = []
    for m in methods:
        chats, codes = series(rows, m, "chat"), series(rows, m, "code")
        if chats and codes:
            pairs.append((m, chats[0], codes[0]))
    if not pairs:
        return None
    m, chat, code = max(pairs, key=lambda p: _tau(p[2]))
    s_chat, s_code = speedup(rows, chat), speedup(rows, code)
    text = (f"Code is more predictable than chat: {NAMES[m]} emits {_tau(code):.2f} tokens per "
            f"verify step on code against {_tau(chat):.2f} on chat")
    others = [f"{NAMES[o]} {_tau(c2):.2f} against {_tau(c1):.2f}" for o, c1, c2 in pairs
              if o != m]
    if others:
        text += f" ({'; '.join(others)})"
    if s_chat is not None and s_code is not None:
        text += (f", so at concurrency {col(code, LOAD):.0f} it multiplies tokens/s by "
                 f"{s_code:.2f}× on code and {s_chat:.2f}× on chat")
    return text + "."


def _methods_line(rows: Sequence[Row], methods: list[str]) -> str | None:
    firsts = [(m, s[0]) for m in methods if (s := series(rows, m, "chat"))]
    if not firsts:
        return None
    parts = []
    for m, r in firsts:
        share = number(r, "speculative.draft_share_of_gpu_time")
        parts.append(f"{NAMES[m]} {col(r, 'tpot_s.p50') * 1e3:.2f} ms"
                     + (f" (drafting {100 * share:.0f} % of the GPU time)" if share is not None
                        else ""))
    r0 = firsts[0][1]
    base = baseline(rows, r0)
    head = f"On chat at concurrency {col(r0, LOAD):.0f}, TPOT "
    if base is not None:
        head += f"without speculation is {col(base, 'tpot_s.p50') * 1e3:.2f} ms; with "
    text = head + ", ".join(parts) + "."
    have = {m: r for m, r in firsts}
    if "eagle3" in have:
        k = col(have["eagle3"], "speculative.num_speculative_tokens")
        text += f" EAGLE-3 drafts its {k:.0f} tokens one after another through a one-layer head."
    parallel = [NAMES[m] for m in ("dflash", "dspark") if m in have]
    if parallel:
        text += (f" {' and '.join(parallel)} draft the whole block in one parallel pass of a "
                 "small drafter.")
    if "dflash" in have and "dspark" in have and _tau(have["dspark"]) > _tau(have["dflash"]):
        text += (f" DSpark's drafts are accepted more often ({_tau(have['dspark']):.2f} tokens "
                 f"per step against {_tau(have['dflash']):.2f}).")
    return text


def _crossover_line(rows: Sequence[Row], m: str, kind: str) -> str | None:
    s = series(rows, m, kind)
    ups = [(r, u) for r in s if (u := speedup(rows, r)) is not None]
    if len(ups) < 2:
        return None
    (r0, u0), (r1, u1) = ups[0], ups[-1]
    cross = number(r0, "speculative.crossover_batch")
    text = (f"{NAMES[m]} on {kind}: the speed-up falls from {u0:.2f}× at concurrency "
            f"{col(r0, LOAD):.0f} to {u1:.2f}× at {col(r1, LOAD):.0f}")
    below = next(((r, u) for r, u in ups if u < 1.0), None)
    if below is not None:
        if below[0] is not r1:
            text += f", below 1 from concurrency {col(below[0], LOAD):.0f} on ({below[1]:.2f}×)"
        text += (f": verifying {col(r0, 'speculative.num_speculative_tokens') + 1:.0f} positions "
                 f"per sequence costs more, once the step is compute-bound, than the "
                 f"{_tau(r0):.2f} tokens it yields")
    if cross is not None:
        text += (f". The roofline crossover the result reports is a decode batch of "
                 f"{cross:.0f}, above which policy: auto switches drafting off")
        if u1 > 1.0 and col(r1, LOAD) > cross:
            text += (f" (judged on a decode-only step verifying every draft at the mean "
                     f"context; the run's steps are not all like that, and it still gains "
                     f"{u1:.2f}× at {col(r1, LOAD):.0f})")
    else:
        text += (". The roofline finds no crossover up to the batch cap, so policy: auto "
                 "never switches drafting off here")
    return text + "."


def analyze(rows: list[Row], spec: Mapping[str, Any], out_dir: Path) -> Findings:
    methods = list(dict.fromkeys(m for r in rows if (m := method(r)) is not None))
    seq = [m for m in methods if m != "mtp"]
    lines = [line for line in (_acceptance_line(rows, seq), _methods_line(rows, seq)) if line]
    for m in seq:
        line = _crossover_line(rows, m, "chat")
        if line:
            lines.append(line)
    mtp = series(rows, "mtp", "chat")
    if mtp and (up := speedup(rows, mtp[0])) is not None and (up1 := speedup(rows, mtp[-1])):
        lines.append(
            f"MTP needs a model trained with its own draft layers (here {mtp[0].get('model')} on "
            f"{col(mtp[0], 'num_gpus'):.0f} GPUs, one draft token, accepted in "
            f"{100 * (_tau(mtp[0]) - 1):.0f} % of the steps): against the same model without "
            f"it, {up:.2f}× at concurrency {col(mtp[0], LOAD):.0f} and "
            f"{up1:.2f}× at {col(mtp[-1], LOAD):.0f}. One draft token caps its gain below 2×, "
            f"but it is cheap to verify, and the MoE decode step stays memory-bound far into "
            f"the batch.")
    points = []
    first = seq[0] if seq else None
    if first is not None and (s := series(rows, first, "chat")):
        for r in (s[0], s[-1]):
            base = baseline(rows, r)
            points.extend([b for b in (base,) if b is not None] + [r])
    # The text quotes each series' lightest and heaviest load and the baselines beside them.
    cited = []
    for m in methods:
        for kind in dict.fromkeys(str(r.get(KIND)) for r in rows):
            if s := series(rows, m, kind):
                cited += [x for r in (s[0], s[-1]) for x in (r, baseline(rows, r)) if x]
    ups = [{**r, "speed-up": u} for r in rows if method(r) is not None
           and (u := speedup(rows, r)) is not None]
    figure = metric_figure(
        ups, LOAD, "speed-up", LABEL, title="Speed-up over the same model without speculation",
        x_label="concurrency (requests in flight)", y_label="output tokens/s per GPU, ×",
        reference_y=1.0)
    extra = [Section("Where speculation stops paying", "Each method and traffic mix against the "
                     "same model at the same load without a drafter; below the dashed line at "
                     "1× drafting costs more than it saves.", figure)]
    return Findings(lines, points, extra, cited=cited)
