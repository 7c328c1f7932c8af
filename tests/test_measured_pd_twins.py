"""P/D rows without worker counts that list a measurement another row records whole take that
row's layout (measured/id_layout.py complete_pd_layouts): the file's own rows, and their
measured TPOT, which the complete layout explains and the one-and-one guess does not."""

from __future__ import annotations

import statistics

from simulator.measured.detect import read_measurements
from simulator.measured.id_layout import PD_COMPLETED_BY_TWIN
from simulator.measured.run import LAYOUT_CONTRADICTED
from simulator.measured.scenario import WORKERS_GUESSED, map_run
from tests.test_measured_id_layout import SILICON, _tpot_errors


def test_row_21_runs_as_row_2001_records_it() -> None:
    # SGLang 0.5.8.post1 DeepSeek-R1 FP4 on B200, 8,192 in, 1,024 out, 1,024 clients, the same
    # TTFT and TPOT to the digit. Row 21 (..._tp4_0_ep4_0_806) records prefill tp 4 x ep 4 and
    # decode tp 8 x ep 4, no workers or batch; row 2001 (..._cfg538) prefill attention-DP 4 x 7
    # workers, decode attention-DP 8, ep 8, 2 workers, 64 a rank (2 x 8 x 64 = 1,024). GPUs
    # per worker agree (4 and 8), so row 21 runs as row 2001 says, and neither contradicts.
    rows = read_measurements([SILICON])
    partial, whole = rows[20], rows[2000]
    assert partial.measured == whole.measured and partial.pools != whole.pools
    assert partial.pools[0].workers is None and whole.pools[0].workers == 7
    assert partial.named_pools == whole.pools
    assert any(n.startswith(PD_COMPLETED_BY_TWIN) and "row 2001" in n for n in partial.notes)
    mapped = map_run(partial, None)
    assert mapped.scenario is not None
    assert PD_COMPLETED_BY_TWIN in mapped.defaults and WORKERS_GUESSED not in mapped.defaults
    dep = mapped.scenario["deployment"]
    assert (dep["prefill"]["replicas"], dep["decode"]["replicas"]) == (7, 2)
    assert not any(n.startswith(LAYOUT_CONTRADICTED) for n in partial.notes + whole.notes)


def test_the_completed_rows_decode_as_their_twins_record() -> None:
    # Every P/D row the reader completes (56 of the file's 717 without worker counts, at this
    # change), scored on the closed-form estimate: mean TPOT median |error| 12.0 % as the twin
    # records the layout against 37.8 % on one prefill and one decode worker of the row's own
    # columns (the decode batch split over the workers that ran, or not).
    runs = [r for r in read_measurements([SILICON])
            if any(n.startswith(PD_COMPLETED_BY_TWIN) for n in r.notes)]
    assert len(runs) >= 50
    completed, guessed = _tpot_errors(runs, named=True), _tpot_errors(runs, named=False)
    assert statistics.median(completed) < 0.15
    assert statistics.median(completed) < statistics.median(guessed) - 0.15
