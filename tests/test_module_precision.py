"""Per-module precision: checkpoints that keep attention in BF16 are costed so."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.cost.layout import Formats, ParallelLayout
from simulator.cost.memory import attention_weight_params_per_gpu, weights_bytes_per_gpu
from simulator.cost.step import StepModel
from simulator.hardware.profile import load_hardware
from simulator.model.hf_config import parse_hf_config
from simulator.model.load import load_architecture
from simulator.model.precision import get_format

MXFP4 = Formats("mxfp4", "bf16", "bf16")


def test_gpt_oss_config_keeps_attention_bf16() -> None:
    # gpt-oss-120b config.json: modules_to_not_convert = ['model.layers.*.self_attn', ...]
    assert load_architecture("gpt-oss-120b").keeps_bf16("attention_in")
    assert not load_architecture("deepseek-r1").keeps_bf16("attention_in")


def test_weights_bytes_count_attention_at_bf16() -> None:
    arch = load_architecture("gpt-oss-120b")
    plain = replace(arch, bf16_modules=frozenset())
    layout = ParallelLayout(1)
    attn = arch.num_layers * attention_weight_params_per_gpu(arch, 1)
    # Each attention parameter moves from 4.25 bits (MXFP4) to 16 bits: +1.46875 bytes.
    extra = attn * (2.0 - get_format("mxfp4").bytes_per_element)
    got = weights_bytes_per_gpu(arch, layout, MXFP4) - weights_bytes_per_gpu(plain, layout, MXFP4)
    assert abs(got - extra) < 1e-6 * extra


def test_attention_projections_run_at_bf16_bytes() -> None:
    arch = load_architecture("gpt-oss-120b")
    hw = load_hardware("h100-sxm")
    kept = StepModel(arch, hw, ParallelLayout(1), MXFP4)
    plain = StepModel(replace(arch, bf16_modules=frozenset()), hw, ParallelLayout(1), MXFP4)
    qkv = {o.op: o for o in kept.token_ops(8)}["qkv_proj"]
    qkv_plain = {o.op: o for o in plain.token_ops(8)}["qkv_proj"]
    # Same FLOPs; weight bytes n*k*2 instead of n*k*0.53125 (activations identical).
    assert qkv.flops == qkv_plain.flops
    assert qkv.bytes > 3.5 * (qkv_plain.bytes - 8 * 2 * arch.hidden_size * 2)


def test_parse_ignores_configs_without_the_field() -> None:
    raw = {"quantization_config": {"quant_method": "fp8", "ignore": ["lm_head"]}}
    cfg = {
        "model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 512,
        "vocab_size": 1000, "max_position_embeddings": 4096,
    }
    assert not parse_hf_config({**cfg, **raw}, "x").keeps_bf16("attention_in")
    kept = {"quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn"]}}
    assert parse_hf_config({**cfg, **kept}, "x").keeps_bf16("attention_in")


def test_precision_block_overrides_the_checkpoint() -> None:
    """deployment.precision.keep_attention_bf16 overrides modules_to_not_convert either way;
    left out, the checkpoint decides (gpt-oss keeps attention BF16, DeepSeek-R1 does not)."""
    import simulator

    def engine(model: str, keep: bool | None) -> tuple[bool, float]:
        precision = {"weights": "mxfp4", "activations": "bf16", "kv_cache": "bf16"}
        if keep is not None:
            precision["keep_attention_bf16"] = keep
        s = simulator.load_scenario({
            "model": model, "hardware": {"gpu": "h100-sxm", "gpus_per_node": 8},
            "deployment": {"tensor_parallel": 8, "precision": precision},
            "workload": {"arrival": {"kind": "offline"}, "num_requests": 1,
                         "input_tokens": {"kind": "fixed", "value": 100},
                         "output_tokens": {"kind": "fixed", "value": 2}},
        })
        assert s.engine is not None
        return s.engine.arch.keeps_bf16("attention_in"), s.engine.memory.weights_bytes_per_gpu

    assert engine("gpt-oss-120b", None)[0] and not engine("gpt-oss-120b", False)[0]
    assert engine("gpt-oss-120b", None)[1] > engine("gpt-oss-120b", False)[1]
    assert not engine("deepseek-r1", None)[0] and engine("deepseek-r1", True)[0]


def test_module_groups_of_the_schema_and_the_model_agree() -> None:
    from typing import get_args

    from simulator.inputs.deployment import ModuleGroup
    from simulator.model.architecture import MODULE_GROUPS

    assert get_args(ModuleGroup) == MODULE_GROUPS


_CFG = {
    "model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 512,
    "vocab_size": 1000, "max_position_embeddings": 4096,
}


@pytest.mark.parametrize(
    ("quant", "groups"),
    [
        # gpt-oss config.json
        ({"quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn"]}},
         {"attention_in", "attention_out"}),
        # ModelOpt hf_quant_config.json of nvidia/DeepSeek-R1-0528-NVFP4: self_attn* per layer
        ({"quantization": {"exclude_modules": ["lm_head", "model.layers.0.self_attn*"]}},
         {"attention_in", "attention_out"}),
        # an FP4-v2-style list: the q and kv projections stay, wo (o_proj) is quantized
        ({"quantization": {"exclude_modules": [
            "lm_head", "model.layers.0.self_attn.q_a_proj", "model.layers.0.self_attn.q_b_proj",
            "model.layers.0.self_attn.kv_a_proj_with_mqa", "model.layers.0.self_attn.kv_b_proj",
            "model.layers.0.mlp.gate"]}},
         {"attention_in"}),
        ({"quantization_config": {"ignore": ["model.layers.1.mlp.shared_experts.gate_proj"]}},
         {"shared_experts"}),
        ({"quantization_config": {"ignore": ["lm_head"]}}, set()),
    ],
)
def test_parse_reads_excluded_modules_by_group(quant: dict, groups: set[str]) -> None:
    assert parse_hf_config({**_CFG, **quant}, "x").bf16_modules == groups


def test_attention_in_alone_keeps_o_proj_at_the_weight_format() -> None:
    # DeepSeek-R1 NVFP4, TP8, keep_bf16 [attention_in] (the FP4-v2 checkpoint): the MLA q and kv
    # projections move from NVFP4 (4.5 bits) to BF16, o_proj (128 heads x 128 v dim -> 7168)
    # stays NVFP4. Weight memory grows by (attention params - o_proj params) x (2 - 0.5625) B.
    arch = load_architecture("deepseek-r1")
    fp4 = Formats("nvfp4", "nvfp4", "fp8")
    kept = replace(arch, bf16_modules=frozenset({"attention_in"}))
    layout = ParallelLayout(8)
    attn = attention_weight_params_per_gpu(arch, 8)
    out = 128 * 128 * 7168 / 8
    extra = 61 * (attn - out) * (2.0 - get_format("nvfp4").bytes_per_element)
    got = weights_bytes_per_gpu(kept, layout, fp4) - weights_bytes_per_gpu(arch, layout, fp4)
    assert got == pytest.approx(extra, rel=1e-9)
    hw = load_hardware("b200")
    ops_kept = {o.op: o for o in StepModel(kept, hw, layout, fp4).token_ops(4)}
    ops_plain = {o.op: o for o in StepModel(arch, hw, layout, fp4).token_ops(4)}
    assert ops_kept["o_proj"].bytes == ops_plain["o_proj"].bytes
    assert ops_kept["mla_q_up_proj"].bytes > 3 * ops_plain["mla_q_up_proj"].bytes


def test_precision_block_takes_one_way_of_saying_it() -> None:
    from tests.test_scenario import _error, _load

    msg = _error(["deployment.precision.keep_bf16=[attention_in]",
                  "deployment.precision.keep_attention_bf16=true"])
    assert "give keep_bf16 or keep_attention_bf16, not both" in msg
    s = _load(["deployment.precision.keep_bf16=[attention_in,shared_experts]"])
    assert s.deployment.precision.keep_bf16 == ["attention_in", "shared_experts"]


@pytest.mark.parametrize(
    ("group", "params", "ops"),
    [
        # DeepSeek-R1: 58 MoE layers, one shared expert of width 2048 (gate, up, down over
        # hidden 7168) sharded over TP8: 58 x 3 x 7168 x 2048 / 8 = 319,291,392 params.
        ("shared_experts", 58 * 3 * 7168 * 2048 / 8, ("moe_shared_up_gate", "moe_shared_down")),
        # The first 3 layers are dense MLPs of width 18432: 3 x 3 x 7168 x 18432 / 8
        # = 148,635,648 params.
        ("dense_mlp", 3 * 3 * 7168 * 18432 / 8, ("mlp_up_gate", "mlp_down")),
    ],
)
def test_ffn_groups_kept_bf16_cost_bf16(group: str, params: float, ops: tuple[str, ...]) -> None:
    # Each parameter of the group moves from NVFP4 (0.5625 B) to BF16 (2 B); nothing else moves.
    arch = load_architecture("deepseek-r1")
    fp4 = Formats("nvfp4", "nvfp4", "fp8")
    kept = replace(arch, bf16_modules=frozenset({group}))
    layout = ParallelLayout(8)
    got = weights_bytes_per_gpu(kept, layout, fp4) - weights_bytes_per_gpu(arch, layout, fp4)
    assert got == pytest.approx(params * (2.0 - 0.5625), rel=1e-9)
    hw = load_hardware("b200")
    ops_kept = {o.op: o for o in StepModel(kept, hw, layout, fp4).token_ops(4)}
    ops_plain = {o.op: o for o in StepModel(arch, hw, layout, fp4).token_ops(4)}
    for op in ops:  # weight bytes dominate at 4 tokens: above 3x (2 / 0.5625 = 3.56x)
        assert ops_kept[op].bytes > 3 * ops_plain[op].bytes
    assert ops_kept["o_proj"].bytes == ops_plain["o_proj"].bytes
