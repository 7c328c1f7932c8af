"""Tree drafting (EAGLE-2/3's dynamic tree): the target verifies the whole tree, each draft pass
after the first expands top_k tokens per sequence, and the schema's refusals. Hand-derived
costs with the arithmetic in comments."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator.api import simulate
from simulator.cost.draft import eagle_head
from simulator.cost.shape import BatchShape
from simulator.cost.step import StepModel
from simulator.inputs.scenario import load_scenario_file
from simulator.serving.engine_build import build_engine
from tests.test_speculative import scenario

# SafeAILab/EAGLE eagle/evaluation/gen_ea_answer_llama3chat.py defaults, the EAGLE-3 paper's
# evaluation script: --total-token 60 (the tree's draft tokens + 1), --top-k 10.
TREE = {"tree_tokens": 60, "tree_top_k": 10}
CHAIN = {"method": "eagle3", "num_speculative_tokens": 6, "acceptance_length": 4.0}


def _model(spec: dict[str, Any]) -> Any:
    sc, base = load_scenario_file(scenario(spec))
    return build_engine(sc, base).speculative.model


def test_verify_runs_the_whole_tree() -> None:
    model = _model({**CHAIN, **TREE})
    target: StepModel = model.target
    b = BatchShape(decode_seqs=1, decode_context_tokens=1000, speculative_tokens_per_seq=6)
    # The target sees 60 query positions, not the chain's k + 1 = 7.
    assert model.verify_shape(b).speculative_tokens_per_seq == 59
    qkv = next(o for o in model.cost(b).ops if o.op == "qkv_proj")
    # Llama-3.1-8B: N = (32 + 2 x 8) x 128 = 6144, K = 4096, 32 layers, M = 60 tokens:
    # 2 x 60 x 6144 x 4096 x 32 = 96.64 GFLOP.
    assert qkv.flops == pytest.approx(2 * 60 * 6144 * 4096 * 32)
    assert model.verify_s(b) == pytest.approx(
        target.time_s(BatchShape(decode_seqs=1, decode_context_tokens=1000,
                                 speculative_tokens_per_seq=59))
    )
    # A step with nothing drafted is the plain step.
    plain = BatchShape(decode_seqs=1, decode_context_tokens=1000)
    assert model.time_s(plain) == target.time_s(plain)


def test_draft_passes_after_the_first_expand_top_k_tokens() -> None:
    model = _model({**CHAIN, **TREE})
    target: StepModel = model.target
    head = StepModel(eagle_head(target.arch), target.hw, target.layout, target.formats)
    n, ctx = 2, 2 * 1000
    b = BatchShape(decode_seqs=n, decode_context_tokens=ctx, speculative_tokens_per_seq=6)
    shapes = model.draft_shapes(b)
    # k = 6 passes (the tree's depth): the first from the root, 1 token per sequence; the
    # next five expand the 10 best nodes: 10 query positions per sequence.
    assert [s.speculative_tokens_per_seq for s in shapes] == [0, 9, 9, 9, 9, 9]
    hand = head.time_s(BatchShape(decode_seqs=n, decode_context_tokens=ctx)) + sum(
        head.time_s(BatchShape(decode_seqs=n, decode_context_tokens=ctx + j * n,
                               speculative_tokens_per_seq=9))
        for j in range(1, 6)
    )
    # Plus the fc, once per step: the k + 1 = 7 chain positions of each of the 2 sequences,
    # M = 14, 3 x 4096 -> 4096 in BF16: (4096 x 12288 + 14 x 12288 + 14 x 4096) x 2 B =
    # 101.1 MB at 0.80 x 3.35 TB/s = 37.7 us + 1.5 us launch.
    fc_s = (4096 * 12288 + 14 * 12288 + 14 * 4096) * 2 / (0.80 * 3.35e12) + 1.5e-6
    assert model.draft_s(b) == pytest.approx(hand + fc_s)
    # Each wide pass's head GEMMs do 10x the FLOPs of a one-token pass: qkv reads the
    # [embedding; hidden] concatenation, K = 2 x 4096, so at M = 2 x 10 = 20 rows it is
    # 2 x 20 x 6144 x 8192 = 2.013 GFLOP against 0.201 GFLOP.
    wide = next(o for o in head.cost(shapes[1]).ops if o.op == "qkv_proj")
    one = next(o for o in head.cost(shapes[0]).ops if o.op == "qkv_proj")
    assert wide.flops == pytest.approx(2 * 20 * 6144 * 8192)
    assert wide.flops == pytest.approx(10 * one.flops)


def test_a_tree_costs_more_per_step_than_its_chain() -> None:
    tree, chain = _model({**CHAIN, **TREE}), _model(CHAIN)
    b = BatchShape(decode_seqs=64, decode_context_tokens=64 * 1000, speculative_tokens_per_seq=6)
    # 64 sequences x 60 positions = 3840 rows per GEMM against 64 x 7 = 448: past the ridge.
    assert tree.verify_s(b) > 3 * chain.verify_s(b)
    assert tree.draft_s(b) > chain.draft_s(b)


def test_simulated_tree_run_is_slower_per_token_at_the_same_acceptance() -> None:
    def tpot(spec: dict[str, Any]) -> float:
        out = simulate(scenario(spec, concurrency=32, requests=32, out_tokens=64))
        return float(out.to_dict()["tpot_s"]["mean"])

    assert tpot({**CHAIN, **TREE}) > tpot(CHAIN)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"tree_tokens": 60}, "needs both tree_tokens and tree_top_k"),
        ({"tree_tokens": 6, "tree_top_k": 10}, "tree_tokens 6 must lie in"),
        ({"tree_tokens": 62, "tree_top_k": 10}, "= [7, 61]"),
        ({"method": "dflash", "tree_tokens": 20, "tree_top_k": 4}, "drafts no tree"),
    ],
)
def test_bad_tree_is_one_line_and_exit_2(
    tmp_path: Path, extra: dict[str, Any], needle: str
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario({**CHAIN, **extra})))
    p = subprocess.run([sys.executable, "-m", "simulator", "simulate", str(path)],
                       capture_output=True, text=True, check=False)
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr
    assert "Traceback" not in p.stderr


def test_token_budget_counts_the_tree_per_decoder() -> None:
    from simulator.closed_form.steady_state import Traffic, Unit, batch_limit

    def unit(tree: int) -> Unit:
        return Unit(lambda *a: 0.01, max_seqs=1024, budget_tokens=8192, kv_tokens=10**9,
                    mixes=False, chunked=True, tokens_per_step=4.0, verify_tokens=6,
                    tree_tokens=tree)

    traffic = Traffic(256, 513, 256, 513, 0.0, 0.0, 1.0, 512.0, 512.0)
    # Prefill-only steps apart: decoders fit the budget alone. A chain feeds k + 1 = 7 tokens
    # per decoder: 8192 / 7 = 1170.3 > max_num_seqs 1024; a 60-token tree 8192 / 60 = 136.5.
    assert unit(0).fed_per_decoder == 7
    assert batch_limit(unit(0), traffic) == (1024.0, "max_num_seqs")
    limit, name = batch_limit(unit(60), traffic)
    assert name == "token_budget"
    assert limit == pytest.approx(8192 / 60)


def test_estimate_notes_the_tree() -> None:
    from simulator.api import estimate

    out = estimate(scenario({**CHAIN, **TREE}, concurrency=4, requests=8, out_tokens=64))
    notes = " ".join(out.to_dict().get("notes", []))
    assert "a 60-token tree of depth 6" in notes


def test_eagle3_head_shape_widened_attention_input_and_fc() -> None:
    # vLLM llama_eagle3.py: the head's q/k/v read [embedding; hidden] (2 x 4096 for
    # Llama-3.1-8B) and its fc maps 3 x 4096 -> 4096. Parameters:
    # q 8192 x 4096 = 33.55M, k and v 2 x 8192 x 1024 = 16.78M, o 4096 x 4096 = 16.78M,
    # MLP 3 x 4096 x 14336 = 176.16M, fc 3 x 4096 x 4096 = 50.33M, embedding and LM head over
    # the 32K draft vocabulary 2 x 32000 x 4096 = 262.14M, norms 3 x 4096.
    head = eagle_head(_model(CHAIN).target.arch)
    assert head.attention_input_size == 8192
    hand = (33_554_432 + 16_777_216 + 16_777_216 + 176_160_768 + 50_331_648
            + 262_144_000 + 3 * 4096)
    assert head.total_params == hand
