"""MiniMax-M2.5 and Kimi-K2.5 (issue 36): parameter counts derived by hand from their configs,
what the importer reads from them (MiniMax's shared-expert key, Kimi's nested text_config and
compressed-tensors regex ignores, linear attention refused), `frontier explain` / `simulate`
with each, and silicon rows of them and of B300/GB300 mapped to scenarios and scored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator.measured.detect import read_measurements
from simulator.measured.scenario import map_run
from simulator.model.architecture import ModelError
from simulator.model.hf_config import parse_hf_config
from simulator.model.load import CATALOG_DIR, load_architecture
from tests.cli_helpers import run_cli
from tests.test_measured import AGG_DP8, DISAGG, invoke, write_csv


def _minimax_by_hand() -> tuple[int, int]:
    """(total, active) of MiniMax-M2: 62 layers, hidden 3072, GQA 48 x 128 query and 8 x 128
    KV heads, 256 SwiGLU experts of width 1536 (top-8, no shared expert) in every layer, a
    3072 x 256 router, untied 200,064-token embedding and head, two RMSNorms per layer + one."""
    h, layers = 3072, 62
    attention = h * 48 * 128 + 2 * h * 8 * 128 + 48 * 128 * h  # q, k+v, o: 44,040,192
    expert = 3 * h * 1536  # gate, up, down: 14,155,776
    router, embedding, norms = h * 256, 200_064 * h, (2 * layers + 1) * h
    fixed = layers * (attention + router) + 2 * embedding + norms
    return fixed + layers * 256 * expert, fixed + layers * 8 * expert


def _kimi_by_hand() -> tuple[int, int]:
    """(total, active) of the Kimi-K2.5 text backbone (Kimi-K2's shape): 61 layers, hidden
    7168, MLA with 64 heads (q rank 1536, kv rank 512, nope 128 + rope 64, v 128), layer 0 a
    dense SwiGLU of 18,432, layers 1-60 384 experts of 2048 (top-8) + 1 shared, 163,840 vocab."""
    h, layers, heads = 7168, 61, 64
    q = h * 1536 + 1536 + 1536 * heads * (128 + 64)  # q_a, its norm, q_b
    kv = h * (512 + 64) + 512 + 512 * heads * (128 + 128)  # kv_a_with_mqa, norm, kv_b
    attention = q + kv + heads * 128 * h  # + o_proj: 101,124,096
    expert, dense = 3 * h * 2048, 3 * h * 18_432
    moe_fixed = expert + h * 384  # the shared expert and the router
    fixed = (layers * attention + dense + 60 * moe_fixed + 2 * 163_840 * h
             + (2 * layers + 1) * h)
    return fixed + 60 * 384 * expert, fixed + 60 * 8 * expert


@pytest.mark.parametrize(("name", "by_hand"), [("minimax-m2.5", _minimax_by_hand),
                                               ("kimi-k2.5", _kimi_by_hand)])
def test_parameter_counts_by_hand(name: str, by_hand: Any) -> None:
    arch = load_architecture(name)
    total, active = by_hand()
    assert (arch.total_params, arch.active_params) == (total, active)
    # Against the model cards (MiniMax-M2: 230B total, 10B active; Kimi-K2: 1T, 32B): within
    # 1% / 11% (MiniMax, whose 10B leaves out the 0.61B embedding table: 10.42B then, 4%) and
    # 3% / 3% (Kimi).
    published = {"minimax-m2.5": (230e9, 10e9), "kimi-k2.5": (1e12, 32e9)}[name]
    assert abs(total / published[0] - 1) < (0.01 if name == "minimax-m2.5" else 0.03)
    assert abs(active / published[1] - 1) < (0.11 if name == "minimax-m2.5" else 0.03)


def test_the_importer_reads_what_the_configs_say() -> None:
    mm = load_architecture("minimax-m2.5")
    assert mm.moe is not None and mm.mla is None
    assert (mm.moe.num_experts, mm.moe.experts_per_token, mm.moe.num_shared_experts) == (256, 8, 0)
    assert (mm.head_dim, mm.num_kv_heads, mm.max_position_embeddings) == (128, 8, 196_608)
    assert mm.kv_elements_per_token_per_layer() == 2 * 8 * 128  # partial RoPE changes no bytes
    assert mm.bf16_modules == frozenset()  # FP8 everywhere but router (gate) and lm_head
    kimi = load_architecture("kimi-k2.5")
    assert kimi.mla is not None and kimi.moe is not None
    assert (kimi.moe.num_experts, kimi.moe.first_dense_layers, kimi.num_mtp_layers) == (384, 1, 0)
    assert kimi.max_position_embeddings == 262_144 and kimi.vocab_size == 163_840
    # compressed-tensors ignore patterns: self_attn, shared_experts and mlp.(gate|up|down)_proj
    # (the dense layer) stay BF16 around the INT4 routed experts.
    assert kimi.bf16_modules == {"attention_in", "attention_out", "shared_experts", "dense_mlp"}


def _raw(name: str) -> dict[str, Any]:
    data = json.loads((CATALOG_DIR / f"{name}.json").read_text())
    assert isinstance(data, dict)
    return data


def test_a_users_checkpoint_of_these_families_parses() -> None:
    # A flattened Kimi (text_config keys at the top) parses to the same shape as the wrapper.
    raw = _raw("kimi-k2.5")
    flat = {**{k: v for k, v in raw.items() if k != "text_config"}, **raw["text_config"]}
    assert parse_hf_config(flat, "flat").total_params == load_architecture("kimi-k2.5").total_params
    # A MiniMax variant with a shared expert counts it.
    shared = parse_hf_config({**_raw("minimax-m2.5"), "shared_intermediate_size": 512}, "s")
    assert shared.moe is not None and shared.moe.num_shared_experts == 1
    assert shared.shared_expert_params_per_layer == 3 * 3072 * 512
    # A regex ignoring experts too keeps nothing BF16 by it (the experts take the format).
    quant = {"quant_method": "compressed-tensors", "ignore": ["re:.*mlp.*"]}
    assert parse_hf_config({**_raw("minimax-m2.5"), "quantization_config": quant},
                           "m").bf16_modules == frozenset()


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("attn_type_list", [0] * 7 + [1] + [0] * 54, "attn_type_list"),
    # Gated DeltaNet layers are costed (tests/test_hybrid_attention.py), but only with the
    # linear_* keys that shape them; without them the config is refused, not costed as softmax.
    ("layer_types", ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 58,
     "linear_num_key_heads"),
], ids=["minimax-lightning", "qwen3-next-style"])
def test_linear_attention_is_refused_not_costed_as_softmax(key: str, value: Any,
                                                           needle: str) -> None:
    with pytest.raises(ModelError, match=needle):
        parse_hf_config({**_raw("minimax-m2.5"), key: value}, "linear")


def test_explain_kimi_on_b300(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["explain", "kimi-k2.5", "--gpu", "b300", "--tp", "8", "--precision",
                              "nvfp4", "--decode-batch", "64", "--context", "4096", "--json"],
                             capsys)
    assert code == 0, err
    data = json.loads(out)
    ops = {r["op"] for r in data["breakdown"]}
    assert {"attention_decode", "mla_down_proj", "moe_experts_up_gate", "moe_shared_up_gate"} <= ops
    # Weights per GPU by hand: routed experts at NVFP4 (0.5625 B) 60 x 384 x 44,040,192 x 0.5625
    # = 570.9 GB, everything else BF16 (the checkpoint's ignore list): attention 61 x 101.1M,
    # shared 60 x 44.0M, dense 396.4M, embedding + head 2 x 1174.4M, routers 60 x 2.75M, at
    # 2 B = 23.4 GB; / TP 8 = 74.3 GB. MLA's down projections are replicated on every GPU
    # (not sharded), +1.6 GB: within 4%.
    assert data["memory"]["weights_bytes_per_gpu"] == pytest.approx(74.3e9, rel=0.04)


def _scenario(tmp_path: Path, model: str, gpu: str, tp: int, weights: str, acts: str) -> str:
    doc = {
        "schema_version": 1, "name": f"{model} on {gpu}", "model": model,
        "hardware": {"gpu": gpu, "gpus_per_node": 8, "nodes": 1},
        "deployment": {"tensor_parallel": tp, "engine": "vllm",
                       "precision": {"weights": weights, "activations": acts,
                                     "kv_cache": "fp8"}},
        "workload": {"arrival": {"kind": "closed_loop", "concurrency": 4},
                     "input_tokens": {"kind": "fixed", "value": 512},
                     "output_tokens": {"kind": "fixed", "value": 32},
                     "num_requests": 12, "seed": 1},
    }
    path = tmp_path / f"{model}-{gpu}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.mark.parametrize(("model", "gpu", "tp", "weights", "acts"), [
    ("minimax-m2.5", "b300", 4, "fp8", "fp8"),
    ("kimi-k2.5", "h200-sxm", 8, "int4", "bf16"),
])
def test_simulate_a_small_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str], model: str,
                                   gpu: str, tp: int, weights: str, acts: str) -> None:
    path = _scenario(tmp_path, model, gpu, tp, weights, acts)
    code, out, err = run_cli(["simulate", path, "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["requests_completed"] == 12 and result["num_gpus"] == tp
    assert 0 < result["tpot_s"]["mean"] < 1 and 0 < result["ttft_s"]["mean"] < 10


ROWS = [  # silicon rows as the reference CSV writes them (values made up for the test)
    {**AGG_DP8, "id": "kimi-h200", "backend": "vllm", "model": "kimi-k2.5", "gpu": "h200-sxm",
     "precision": "int4", "gemm_quant_mode": "int4_wo", "moe_quant_mode": "int4_wo",
     "attention_dp_size": "1", "tp_size": "8", "moe_ep_size": "1", "batch_size": "64"},
    {**AGG_DP8, "id": "minimax-b300", "backend": "vllm", "model": "minimax-m2.5", "gpu": "b300",
     "attention_dp_size": "1", "tp_size": "4", "moe_ep_size": "4", "batch_size": "64"},
    {**DISAGG, "id": "r1-gb300", "model": "deepseek-r1", "gpu": "gb300", "precision": "fp4",
     "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4", "prefill_num_workers": "4",
     "decode_tp_size": "1", "decode_attention_dp_size": "32", "decode_moe_ep_size": "32"},
]


def test_silicon_rows_map_to_scenarios(tmp_path: Path) -> None:
    runs = read_measurements([write_csv(tmp_path / "r.csv", ROWS)])
    kimi, minimax, r1 = (map_run(r, None) for r in runs)
    for m in (kimi, minimax, r1):
        assert m.refused is None and m.scenario is not None
    k, mm, ds = kimi.scenario, minimax.scenario, r1.scenario
    assert k is not None and mm is not None and ds is not None
    assert (k["model"], k["deployment"]["precision"]["weights"]) == ("kimi-k2.5", "int4")
    assert k["deployment"]["precision"]["activations"] == "bf16"
    assert (mm["hardware"], mm["deployment"]["precision"]["weights"]) == (
        {"gpu": "b300", "gpus_per_node": 8, "nodes": 1}, "nvfp4")
    # 4 prefill workers of TP4 + a decode worker of 32 GPUs = 48 GPUs: one NVL72 domain.
    assert ds["hardware"] == {"gpu": "gb300", "gpus_per_node": 72, "nodes": 1}
    assert ds["deployment"]["decode"]["attention_data_parallel"] == 32


def test_silicon_rows_are_scored_end_to_end(tmp_path: Path) -> None:
    result = invoke("--measurements", str(write_csv(tmp_path / "r.csv", ROWS)),
                    "--method", "estimate", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{"):])
    assert [r["status"] for r in data["runs"]] == ["scored"] * 3
    assert data["refused"] == {}
