"""How MoE layers exchange tokens under expert parallelism (cost/operators.py group_ops and
ffn_ops): with attention TP every GPU holds every token and the layer's all-reduce combines
the experts, so EP adds no collective; attention-DP replicas gather and scatter tokens, or
dispatch them all-to-all (DeepEP-style) on the MoE layers when `moe_dispatch: all_to_all`."""

from __future__ import annotations

import pytest

from simulator.cost import Formats, ParallelLayout, StepModel
from simulator.cost.comm import allgather_time_s, allreduce_time_s, alltoall_time_s
from simulator.cost.layout import LayoutError
from simulator.cost.moe_routing import expected_max_binomial
from simulator.cost.shape import BatchShape
from simulator.hardware.profile import load_hardware
from simulator.inputs.scenario import load_scenario_file
from simulator.model.load import load_architecture
from simulator.model.precision import BF16_BYTES, get_format
from simulator.serving.engine_build import build_engine
from simulator.sweep.export import launch_commands
from tests.test_scenario import _error

FP8 = Formats("fp8", "fp8", "fp8")
BATCH = BatchShape(decode_seqs=4, decode_context_tokens=4 * 1500)


def _comm(layout: ParallelLayout) -> dict[str, float]:
    m = StepModel(load_architecture("deepseek-r1"), load_hardware("b200"), layout, FP8)
    return {o.op: o.time_s for o in m.cost(BATCH).ops if o.bound == "communication"}


def test_ep_under_attention_tp_adds_no_collective() -> None:
    # DeepSeek-R1 TP8 EP8 on B200, 4 decode tokens: the two all-reduces per layer of 4 x 7168
    # BF16 activations over 8 GPUs, 61 layers, as with TP8 alone; no all-to-all row.
    hw = load_hardware("b200")
    ep8, tp8 = _comm(ParallelLayout(8, 1, 1, 8)), _comm(ParallelLayout(8, 1, 1, 1))
    assert "ep_alltoall" not in ep8
    hand = 2 * 61 * allreduce_time_s(4 * 7168 * BF16_BYTES, 8, hw)
    assert ep8["tp_allreduce"] == pytest.approx(hand, rel=1e-12)
    assert ep8 == tp8


def test_attention_dp_gathers_every_layer_by_default() -> None:
    # DP8 x TP1, EP8: 4 tokens over 8 ranks -> 1 per rank, gathered as 8 rows (padded to the
    # busiest rank) of 7168 BF16 per layer, then scattered back: 61 x 2 all-gathers; no TP
    # all-reduce inside a one-GPU rank and no all-to-all.
    hw = load_hardware("b200")
    ops = _comm(ParallelLayout(1, 1, 8, 8))
    assert "ep_alltoall" not in ops
    hand = 61 * 2 * allgather_time_s(8 * 7168 * BF16_BYTES, 8, hw)
    assert ops["dp_gather_scatter"] == pytest.approx(hand, rel=1e-12)


def test_all_to_all_replaces_the_gather_on_moe_layers() -> None:
    # Same layout with all-to-all dispatch: the 3 dense-MLP layers still gather and scatter;
    # the 58 MoE layers send each GPU's 4/8 tokens x 8 experts x 7168 hidden away in FP8 and
    # take them back in BF16 instead. The busiest GPU receives more than the mean 4 pairs:
    # 32 pairs land on 8 GPUs, E[max of 8 Binomial(32, 1/8)] = 6.80 (tests/test_moe_scatter.py).
    hw = load_hardware("b200")
    ops = _comm(ParallelLayout(1, 1, 8, 8, moe_all_to_all=True))
    gather = 3 * 2 * allgather_time_s(8 * 7168 * BF16_BYTES, 8, hw)
    assert ops["dp_gather_scatter"] == pytest.approx(gather, rel=1e-12)
    busiest = expected_max_binomial(32, 1 / 8, 8)
    assert busiest == pytest.approx(6.80, abs=0.005)
    sent = 4 / 8 * 8 * 7168 * busiest / 4
    fp8 = get_format("fp8").bytes_per_element
    a2a = 58 * (alltoall_time_s(sent * fp8, 8, hw) + alltoall_time_s(sent * BF16_BYTES, 8, hw))
    assert ops["ep_alltoall"] == pytest.approx(a2a, rel=1e-12)


def test_all_to_all_without_attention_dp_is_refused() -> None:
    with pytest.raises(LayoutError):
        StepModel(
            load_architecture("deepseek-r1"),
            load_hardware("b200"),
            ParallelLayout(8, 1, 1, 8, moe_all_to_all=True),
            FP8,
        )
    msg = _error(["deployment.tensor_parallel=2", "deployment.moe_dispatch=all_to_all"])
    assert "moe_dispatch all_to_all needs attention_data_parallel > 1" in msg


def test_scenario_key_reaches_the_layout() -> None:
    """The shipped attention-DP scenario (Qwen3-235B, DP8 EP8 on H200) gathers by default and
    dispatches all-to-all when asked."""
    path = "scenarios/moe-attention-dp-qwen3-235b-h200.yaml"
    default = build_engine(load_scenario_file(path)[0]).step_model.layout
    a2a = load_scenario_file(path, ["deployment.moe_dispatch=all_to_all"])[0]
    assert not default.moe_all_to_all
    assert build_engine(a2a).step_model.layout.moe_all_to_all


def test_export_names_sglangs_deepep_backend_for_all_to_all() -> None:
    sc = {
        "model": "qwen3-235b-a22b",
        "hardware": {"gpu": "h200-sxm"},
        "deployment": {
            "attention_data_parallel": 8,
            "expert_parallel": 8,
            "moe_dispatch": "all_to_all",
            "precision": {"weights": "fp8", "activations": "fp8", "kv_cache": "fp8"},
            "scheduler": {"max_num_seqs": 64, "max_num_batched_tokens": 8192},
        },
        "workload": {"arrival": {"kind": "closed_loop", "concurrency": 16}},
    }
    text = " ".join(launch_commands(sc, "sglang"))
    assert "--enable-dp-attention" in text and "--ep-size 8" in text
    assert "--moe-a2a-backend deepep" in text
    gather = dict(sc, deployment={**sc["deployment"], "moe_dispatch": "gather"})
    assert "--moe-a2a-backend" not in " ".join(launch_commands(gather, "sglang"))


def test_a_rank_prefilling_beside_decoding_ranks_is_gathered_unpadded() -> None:
    """DP8 x TP1, EP8 on B200: one rank prefills a 1024-token prompt while each of the eight
    decodes 2 tokens (1040 tokens in all; the busiest rank holds 1026). Padded to the busiest
    rank, the gather carries 8 x 1026 = 8208 rows (all-gather: 7/8 of them over the wire);
    summed, each rank writes its rows at its offset of a 1040-row buffer that is all-reduced
    (2 x 7/8 of it): 2 x 1040 < 8208, so the summed way wins, as SGLang's DpPaddingMode picks
    it whenever a rank prefills. 61 layers, a gather and a reduce back each."""
    from simulator.cost.operators import group_ops

    hw = load_hardware("b200")
    model = StepModel(load_architecture("deepseek-r1"), hw, ParallelLayout(1, 1, 8, 8), FP8)
    padded = allgather_time_s(8 * 1026 * 7168 * BF16_BYTES, 8, hw)
    summed = allreduce_time_s(1040 * 7168 * BF16_BYTES, 8, hw)
    assert summed < padded / 3
    comm = {o.op: o.time_s for o in group_ops(model, 1040, 1026) if o.bound == "communication"}
    assert comm["dp_gather_scatter"] == pytest.approx(61 * 2 * summed, rel=1e-12)
    # balanced decode (8 ranks x 2 tokens): padding costs nothing, the all-gather is cheaper
    comm = {o.op: o.time_s for o in group_ops(model, 16, 2) if o.bound == "communication"}
    assert comm["dp_gather_scatter"] == pytest.approx(
        61 * 2 * allgather_time_s(16 * 7168 * BF16_BYTES, 8, hw), rel=1e-12)
