"""The layout a silicon row's run id names, where the row's layout columns count it ep times.

AIConfigurator's runs of 2026-04-06 are named `..._tp{A}_ep{B}_{n}` by the harness that ran
them. For every such aggregated row with B > 1 but fifteen, the file records tp_size x
attention_dp_size = A x B GPUs (SGLang tp 16 for `tp4_ep4`, TensorRT-LLM tp 64 or adp 64 for
`tp8_ep8`, both with moe_tp_size A; vLLM tp 4 x adp 4 with moe_ep_size 16 for `tp4_ep4`),
while a worker of A GPUs with expert parallel B is what ran: on the 97 such rows the decode
step of A GPUs (closed-form mean TPOT median |error| 17 %) and not of A x B (26 %; SGLang
DeepSeek-R1 on B200, 8,192 in, 128 clients: measured 50 ms, A x B = 16 GPUs over two nodes
109 ms, A = 4 GPUs 46 ms). The fifteen others record A GPUs and need nothing. A row that lists
one of these measurements again under the same columns and a name that says nothing
(`..._cfgN`) takes the same layout (silicon.py, named_pools).
"""

from __future__ import annotations

import re
from dataclasses import replace

from simulator.measured.run import Pool

# `..._tp4_ep4_1452`: the harness's name of a run (not `..._tp4_0_ep4_0_...`, whose rows record
# their GPUs as named).
_ID = re.compile(r"_tp(\d+)_ep(\d+)_\d+$")

ID_LAYOUT = ("layout columns count the run id's tp x ep GPUs (tp_size x attention_dp_size = "
             "id tpA x epB): mapped as A GPUs with expert parallel B, the batch per "
             "attention-DP rank scaled to match")


def id_layout(run_id: str, pool: Pool) -> Pool | None:
    """The pool the run id names when the row's columns count its GPUs ep times over (module
    doc), else None. Attention DP gives up the factor first, then TP; the recorded batch is per
    recorded attention-DP rank (concurrency = batch x adp), so it grows by what DP gave up."""
    m = _ID.search(run_id)
    if m is None or pool.pipeline_parallel != 1:
        return None
    gpus, ep = int(m.group(1)), int(m.group(2))
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
