"""The layout a silicon row's run id names where its layout columns count the GPUs ep times
over (measured/id_layout.py): hand-derived cases from the file's own rows, and the rows'
measured TPOT, which the id's layout explains and the columns' does not."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import pytest

import simulator
from simulator.measured.detect import read_measurements
from simulator.measured.id_layout import ID_LAYOUT, NAMED_BY_TWIN, id_layout, named_size
from simulator.measured.run import LAYOUT_CONTRADICTED, MeasuredRun, Pool
from simulator.measured.scenario import map_run
from tests.test_measured import AGG_DP8, write_csv

SILICON = Path(__file__).resolve().parents[2] / "shared" / "reference" / "silicon_calibration.csv"


def _as_named(run_id: str, pool: Pool) -> Pool | None:
    """The pool a row's id names, the way the reader asks (named_size, then id_layout)."""
    size = named_size(run_id)
    return None if size is None else id_layout(size, pool)


def test_sglang_tp16_named_tp4_ep4_is_four_gpus() -> None:
    # Row 833: SGLang 0.5.9 DeepSeek-R1 on B200, tp 16, moe_tp 4, moe_ep 4, id ..._tp4_ep4_1042:
    # 16 = 4 x 4 GPUs recorded, 4 named -> TP 4, EP 4 (moe_tp 4 / 4 = 1), batch as recorded.
    pool = Pool(16, 1, 1, 4, 4, None, 128)
    assert _as_named("2026_04_06_deepseek_r1_b200_sxm_sglang_fp4_agg_8192x1024_c128_tp4_ep4_1042",
                     pool) == Pool(4, 1, 1, 1, 4, None, 128)


def test_trtllm_adp16_named_tp4_ep4_keeps_every_client_running() -> None:
    # Row 889: TensorRT-LLM tp 1, adp 16, moe 4 x 4, batch 8 at 128 clients (128 = 8 x 16):
    # attention DP gives up the factor 4 -> adp 4, and each rank holds 8 x 16 / 4 = 32.
    pool = Pool(1, 1, 16, 4, 4, None, 8)
    assert _as_named("2026_04_06_deepseek_r1_b200_sxm_trtllm_fp4_agg_1024x1024_c128_tp4_ep4_958",
                     pool) == Pool(1, 1, 4, 1, 4, None, 32)


def test_vllm_tp4_adp4_ep16_named_tp4_ep4() -> None:
    # Row 1856: vLLM MiniMax-M2.5 tp 4, adp 4, moe_ep 16, batch 4 at 16 clients -> 4 GPUs:
    # adp 4 / 4 = 1, TP 4, EP 4, batch 4 x 4 = 16.
    pool = Pool(4, 1, 4, 1, 16, None, 4)
    run_id = "2026_04_06_minimax_m2_5_b200_sxm_vllm_fp8_agg_1024x1024_c16_tp4_ep4_1397"
    assert _as_named(run_id, pool) == Pool(4, 1, 1, 1, 4, None, 16)


@pytest.mark.parametrize(("run_id", "pool"), [
    # names its 8 GPUs as recorded (tp 8 x adp 1 = 8): nothing to do
    ("qwen3_5_397b_gap_analysis_h200_sxm_sglang_fp8_agg_8192x1024_c8_tp8_ep8_73",
     Pool(8, 1, 1, 1, 8, None, 8)),
    # the other naming (`_tp8_0_ep8_0_`) records its GPUs as named
    ("2026_03_25_deepseek_r1_b200_sxm_sglang_fp4_agg_1024x1024_c16_tp8_0_ep8_0_257",
     Pool(8, 1, 1, 1, 8, None, 16)),
    # ep 1: no factor to undo
    ("2026_04_06_llama_3_1_70b_h200_sxm_trtllm_fp8_agg_8192x1024_c8_tp4_ep1_833",
     Pool(4, 1, 1, 4, 1, None, 8)),
    ("row-7", Pool(16, 1, 1, 4, 4, None, 8)),  # no name at all
])
def test_rows_that_record_what_they_name_are_left_alone(run_id: str, pool: Pool) -> None:
    assert _as_named(run_id, pool) is None


def _tpot_errors(runs: list[MeasuredRun], named: bool) -> list[float]:
    errors = []
    for run in runs:
        m = map_run(run, None, named_layouts=named)
        assert m.scenario is not None, m.refused
        est = simulator.estimate(simulator.load_scenario(m.scenario))
        errors.append(abs(est.tpot_p50_s * 1e3 / run.measured["tpot.mean"] - 1))
    return errors


def test_the_files_rows_decode_as_the_gpus_their_ids_name() -> None:
    # Every 2026-04-06 aggregated row named tpA_epB with B > 1 whose columns count A x B GPUs
    # (97 of the file's 3,028) maps to A GPUs and declares it; scored on the closed-form
    # estimate, their mean TPOT is nearer as A GPUs than as the columns' A x B: at this
    # change median |error| 17.2 % against 26.0 %; since the engines' FP8 MoE path
    # (engine_styles.yaml moe_fp8_block_fixed_us), which both readings pay, 12.2 % against
    # 14.6 %, p90 46 % against 65 %, nearer on 64 of the 97 runs.
    named = re.compile(r"^2026_04_06_.*_tp(\d+)_ep(\d+)_\d+$")
    runs = []
    for run in read_measurements([SILICON]):
        m = named.match(run.run_id)
        if run.mode != "agg" or m is None or int(m.group(2)) == 1:
            continue
        if run.pools[0].gpus_per_worker != int(m.group(1)) * int(m.group(2)):
            continue
        mapped = map_run(run, None)
        assert ID_LAYOUT in mapped.defaults and mapped.scenario is not None
        dep = mapped.scenario["deployment"]
        assert dep["tensor_parallel"] * dep["attention_data_parallel"] == int(m.group(1))
        assert dep["expert_parallel"] == int(m.group(2))
        runs.append(run)
    assert len(runs) == 97
    named_err, recorded_err = _tpot_errors(runs, named=True), _tpot_errors(runs, named=False)
    as_named, as_recorded = statistics.median(named_err), statistics.median(recorded_err)
    assert as_named < 0.20 and as_named < as_recorded, (as_named, as_recorded)
    nearer = sum(a < b for a, b in zip(named_err, recorded_err, strict=True))
    assert nearer >= 0.6 * len(runs), nearer
    p90 = int(0.9 * (len(runs) - 1))
    assert sorted(named_err)[p90] < sorted(recorded_err)[p90] - 0.10


def test_a_twin_rendering_takes_the_layout_the_other_names(tmp_path: Path) -> None:
    # The file renders some runs twice: once named ..._tp4_ep4_n, once ..._cfgN, with the same
    # columns (tp 16, moe 4 x 4) and the same measured digits. The name says what ran for both,
    # so both map to 4 GPUs, neither contradicts the other, and the twin notes the row that
    # named it. A third rendering under other columns (8 GPUs, as the 2026-03-25 ids write
    # them) is the same measurement laid out otherwise: it and the named pair contradict.
    named = {**AGG_DP8, "id": "2026_04_06_deepseek_r1_b200_sxm_sglang_fp4_agg_8192x1024_c128_"
             "tp4_ep4_1042", "isl": "8192", "concurrency": "128", "batch_size": "128",
             "tp_size": "16", "attention_dp_size": "1", "moe_tp_size": "4", "moe_ep_size": "4",
             "ttft_ms": "2629.24", "tpot_ms": "49.95"}
    twin = {**named, "id": "dsr1_b200_sglang_fp4_agg_8192x1024_c128_cfg7"}
    runs = read_measurements([write_csv(tmp_path / "r.csv", [named, twin])])
    mapped = [map_run(r, None) for r in runs]
    for m in mapped:
        assert m.scenario is not None and ID_LAYOUT in m.defaults
        dep = m.scenario["deployment"]
        assert (dep["tensor_parallel"], dep["expert_parallel"]) == (4, 4)
        assert m.scenario["hardware"]["nodes"] == 1
        assert LAYOUT_CONTRADICTED not in m.defaults
    assert any(n.startswith(NAMED_BY_TWIN) and "row 1" in n for n in runs[1].notes)
    other = {**named, "id": "x_tp8_0_ep8_0_1", "tp_size": "8", "moe_tp_size": "1",
             "moe_ep_size": "8"}
    runs = read_measurements([write_csv(tmp_path / "s.csv", [named, twin, other])])
    assert all(LAYOUT_CONTRADICTED in map_run(r, None).defaults for r in runs)


def test_the_same_measurement_named_and_recorded_as_run_agrees(tmp_path: Path) -> None:
    # Rows 468 and 1297 of the file: TensorRT-LLM DeepSeek-R1 FP8 on H200, 1024/1024, 16
    # clients, TTFT 918.37 / TPOT 14.19 ms, written tp 8 x ep 8 (id ..._tp8_0_ep8_0_1257) and
    # tp 64, moe 8 x 8 (id ..._tp8_ep8_955). Read as named, both are 8 GPUs: no contradiction.
    rows = read_measurements([SILICON])
    a, b = rows[467], rows[1296]
    assert a.measured == b.measured and a.pools != b.pools
    assert b.named_pools == a.pools
    assert not any(n.startswith(LAYOUT_CONTRADICTED) for n in a.notes + b.notes)


def test_a_nameless_rendering_takes_the_layout_a_consistent_name_records() -> None:
    # Rows 1 and 1969 of the file: SGLang DeepSeek-R1 FP4 on B200, 1024/1024, 16 clients,
    # TTFT 319.84 / TPOT 11.04 ms. Row 1 (..._tp8_0_ep8_0_257) records the 8 GPUs its id
    # names, tp 8 x ep 8; row 1969 (..._cfg201) writes tp 64, moe 8 x 8 = 8 x 8 GPUs. The
    # nameless one takes row 1's layout, batch included, and neither contradicts the other.
    rows = read_measurements([SILICON])
    named, twin = rows[0], rows[1968]
    assert named.measured == twin.measured and twin.pools[0].gpus_per_worker == 64
    assert named.named_pools is None and twin.named_pools == named.pools
    assert any(n.startswith(NAMED_BY_TWIN) and "row 1)" in n for n in twin.notes)
    assert not any(n.startswith(LAYOUT_CONTRADICTED) for n in named.notes + twin.notes)
