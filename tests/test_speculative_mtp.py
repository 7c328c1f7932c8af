"""MTP as physics: the drafter is the model's own extra layer, the verify pass of a MoE at
batch 1 streams the experts every verified position routes to, and a preset published per
draft position is used as published and refused past its last position."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.cost.shape import BatchShape
from simulator.inputs.scenario import load_scenario_file
from simulator.inputs.speculative import (
    SpeculativeConfig,
    acceptance_length_of,
    per_position_rates,
)
from simulator.model.load import load_architecture
from simulator.serving.engine_build import Engine, build_engine
from simulator.serving.spec_engine import SpeculativeEngine

ROOT = Path(__file__).resolve().parent.parent


def _r1_engine(k: int = 3) -> SpeculativeEngine:
    s = {
        "schema_version": 1, "name": "r1 mtp", "model": "deepseek-r1",
        "hardware": {"gpu": "h200-sxm", "gpus_per_node": 8},
        "deployment": {
            "tensor_parallel": 8, "expert_parallel": 4, "engine": "trtllm",
            "precision": {"weights": "fp8", "activations": "fp8", "kv_cache": "fp8"},
            "scheduler": {"max_num_seqs": 8, "max_num_batched_tokens": 8192},
            "speculative": {"method": "mtp", "num_speculative_tokens": k,
                            "preset": "mtp-deepseek-r1-trtllm"},
        },
        "workload": {"arrival": {"kind": "closed_loop", "concurrency": 1}, "num_requests": 1,
                     "input_tokens": {"kind": "fixed", "value": 1024},
                     "output_tokens": {"kind": "fixed", "value": 256}},
    }
    sc, base = load_scenario_file(s)
    e: Engine = build_engine(sc, base)
    assert e.speculative is not None
    return e.speculative


def test_mtp_drafter_is_the_models_own_extra_layer() -> None:
    arch = load_architecture("deepseek-r1")
    assert arch.num_mtp_layers == 1  # num_nextn_predict_layers in DeepSeek-R1's config.json
    e = _r1_engine()
    drafter = e.model.drafter
    assert drafter is not None
    assert drafter.arch.num_layers == arch.num_mtp_layers
    assert drafter.arch.moe is not None  # a MoE layer, like the target's
    assert drafter.arch.vocab_size == arch.vocab_size  # the shared full-vocabulary head
    # k = 3 drafts: the one module runs three times (TensorRT-LLM's "MTP Eagle")
    b = BatchShape(decode_seqs=1, decode_context_tokens=2048, speculative_tokens_per_seq=3)
    assert len(e.model.draft_shapes(b)) == 3


def test_moe_verify_at_batch_1_streams_the_experts_of_every_position() -> None:
    target = _r1_engine().model.target
    plain = {o.op: o for o in target.cost(
        BatchShape(decode_seqs=1, decode_context_tokens=2048)).ops}
    verify = {o.op: o for o in target.cost(BatchShape(
        decode_seqs=1, decode_context_tokens=2048, speculative_tokens_per_seq=3)).ops}
    # One token routes to 8 of 256 experts: 8 / EP4 = 2 of a GPU's 64 on average, but the
    # step waits for the busiest of the 4 GPUs: E[max of 4 Binomial(64, 8/256)] = 3.48,
    # rounded to 3. Four positions hit each expert with p = 1 - (1 - 8/256)^4 = 0.119,
    # 7.6 a GPU on average and E[max of 4 Binomial(64, 0.119)] = 10.35 -> 10 on the busiest:
    # 10/3 the bytes (cost/moe_routing.py; tests/test_moe_scatter.py checks the maxima).
    ratio = verify["moe_experts_up_gate"].bytes / plain["moe_experts_up_gate"].bytes
    assert ratio == pytest.approx(10 / 3, rel=0.01)
    # Dense weights (attention projections) are read once for the 4 positions.
    assert verify["o_proj"].bytes == pytest.approx(plain["o_proj"].bytes, rel=0.01)


def test_per_position_preset_is_used_as_published() -> None:
    cfg = SpeculativeConfig.model_validate(
        {"method": "mtp", "num_speculative_tokens": 3, "preset": "mtp-deepseek-r1-trtllm"})
    rates = per_position_rates(cfg, "math")
    # TensorRT-LLM PR #4762: tau 1.906, 2.536, 2.830 at nextn 1, 2, 3, so
    # a1 = 0.906, a2 = 0.629 / 0.906 = 0.694, a3 = 0.295 / 0.629 = 0.468
    assert rates == pytest.approx((0.9064, 0.6941, 0.4684))
    # 1 + 0.9064 + 0.9064·0.6941 + 0.9064·0.6941·0.4684 = 2.830, the published nextn-3 figure
    assert acceptance_length_of(rates) == pytest.approx(2.830, abs=0.002)
    one = SpeculativeConfig.model_validate(
        {"method": "mtp", "num_speculative_tokens": 1, "preset": "mtp-deepseek-r1-trtllm"})
    assert acceptance_length_of(per_position_rates(one, "chat")) == pytest.approx(1.906, abs=0.001)


def test_positions_past_the_published_ones_are_unknown(tmp_path: Path) -> None:
    import subprocess
    import sys

    import yaml

    path = tmp_path / "s.yaml"
    s = yaml.safe_load((ROOT / "scenarios" / "deepseek-r1-mtp-8xh200.yaml").read_text())
    s["deployment"]["speculative"]["num_speculative_tokens"] = 6
    path.write_text(yaml.safe_dump(s))
    p = subprocess.run([sys.executable, "-m", "simulator", "simulate", str(path)],
                       capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert "position 6 on is unknown" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_mtp_pass_pays_its_bf16_eh_proj() -> None:
    # Each MTP pass first projects [norm(embedding); norm(hidden)] with eh_proj, a replicated
    # BF16 nn.Linear of 2 x 7168 -> 7168 (vLLM deepseek_mtp.py). At batch 1 on H200 it streams
    # 7168 x 14336 x 2 B + 14336 x 2 B + 7168 x 2 B = 205.57 MB at 0.78 x 4.8 TB/s = 54.9 us
    # (its tiles, 56 x 2-way split K, take 18.9 + 2.2 us: memory-bound), + 1.5 us launch, in
    # each of the k = 3 passes: 169.2 us a step.
    e = _r1_engine()
    b = BatchShape(decode_seqs=1, decode_context_tokens=2048, speculative_tokens_per_seq=3)
    (op,) = e.model.fuse_ops(b)
    per_pass = (7168 * 14336 + 14336 + 7168) * 2 / (0.78 * 4.8e12) + 1.5e-6
    assert op.op == "mtp_eh_proj"
    assert op.time_s == pytest.approx(3 * per_pass, rel=1e-9)
    assert 3 * per_pass == pytest.approx(169.2e-6, rel=0.005)
    drafter = e.model.drafter
    assert drafter is not None
    passes = sum(drafter.time_s(s) for s in e.model.draft_shapes(b))
    assert e.model.draft_s(b) == pytest.approx(passes + op.time_s)
    # Its weights sit in BF16 on every GPU: 2 x 7168 x 7168 parameters = 102.8M.
    assert drafter.arch.fuse_params == 2 * 7168 * 7168
