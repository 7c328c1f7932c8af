"""The shipped catalog parses, and its parameter counts match the published model sizes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from simulator.model.architecture import Architecture, ModelError
from simulator.model.hf_config import parse_hf_config
from simulator.model.load import CATALOG_DIR, catalog_names, load_architecture

B = 1e9

# Tolerances. PRECISE: the publisher gives three or four significant figures (or an exact
# safetensors count), so the count from config.json must land within 2%. ROUNDED: the figure
# is a whole number of billions ("22B", "37B"), which alone can be up to ~2.5% from the truth.
PRECISE = 0.02
ROUNDED = 0.04

# (catalog name, published total, tolerance, source)
PUBLISHED_TOTAL: list[tuple[str, float, float, str]] = [
    # Hugging Face model pages (safetensors metadata): 8.03B, 70.6B, 70.6B, 405.9B.
    ("llama-3.1-8b", 8.03 * B, PRECISE, "huggingface.co/meta-llama/Llama-3.1-8B"),
    ("llama-3.1-70b", 70.6 * B, PRECISE, "huggingface.co/meta-llama/Llama-3.1-70B"),
    ("llama-3.3-70b", 70.6 * B, PRECISE, "huggingface.co/meta-llama/Llama-3.3-70B-Instruct"),
    ("llama-3.1-405b", 405.9 * B, PRECISE, "huggingface.co/meta-llama/Llama-3.1-405B"),
    # Marketed as "70B"; the Hugging Face page reports 68.98B parameters.
    ("llama-2-70b", 68.98 * B, PRECISE, "huggingface.co/meta-llama/Llama-2-70b-hf"),
    # Qwen3 model cards: "Number of Parameters: 8.2B" / "32.8B" / "235B in total".
    ("qwen3-8b", 8.2 * B, PRECISE, "huggingface.co/Qwen/Qwen3-8B model card"),
    ("qwen3-32b", 32.8 * B, PRECISE, "huggingface.co/Qwen/Qwen3-32B model card"),
    ("qwen3-235b-a22b", 235 * B, PRECISE, "huggingface.co/Qwen/Qwen3-235B-A22B model card"),
    # Mistral AI, "Mixtral of experts" announcement: 46.7B total parameters.
    ("mixtral-8x7b", 46.7 * B, PRECISE, "mistral.ai/news/mixtral-of-experts"),
    # DeepSeek-V3 technical report / model card: 671B total for the main model. The HF repo's
    # 685B adds the 14B multi-token-prediction module, which the config's
    # num_nextn_predict_layers describes and the main-model count leaves out.
    ("deepseek-v3", 671 * B, PRECISE, "DeepSeek-V3 technical report, arXiv 2412.19437"),
    ("deepseek-r1", 671 * B, PRECISE, "huggingface.co/deepseek-ai/DeepSeek-R1 model card"),
    # gpt-oss model card (arXiv 2508.10925), Table 1: 116.83B and 20.91B total.
    ("gpt-oss-120b", 116.83 * B, PRECISE, "gpt-oss model card, arXiv 2508.10925"),
    ("gpt-oss-20b", 20.91 * B, PRECISE, "gpt-oss model card, arXiv 2508.10925"),
    # OPT paper (Zhang et al. 2022, arXiv 2205.01068) Table 1: the "13B" model (40 layers,
    # 5120 wide); the count here is 12.85B with tied embeddings.
    ("opt-13b", 13 * B, ROUNDED, "OPT paper, arXiv 2205.01068, Table 1"),
    # Same table: "66B" (64 layers, 9216 wide: 65.7B here) and "175B" (96 layers, 12288 wide:
    # 174.6B here, the embeddings tied as in the smaller OPT models).
    ("opt-66b", 66 * B, ROUNDED, "OPT paper, arXiv 2205.01068, Table 1"),
    ("opt-175b", 175 * B, ROUNDED, "OPT paper, arXiv 2205.01068, Table 1"),
    # MiniMax-M2 model card: "230 billion total parameters" (M2.5 keeps the architecture);
    # 228.7B here (tests/test_models_2026.py derives it by hand).
    ("minimax-m2.5", 230 * B, ROUNDED, "huggingface.co/MiniMaxAI/MiniMax-M2 model card"),
    # Kimi-K2 model card: "1 trillion total parameters" (K2.5's text backbone is K2's shape);
    # 1026.4B here.
    ("kimi-k2.5", 1000 * B, ROUNDED, "huggingface.co/moonshotai/Kimi-K2-Instruct model card"),
]

# (catalog name, published active-per-token, tolerance, source)
PUBLISHED_ACTIVE: list[tuple[str, float, float, str]] = [
    # Qwen3 model card: "22B activated" (rounded to whole billions).
    ("qwen3-235b-a22b", 22 * B, ROUNDED, "huggingface.co/Qwen/Qwen3-235B-A22B model card"),
    # Mistral AI announcement: "only uses 12.9B parameters per token".
    ("mixtral-8x7b", 12.9 * B, PRECISE, "mistral.ai/news/mixtral-of-experts"),
    # DeepSeek-V3 report: "37B activated for each token" (rounded to whole billions).
    ("deepseek-v3", 37 * B, ROUNDED, "DeepSeek-V3 technical report, arXiv 2412.19437"),
    ("deepseek-r1", 37 * B, ROUNDED, "huggingface.co/deepseek-ai/DeepSeek-R1 model card"),
    # Kimi-K2 model card: "32 billion activated parameters"; 32.86B here.
    ("kimi-k2.5", 32 * B, ROUNDED, "huggingface.co/moonshotai/Kimi-K2-Instruct model card"),
]

# gpt-oss model card, Table 1: 5.13B and 3.61B active parameters per token. OpenAI's active
# count includes the unembedding matrix but not the embedding table (a lookup, not a matmul):
# 5.13B = 4.55B (attention + top-4 experts + routers) + 0.58B (unembedding).
PUBLISHED_ACTIVE_NO_EMBEDDING: list[tuple[str, float, float, str]] = [
    ("gpt-oss-120b", 5.13 * B, PRECISE, "gpt-oss model card, arXiv 2508.10925"),
    ("gpt-oss-20b", 3.61 * B, PRECISE, "gpt-oss model card, arXiv 2508.10925"),
    # MiniMax-M2 model card: "10 billion active parameters", a whole number of billions, so up
    # to 5% from the count (+-0.5B): 10.42B here without the 0.61B embedding table, 11.03B with.
    ("minimax-m2.5", 10 * B, 0.05, "huggingface.co/MiniMaxAI/MiniMax-M2 model card"),
]

# Qwen3 model cards also give the count without embedding and output matrices.
PUBLISHED_NON_EMBEDDING: list[tuple[str, float, float, str]] = [
    ("qwen3-8b", 6.95 * B, PRECISE, "huggingface.co/Qwen/Qwen3-8B model card"),
    ("qwen3-32b", 31.2 * B, PRECISE, "huggingface.co/Qwen/Qwen3-32B model card"),
]

EXPECTED_CATALOG = {
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.3-70b",
    "llama-3.1-405b",
    "llama-2-70b",
    "qwen3-8b",
    "qwen3-32b",
    "qwen3-235b-a22b",
    "mixtral-8x7b",
    "deepseek-v3",
    "deepseek-r1",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "opt-13b",
    "opt-66b",
    "opt-175b",
    "minimax-m2.5",
    "kimi-k2.5",
}


def _rel_err(got: float, want: float) -> float:
    return abs(got - want) / want


def _raw(name: str) -> dict[str, Any]:
    data = json.loads((CATALOG_DIR / f"{name}.json").read_text())
    assert isinstance(data, dict)
    return data


def test_catalog_has_every_expected_model() -> None:
    assert EXPECTED_CATALOG.issubset(catalog_names())


@pytest.mark.parametrize("name", sorted(EXPECTED_CATALOG))
def test_every_entry_names_its_source(name: str) -> None:
    source = _raw(name).get("_source")
    assert isinstance(source, str) and source


def test_every_published_figure_is_checked() -> None:
    assert {row[0] for row in PUBLISHED_TOTAL} == EXPECTED_CATALOG
    moe = {n for n in EXPECTED_CATALOG if load_architecture(n).moe is not None}
    active = {row[0] for row in PUBLISHED_ACTIVE + PUBLISHED_ACTIVE_NO_EMBEDDING}
    assert moe == active


@pytest.mark.parametrize(("name", "published", "tol", "source"), PUBLISHED_TOTAL)
def test_total_params_match_published(name: str, published: float, tol: float, source: str) -> None:
    got = load_architecture(name).total_params
    assert _rel_err(got, published) <= tol, (
        f"{name}: {got / B:.3f}B vs {published / B:.2f}B published ({source})"
    )


@pytest.mark.parametrize(("name", "published", "tol", "source"), PUBLISHED_ACTIVE)
def test_active_params_match_published(
    name: str, published: float, tol: float, source: str
) -> None:
    got = load_architecture(name).active_params
    assert _rel_err(got, published) <= tol, (
        f"{name}: {got / B:.3f}B active vs {published / B:.2f}B published ({source})"
    )


@pytest.mark.parametrize(("name", "published", "tol", "source"), PUBLISHED_ACTIVE_NO_EMBEDDING)
def test_gpt_oss_active_params_match_published(
    name: str, published: float, tol: float, source: str
) -> None:
    arch = load_architecture(name)
    got = arch.active_params - arch.embedding_params
    assert _rel_err(got, published) <= tol, (
        f"{name}: {got / B:.3f}B active vs {published / B:.2f}B published ({source})"
    )


@pytest.mark.parametrize(("name", "published", "tol", "source"), PUBLISHED_NON_EMBEDDING)
def test_qwen3_non_embedding_params_match_published(
    name: str, published: float, tol: float, source: str
) -> None:
    arch = load_architecture(name)
    got = arch.total_params - arch.embedding_params - arch.lm_head_params
    assert _rel_err(got, published) <= tol, (
        f"{name}: {got / B:.3f}B non-embedding vs {published / B:.2f}B published ({source})"
    )


def test_llama_31_counts_are_exact() -> None:
    # Exact safetensors totals shown on the Hugging Face model pages.
    assert load_architecture("llama-3.1-8b").total_params == 8_030_261_248
    assert load_architecture("llama-3.1-70b").total_params == 70_553_706_496


def test_dense_models_have_active_equal_total() -> None:
    for name in ("llama-3.1-70b", "qwen3-32b", "llama-2-70b"):
        arch = load_architecture(name)
        assert arch.moe is None
        assert arch.active_params == arch.total_params


# --- shapes the cost model relies on ---


def test_kv_elements_llama_31_70b() -> None:
    arch = load_architecture("llama-3.1-70b")
    assert (arch.num_kv_heads, arch.head_dim) == (8, 128)
    assert arch.kv_elements_per_token_per_layer() == 2 * 8 * 128 == 2048


def test_kv_elements_deepseek_v3_caches_the_latent() -> None:
    arch = load_architecture("deepseek-v3")
    assert arch.mla is not None
    assert arch.kv_elements_per_token_per_layer() == 512 + 64


def test_deepseek_v3_layer_split() -> None:
    arch = load_architecture("deepseek-v3")
    assert arch.moe is not None
    assert arch.num_layers == 61
    assert arch.num_moe_layers == 58
    assert arch.num_dense_mlp_layers == 3
    assert (arch.moe.num_experts, arch.moe.experts_per_token) == (256, 8)
    assert arch.moe.num_shared_experts == 1
    assert arch.mla is not None and arch.mla.q_lora_rank == 1536


def test_gpt_oss_120b_sliding_layers() -> None:
    arch = load_architecture("gpt-oss-120b")
    assert arch.num_layers == 36
    assert arch.num_sliding_layers == 18
    assert arch.sliding_window == 128
    assert arch.attention_bias and arch.attention_sinks
    assert arch.moe is not None and arch.moe.num_experts == 128
    assert arch.moe.experts_per_token == 4


def test_qwen3_uses_explicit_head_dim() -> None:
    # Qwen3-32B: 64 heads x 128 = 8192 != hidden 5120, so head_dim must come from the key.
    arch = load_architecture("qwen3-32b")
    assert arch.head_dim == 128
    assert arch.q_dim == 8192
    assert arch.sliding_window is None  # use_sliding_window is false


def test_mixtral_experts_use_intermediate_size() -> None:
    arch = load_architecture("mixtral-8x7b")
    assert arch.moe is not None
    assert arch.moe.expert_intermediate_size == 14336
    assert arch.num_moe_layers == 32
    assert arch.sliding_window is None


def test_head_dim_defaults_to_hidden_over_heads() -> None:
    arch = load_architecture("llama-2-70b")
    assert arch.head_dim == 8192 // 64


# --- loading by path, by name, and bad input ---


def test_load_from_config_json_path(tmp_path: Path) -> None:
    model_dir = tmp_path / "my-llama"
    model_dir.mkdir()
    cfg = model_dir / "config.json"
    cfg.write_text(json.dumps(_raw("llama-3.1-70b")))
    arch = load_architecture(str(cfg))
    assert arch.name == "my-llama"
    assert arch.total_params == load_architecture("llama-3.1-70b").total_params


def test_load_from_named_json_path(tmp_path: Path) -> None:
    cfg = tmp_path / "custom.json"
    cfg.write_text(json.dumps(_raw("qwen3-8b")))
    assert load_architecture(str(cfg)).name == "custom"


def test_unknown_name_suggests_nearest() -> None:
    with pytest.raises(ModelError, match=r"did you mean 'llama-3\.1-70b'"):
        load_architecture("llama-3.1-70")


def test_missing_hidden_size_names_the_key(tmp_path: Path) -> None:
    raw = _raw("llama-3.1-8b")
    del raw["hidden_size"]
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(raw))
    with pytest.raises(ModelError, match="'hidden_size'") as info:
        load_architecture(str(cfg))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "key",
    ["num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size", "intermediate_size"],
)
def test_every_required_key_is_reported_by_name(key: str) -> None:
    raw = _raw("llama-3.1-8b")
    del raw[key]
    with pytest.raises(ModelError, match=repr(key)):
        parse_hf_config(raw, "broken")


@pytest.mark.parametrize("bad", ["4096", None, 4096.5, True, [4096], -1, 0])
def test_ill_typed_key_raises_model_error(bad: object) -> None:
    raw = _raw("llama-3.1-8b")
    raw["hidden_size"] = bad
    with pytest.raises(ModelError, match="'hidden_size'"):
        parse_hf_config(raw, "broken")


@pytest.mark.parametrize(
    ("key", "bad"),
    [
        ("num_key_value_heads", "8"),
        ("tie_word_embeddings", "no"),
        ("layer_types", "sliding_attention"),
        ("num_local_experts", 8.5),
        ("moe_intermediate_size", "2048"),
        ("mlp_only_layers", [1.5]),
        ("text_config", 3),
        ("kv_lora_rank", "512"),
    ],
)
def test_bad_optional_keys_raise_model_error(key: str, bad: object) -> None:
    raw = _raw("gpt-oss-20b") if key != "mlp_only_layers" else _raw("qwen3-235b-a22b")
    raw[key] = bad
    with pytest.raises(ModelError, match=repr(key)):
        parse_hf_config(raw, "broken")


def test_missing_moe_keys_raise_model_error() -> None:
    raw = _raw("deepseek-v3")
    del raw["moe_intermediate_size"]
    with pytest.raises(ModelError, match="'moe_intermediate_size'"):
        parse_hf_config(raw, "broken")
    raw = _raw("qwen3-235b-a22b")
    del raw["num_experts_per_tok"]
    with pytest.raises(ModelError, match="'num_experts_per_tok'"):
        parse_hf_config(raw, "broken")


def test_layer_types_length_must_match() -> None:
    raw = _raw("gpt-oss-20b")
    raw["layer_types"] = raw["layer_types"][:-1]
    with pytest.raises(ModelError, match="'layer_types'"):
        parse_hf_config(raw, "broken")


def test_unknown_architecture_with_standard_keys_parses_as_dense() -> None:
    raw = {
        "architectures": ["SomeNewForCausalLM"],
        "model_type": "some_new",
        "hidden_size": 2048,
        "num_hidden_layers": 16,
        "num_attention_heads": 16,
        "intermediate_size": 8192,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
        "hidden_act": "gelu",
    }
    arch = parse_hf_config(raw, "some-new")
    assert isinstance(arch, Architecture)
    assert arch.moe is None and arch.mla is None
    assert arch.num_kv_heads == 16 and arch.head_dim == 128
    assert not arch.gated_mlp  # plain GELU MLP: two matrices
    assert arch.dense_mlp_params_per_layer == 2 * 2048 * 8192


def test_text_config_nesting() -> None:
    inner = _raw("qwen3-8b")
    wrapped = {"architectures": ["SomeVLForConditionalGeneration"], "text_config": inner}
    arch = parse_hf_config(wrapped, "vl")
    assert arch.total_params == load_architecture("qwen3-8b").total_params


def test_qwen_moe_sparse_step_and_dense_prefix() -> None:
    raw = _raw("qwen3-235b-a22b")
    raw["decoder_sparse_step"] = 2  # layers 1, 3, 5, ... are MoE
    arch = parse_hf_config(raw, "every-other")
    assert arch.num_moe_layers == 47
    raw = _raw("qwen3-235b-a22b")
    raw["mlp_only_layers"] = [0, 1]
    arch = parse_hf_config(raw, "dense-prefix")
    assert arch.num_moe_layers == 92 and arch.num_dense_mlp_layers == 2


def test_irregular_moe_layer_pattern_is_rejected() -> None:
    raw = _raw("qwen3-235b-a22b")
    raw["mlp_only_layers"] = [5]  # a dense layer in the middle: not representable
    with pytest.raises(ModelError, match="mlp_only_layers"):
        parse_hf_config(raw, "irregular")


def test_more_experts_per_token_than_experts_is_rejected() -> None:
    raw = _raw("mixtral-8x7b")
    raw["num_experts_per_tok"] = 9
    with pytest.raises(ModelError, match="9 experts"):
        parse_hf_config(raw, "broken")
