"""The layout a silicon row's run id names, where the row's layout columns count it ep times.

AIConfigurator's runs of 2026-04-06 are named `..._tp{A}_ep{B}_{n}` by the harness that ran
them. For every such aggregated row with B > 1 but fifteen, the file records tp_size x
attention_dp_size = A x B GPUs (SGLang tp 16 for `tp4_ep4`, TensorRT-LLM tp 64 or adp 64 for
`tp8_ep8`, both with moe_tp_size A; vLLM tp 4 x adp 4 with moe_ep_size 16 for `tp4_ep4`),
while a worker of A GPUs with expert parallel B is what ran: on the 97 such rows the decode
step of A GPUs (closed-form mean TPOT median |error| 17 %) and not of A x B (26 %; SGLang
DeepSeek-R1 on B200, 8,192 in, 128 clients: measured 50 ms, A x B = 16 GPUs over two nodes
109 ms, A = 4 GPUs 46 ms). The fifteen others record A GPUs and need nothing.

The file renders some runs more than once, to the digit, and the renderings settle it: 13
TensorRT-LLM DeepSeek-R1 H200 measurements appear under 2026-03-25 ids (`..._tp8_0_ep8_0_n`,
whose columns record the 8 GPUs they name) and again under 2026-04-06 names with tp or adp 64;
SGLang's DeepSeek-R1 B200 runs of rows 1-8 appear again as `..._cfg201` rows with tp 64 and
moe 8 x 8. A row whose own id names nothing (`..._cfgN`) and whose columns count A x B GPUs for
a measurement another row names as A GPUs takes the layout that row names (`name_layouts`).

P/D rows too: 717 of the file's disaggregated rows leave the worker counts (and batch sizes)
empty, and 73 of them list, to the digit, a measurement that a `..._cfgN` row records whole,
56 with the same GPUs per prefill and per decode worker and one whole layout (SGLang
DeepSeek-R1 FP4 B200, 8,192 in, 1,024 clients: row 21 records prefill tp 4, decode tp 8 x ep 4,
no workers; row 2001 the same measurement as 7 prefill workers of attention-DP 4 and 2 decode
workers of attention-DP 8 x ep 8, 64 a rank). The complete rendering says what ran
(`complete_pd_layouts`); AIConfigurator's own predictor refuses a P/D row without worker
counts (tools/accuracy_regression_testing/predict_silicon_sample.py, REQUIRED_DISAGG_FIELDS).
"""

from __future__ import annotations

import re
from dataclasses import replace

from simulator.measured.run import MeasuredRun, Pool

# The harness's names of a run: `..._tp4_ep4_1452` (2026-04-06) and `..._tp8_0_ep8_0_25`
# (2026-03-25, whose rows record the GPUs they name).
_ID = re.compile(r"_tp(\d+)_(?:0_)?ep(\d+)_(?:0_)?\d+$")
# A run whose layout another rendering of the same measurement names (name_layouts).
NAMED_BY_TWIN = ("layout named by the run id of another row listing the same measurement, "
                 "whose columns count the GPUs ep times over")
# A P/D run whose worker counts another rendering records (complete_pd_layouts).
PD_COMPLETED_BY_TWIN = ("P/D worker counts not recorded: the layout of another row recording the "
                        "same measurement whole, with the same GPUs per worker")

ID_LAYOUT = ("layout columns count the run id's tp x ep GPUs (tp_size x attention_dp_size = "
             "id tpA x epB): mapped as A GPUs with expert parallel B, the batch per "
             "attention-DP rank scaled to match")


def named_size(run_id: str) -> tuple[int, int] | None:
    """(GPUs, expert parallel) the run id names, or None where it names none."""
    m = _ID.search(run_id)
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def measurement(r: MeasuredRun) -> tuple[object, ...]:
    """What one measured run is, whatever layout or name a row writes it under."""
    return (r.engine, r.gpu, r.mode, r.load.input_tokens, r.load.output_tokens,
            r.load.concurrency, tuple(sorted(r.measured.items())))


def name_layouts(runs: list[MeasuredRun]) -> list[MeasuredRun]:
    """Each aggregated run's `named_pools` where its id names fewer GPUs than its columns
    count, and where another row names the same measurement's layout (its columns agreeing
    with its name, or undone by id_layout) while this row's own id names nothing and its
    columns count that layout's GPUs times its expert parallel (module doc)."""
    out = list(runs)
    sizes = [named_size(r.run_id) if r.mode == "agg" else None for r in runs]
    ran: dict[tuple[object, ...], tuple[tuple[Pool, ...], int, int]] = {}
    for i, (r, size) in enumerate(zip(runs, sizes, strict=True)):
        if size is None:
            continue
        pool = id_layout(size, r.pools[0])
        if pool is not None:
            out[i] = replace(r, named_pools=(pool,))
            ran.setdefault(measurement(r), ((pool,), r.row, size[0] * size[1]))
        elif r.pools[0].gpus_per_worker == size[0] and size[1] > 1:
            ran.setdefault(measurement(r), (r.pools, r.row, size[0] * size[1]))
    for i, (r, size) in enumerate(zip(runs, sizes, strict=True)):
        if r.mode != "agg" or size is not None:
            continue
        found = ran.get(measurement(r))
        if found is not None and r.pools[0].gpus_per_worker == found[2]:
            out[i] = replace(r, named_pools=found[0],
                             notes=(*r.notes, f"{NAMED_BY_TWIN} (row {found[1]})"))
    return out


def complete_pd_layouts(runs: list[MeasuredRun]) -> list[MeasuredRun]:
    """Each P/D run without worker counts takes, as `named_pools`, the pools of the one
    layout that other rows record whole (workers and batch of both pools) for the same
    measurement, where each of its pools has that layout's GPUs per worker (module doc)."""
    whole: dict[tuple[object, ...], dict[tuple[Pool, ...], int]] = {}
    for r in runs:
        if r.mode == "disagg" and _recorded_whole(r.pools):
            whole.setdefault(measurement(r), {}).setdefault(r.pools, r.row)
    out = list(runs)
    for i, r in enumerate(runs):
        if r.mode != "disagg" or all(p.workers is not None for p in r.pools):
            continue
        found = whole.get(measurement(r), {})
        if len(found) != 1:
            continue
        (pools, row), = found.items()
        if all(a.gpus_per_worker == b.gpus_per_worker for a, b in zip(r.pools, pools,
                                                                       strict=True)):
            out[i] = replace(r, named_pools=pools,
                             notes=(*r.notes, f"{PD_COMPLETED_BY_TWIN} (row {row})"))
    return out


def _recorded_whole(pools: tuple[Pool, ...]) -> bool:
    return len(pools) == 2 and all(p.workers is not None and p.max_batch is not None
                                   for p in pools)


def id_layout(size: tuple[int, int], pool: Pool) -> Pool | None:
    """The pool a run id naming `size` (GPUs, expert parallel; named_size) says ran when the
    row's columns count its GPUs ep times over (module doc), else None. Attention DP gives up
    the factor first, then TP; the recorded batch is per recorded attention-DP rank
    (concurrency = batch x adp), so it grows by what DP gave up."""
    if pool.pipeline_parallel != 1:
        return None
    gpus, ep = size
    adp = pool.attention_data_parallel or 1
    if ep == 1 or pool.tensor_parallel * adp != gpus * ep:
        return None
    if adp % ep == 0:
        new_adp, tp = adp // ep, pool.tensor_parallel
    elif pool.tensor_parallel % ep == 0:
        new_adp, tp = adp, pool.tensor_parallel // ep
    else:
        return None
    batch = None if pool.max_batch is None else pool.max_batch * (adp // new_adp)
    return replace(
        pool,
        tensor_parallel=tp,
        attention_data_parallel=new_adp if pool.attention_data_parallel is not None else None,
        moe_tensor_parallel=gpus // ep if gpus % ep == 0 else None,
        expert_parallel=ep,
        max_batch=batch,
    )
