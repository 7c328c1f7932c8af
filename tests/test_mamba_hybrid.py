"""Nemotron-H, a Mamba-2 hybrid (issue 36), and Nemotron-3 Nano, its MoE variant: the catalog
entries' sizes, the state a sequence keeps, the recurrence's FLOPs and bytes by hand, the KV a
hybrid saves against a dense model, the collectives of blocks that stand apart, `explain`, a
simulation, and bad configs refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator.cost import BatchShape, Formats, ParallelLayout, StepModel
from simulator.cost.linear_attention import linear_consts, linear_terms
from simulator.cost.memory import kv_bytes_per_token_per_gpu
from simulator.hardware.profile import load_hardware
from simulator.model.hf_config import parse_hf_config
from simulator.model.load import CATALOG_DIR, load_architecture
from tests.cli_helpers import run_cli
from tests.test_hybrid_attention import refused_in_one_line

NEMO = load_architecture("nemotron-h-8b")
BF16 = Formats("bf16", "bf16", "bf16")


def _raw(**changes: Any) -> dict[str, Any]:
    raw = json.loads((CATALOG_DIR / "nemotron-h-8b.json").read_text())
    raw.update(changes)
    return {k: v for k, v in raw.items() if v is not None}


def test_blocks_and_sizes_by_hand() -> None:
    """52 blocks: 24 Mamba-2, 4 attention, 24 MLP. A Mamba-2 layer: in_proj 4096 x (z and x
    2 x 128 x 64, B and C 2 x 8 x 128, dt 128 = 18,560) = 76,021,760, out_proj 8192 x 4096 =
    33,554,432, conv 10,240 channels x 4 + 10,240 bias, A, D and dt_bias 3 x 128, norm 8,192:
    109,635,968. Attention 2 x 4096^2 + 2 x 4096 x 1024 = 41,943,040; an MLP (relu2, two
    matrices) 2 x 4096 x 21504 = 176,160,768; embeddings and head 2 x 131072 x 4096; 53 norms
    of 4096. Total 8,100,852,736: the 8B of its name."""
    lin = NEMO.linear
    assert lin is not None and lin.is_mamba2 and lin.num_layers == 24
    assert (NEMO.num_layers, NEMO.softmax_attention_layers, NEMO.ffn_layers) == (28, 4, 24)
    assert NEMO.residual_blocks == 52 and not NEMO.gated_mlp and NEMO.moe is None
    assert lin.params_per_layer(4096) == 109_635_968
    assert NEMO.attention_params_per_layer == 41_943_040
    assert NEMO.dense_mlp_params_per_layer == 176_160_768
    assert NEMO.norm_params == 53 * 4096
    assert NEMO.total_params == (24 * 109_635_968 + 4 * 41_943_040 + 24 * 176_160_768
                                 + 2 * 131072 * 4096 + 53 * 4096) == 8_100_852_736


def test_state_per_sequence_by_hand() -> None:
    """Per Mamba-2 layer: 128 heads x 64 x 128 state in BF16 (no mamba_ssm_cache_dtype: the
    model's dtype) = 2,097,152 bytes, plus the conv window of 10,240 channels x 3 past inputs
    x 2 bytes = 61,440; x 24 layers = 51,806,208 bytes, half on each of 2 ranks. An FP32
    state (newer Nemotron configs declare it) doubles the recurrent part."""
    assert NEMO.linear_state_bytes_per_seq() == 24 * (2_097_152 + 61_440) == 51_806_208
    assert NEMO.linear_state_bytes_per_seq(2) == 51_806_208 / 2
    fp32 = parse_hf_config(_raw(mamba_ssm_cache_dtype="float32"), "fp32")
    assert fp32.linear_state_bytes_per_seq() == 24 * (4_194_304 + 61_440)


def test_kv_per_token_an_eighth_of_llama_8b() -> None:
    """Only the 4 attention layers cache: 4 x 2 x 8 KV heads x 128 x 2 bytes = 16,384 bytes a
    token, against Llama-3.1-8B's 32 layers of the same heads, 131,072: 8 times as many
    tokens in the same memory (the state is a fixed 51.8 MB a sequence instead)."""
    tp1 = ParallelLayout()
    assert kv_bytes_per_token_per_gpu(NEMO, tp1, "bf16") == 16_384
    llama = load_architecture("llama-3.1-8b")
    assert kv_bytes_per_token_per_gpu(llama, tp1, "bf16") == 8 * 16_384


def test_decode_recurrence_by_hand_and_independent_of_context() -> None:
    """8 sequences at TP 1: 8 x 128 heads x 5 x 128 x 64 = 41,943,040 FLOPs a layer; bytes:
    x, B, C and y (2 x 8 x 128 + 2 x 128 x 64) x 2 = 36,864 a token and the state read and
    written, 2 x 2,097,152 a sequence; x 24 layers. The same at any context."""
    m = StepModel(NEMO, load_hardware("h100-sxm"), ParallelLayout(), BF16)

    def mamba(b: BatchShape) -> tuple[float, float]:
        op = next(o for o in m.attention_ops(b) if o.op == "mamba_decode")
        return op.flops, op.bytes

    short = BatchShape(decode_seqs=8, decode_context_tokens=8 * 100)
    long = BatchShape(decode_seqs=8, decode_context_tokens=8 * 60_000)
    assert mamba(short) == (24 * 41_943_040, 24 * (8 * 36_864 + 8 * 4_194_304))
    assert mamba(long) == mamba(short)


def test_prefill_recurrence_by_hand() -> None:
    """One 1,000-token prompt at TP 1, SSD chunks of 256: per token 8 groups x 2 x 256 x 128
    (C B^T) + 128 heads x (2 x 256 x 64 + 4 x 128 x 64) = 8,912,896 FLOPs a layer; bytes a
    token: x, B, C, y 36,864 and the chunk states in FP32, 2 x 128 x 8,192 x 4 / 256 =
    32,768; the sequence's state read and written once, 4,194,304; all x 24 layers."""
    assert NEMO.linear is not None and NEMO.linear.chunk_tokens == 256
    consts = linear_consts(NEMO.linear, 1)
    b = BatchShape(prefill_tokens=1000, prefill_seqs=1, prefill_attention_pairs=500_500)
    prefill, decode = linear_terms(consts, b, 1)
    assert decode is None and prefill is not None
    assert prefill[0] == pytest.approx(24 * 1000 * 8_912_896, rel=1e-12)
    assert prefill[1] == pytest.approx(24 * (1000 * (36_864 + 32_768) + 4_194_304), rel=1e-12)


def test_one_allreduce_per_block_under_tp() -> None:
    """At TP 2 each of the 52 blocks ends in one all-reduce of the step's activations
    (16 tokens x 4096 x 2 bytes): 52, not the 2 x 28 a transformer of 28 layers would have."""
    m = StepModel(NEMO, load_hardware("h100-sxm"), ParallelLayout(tensor_parallel=2), BF16)
    ar = next(o for o in m.token_ops(16) if o.op == "tp_allreduce")
    assert ar.bytes == 52 * 16 * 4096 * 2


def test_explain_shows_the_block_kinds(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["explain", "nemotron-h-8b", "--gpu", "h100-sxm", "--tp", "2",
                              "--decode-batch", "16", "--context", "4096"], capsys)
    assert code == 0, err
    assert "layers: 4 full attention, 24 Mamba-2, 24 MLP blocks" in out
    for op in ("mamba_in_proj", "mamba_conv_norm", "mamba_decode", "mamba_out_proj",
               "mlp_up_gate", "qkv_proj"):
        assert op in out, op
    assert "set aside for recurrent states, 25.9 MB a sequence" in out


@pytest.mark.parametrize("model", ["nemotron-h-8b", "nemotron-3-nano-30b-a3b"])
def test_simulate_a_small_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   model: str) -> None:
    doc = {
        "schema_version": 1, "name": f"{model} on h100", "model": model,
        "hardware": {"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": 1},
        "deployment": {"tensor_parallel": 1, "engine": "vllm"},
        "workload": {"arrival": {"kind": "closed_loop", "concurrency": 8},
                     "input_tokens": {"kind": "fixed", "value": 2048},
                     "output_tokens": {"kind": "fixed", "value": 64},
                     "num_requests": 24, "seed": 1},
    }
    path = tmp_path / "nemo.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, out, err = run_cli(["simulate", str(path), "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["requests_completed"] == 24
    assert 0 < result["tpot_s"]["mean"] < 0.1 and 0 < result["ttft_s"]["mean"] < 5


def test_layers_block_type_reads_as_the_pattern() -> None:
    """transformers' newer form lists the kinds by name; the same model comes out."""
    kinds = {"M": "mamba", "*": "attention", "-": "mlp"}
    pattern = _raw()["hybrid_override_pattern"]
    listed = parse_hf_config(_raw(hybrid_override_pattern=None,
                                  layers_block_type=[kinds[ch] for ch in pattern]), "listed")
    assert listed == parse_hf_config(_raw(), "listed")


@pytest.mark.parametrize(("changes", "needle"), [
    ({"hybrid_override_pattern": "M-X*" * 13}, "has 'X', not a block kind"),
    ({"hybrid_override_pattern": "M-M*"}, "lists 4 blocks but 'num_hidden_layers' is 52"),
    ({"hybrid_override_pattern": "ME*-" * 13}, "has MoE blocks but the config sets no "
                                              "'n_routed_experts'"),
    ({"hybrid_override_pattern": "M-" * 26}, "no attention block"),
    ({"layers_block_type": ["mamba", "ssm"], "hybrid_override_pattern": None},
     "lists 'ssm', not a block kind"),
    ({"n_groups": 3}, "'mamba_num_heads' (128) is not a multiple of 'n_groups' (3)"),
    ({"mamba_ssm_cache_dtype": "float8"}, "'mamba_ssm_cache_dtype' is 'float8'"),
    ({"mamba_head_dim": None}, "missing required key 'mamba_head_dim'"),
    ({"ssm_state_size": None}, "missing required key 'ssm_state_size'"),
])
def test_bad_nemotron_configs_are_refused_in_one_line(tmp_path: Path, changes: dict[str, Any],
                                                      needle: str) -> None:
    refused_in_one_line(tmp_path, _raw(**changes), needle)


NANO = load_architecture("nemotron-3-nano-30b-a3b")


def test_nemotron3_nano_sizes_by_hand() -> None:
    """52 blocks: 23 Mamba-2, 6 attention, 23 MoE. A Mamba-2 layer: in_proj 2688 x (2 x 64 x 64
    + 2 x 8 x 128 + 64 = 10,304, the in_proj width published configs list) = 27,697,152,
    out_proj 4096 x 2688 = 11,010,048, conv 6,144 x 4 + 6,144 bias, 3 x 64, norm 4,096:
    38,742,208. Attention 2 x 2688 x 4096 + 2 x 2688 x 256 = 23,396,352. An MoE block: 128
    relu2 experts of 2 x 2688 x 1856 = 1,277,165,568, the shared expert 2 x 2688 x 3712 =
    19,955,712, the router 2688 x 128. Embeddings and head 2 x 131072 x 2688, 53 norms:
    31,577,937,344, the 31.6B of its model card. Active: 6 of 128 experts, 3.58B."""
    assert NANO.linear is not None and NANO.linear.num_layers == 23
    assert (NANO.softmax_attention_layers, NANO.num_moe_layers, NANO.num_dense_mlp_layers) == \
        (6, 23, 0)
    assert NANO.moe is not None and not NANO.gated_mlp
    assert NANO.linear.in_proj_width == 10_304
    assert NANO.linear.params_per_layer(2688) == 38_742_208
    assert NANO.attention_params_per_layer == 23_396_352
    assert NANO.shared_expert_params_per_layer == 19_955_712
    assert NANO.total_params == (23 * 38_742_208 + 6 * 23_396_352
                                 + 23 * (1_277_165_568 + 19_955_712 + 344_064)
                                 + 2 * 131072 * 2688 + 53 * 2688) == 31_577_937_344
    assert NANO.active_params == 31_577_937_344 - 23 * 122 * 9_977_856


def test_nemotron3_state_is_fp32_as_its_config_says() -> None:
    """23 x (64 heads x 64 x 128 x 4 bytes + 6,144 channels x 3 x 2) = 49,082,368 bytes."""
    assert NANO.linear_state_bytes_per_seq() == 23 * (2_097_152 + 36_864) == 49_082_368


def test_explain_lists_moe_blocks(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["explain", "nemotron-3-nano-30b-a3b", "--gpu", "h200-sxm",
                              "--decode-batch", "8", "--context", "2048"], capsys)
    assert code == 0, err
    assert "layers: 6 full attention, 23 Mamba-2, 23 MoE blocks" in out
    assert "moe_experts_up_gate" in out and "mamba_decode" in out


def test_latent_moe_is_refused_in_one_line(tmp_path: Path) -> None:
    raw = json.loads((CATALOG_DIR / "nemotron-3-nano-30b-a3b.json").read_text())
    refused_in_one_line(tmp_path, {**raw, "moe_latent_size": 1024}, "latent MoE")
