"""Offline parsing of a Hugging Face config.json into an `Architecture`.

Families recognised by their keys (not only by name): Llama / Llama-2 / Mistral (dense GQA),
Qwen2/Qwen3 (explicit `head_dim`), Qwen-MoE (`num_experts`, `decoder_sparse_step`,
`mlp_only_layers`), Mixtral, gpt-oss and MiniMax-M2 (`num_local_experts`), DeepSeek-V2/V3/R1 and
Kimi-K2 (MLA keys plus `n_routed_experts`), GLM-5 (sparse attention), Qwen3-Next and Qwen3.5
(Gated DeltaNet hybrids: `layer_types` "linear_attention" with the linear_* keys), Nemotron-H
(Mamba-2 hybrids: `hybrid_override_pattern` or `layers_block_type`, hf_mamba); a multimodal
wrapper's `text_config` (Kimi-K2.5, Qwen3.5) is read as the decoder. Any other decoder that
carries the standard keys parses as a dense model.

Every problem with the input is reported as one `ModelError` sentence naming the key; a
KeyError or TypeError never escapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simulator.model.architecture import Architecture, ModelError, MoESpec
from simulator.model.hf_attention import (
    parse_linear,
    parse_mla,
    parse_sliding,
    parse_sparse,
    refuse_uncosted_layers,
)
from simulator.model.hf_mamba import HybridBlocks, parse_blocks, parse_mamba
from simulator.model.hf_reader import ConfigReader
from simulator.model.quant_modules import bf16_modules

# Model types whose MLP is SwiGLU (gate, up, down) regardless of what `hidden_act` says.
_GATED_MODEL_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "deepseek_v2",
        "deepseek_v3",
        "deepseek_v32",
        "glm_moe_dsa",
        "qwen3_next",
        "qwen3_5_moe",
        "gpt_oss",
        "gemma",
        "gemma2",
        "gemma3_text",
        "phi3",
    }
)
# Activations that, for an unknown model type, signal a gated (GLU-style) MLP.
_GATED_ACTIVATIONS = frozenset({"silu", "swish", "swiglu"})
# Model types whose q/k/v projections always carry a bias, though the config has no key for it.
_QKV_BIAS_MODEL_TYPES = frozenset({"qwen2", "qwen2_moe", "opt"})
# Model types with GPT-2-era key names: `ffn_dim` for the MLP width, `activation_function`.
_FFN_DIM_MODEL_TYPES = frozenset({"opt"})


def _flatten(raw: Mapping[str, Any], name: str) -> dict[str, Any]:
    """Merge a nested `text_config` (multimodal wrappers) over the top level."""
    text = raw.get("text_config")
    if text is None:
        return dict(raw)
    if not isinstance(text, Mapping):
        raise ModelError(f"model config {name!r}: key 'text_config' must be a JSON object")
    merged = {k: v for k, v in raw.items() if k != "text_config"}
    merged.update(text)
    return merged


def _model_type(c: ConfigReader) -> str:
    model_type = c.opt_str("model_type")
    if model_type:
        return model_type.lower()
    archs = c.opt_str_list("architectures") or []
    joined = " ".join(archs).lower()
    for needle, mt in (
        ("deepseekv3", "deepseek_v3"),
        ("deepseekv2", "deepseek_v2"),
        ("gptoss", "gpt_oss"),
        ("mixtral", "mixtral"),
        ("qwen3moe", "qwen3_moe"),
        ("qwen3", "qwen3"),
        ("qwen2moe", "qwen2_moe"),
        ("qwen2", "qwen2"),
        ("mistral", "mistral"),
        ("llama", "llama"),
    ):
        if needle in joined:
            return mt
    return ""


def _layer_pattern(
    c: ConfigReader, moe_layers: list[int], num_layers: int, what: str
) -> tuple[int, int]:
    """(first_dense_layers, moe_layer_interval) describing exactly the given MoE layer indices."""
    first = moe_layers[0]
    interval = moe_layers[1] - moe_layers[0] if len(moe_layers) > 1 else num_layers - first
    if list(range(first, num_layers, interval)) != moe_layers:
        raise c.fail(
            f"{what} gives MoE layers {moe_layers}, which is not a regular "
            "'every k-th layer after the first d' pattern"
        )
    return first, interval


def _parse_moe(c: ConfigReader, num_layers: int, intermediate: int,
               blocks: HybridBlocks | None = None) -> MoESpec | None:
    """The MoE shape; `num_layers` (the FFN layers) spans the MoE pattern: a Nemotron-H
    config's FFN blocks (`blocks`) are placed by its block list instead."""
    if c.has("n_routed_experts"):  # DeepSeek-V2/V3/R1, Nemotron-3
        num_experts = c.int_("n_routed_experts", minimum=0)
        if num_experts == 0:
            return None
        top_k = c.int_("num_experts_per_tok")
        expert_size = c.int_("moe_intermediate_size")
        shared = c.opt_int("n_shared_experts", 0)
        first_k = c.opt_int("first_k_dense_replace", 0)
        freq = c.opt_int("moe_layer_freq", 1, minimum=1)
        layers = [i for i in range(num_layers) if i >= first_k and i % freq == 0]
        pattern_keys = "'first_k_dense_replace'/'moe_layer_freq'"
        if blocks is not None:  # Nemotron-3: "E" blocks among the FFN blocks
            layers, num_layers = blocks.moe_blocks, len(blocks.ffn_kinds)
            pattern_keys = "the hybrid pattern's FFN blocks"
        kinds = c.raw.get("mlp_layer_types")  # transformers' newer form ("dense"/"sparse")
        if isinstance(kinds, list):
            if len(kinds) != num_layers or not set(kinds) <= {"dense", "sparse"}:
                raise c.fail(f"key 'mlp_layer_types' must list 'dense' or 'sparse' for each of "
                             f"the {num_layers} layers")
            layers = [i for i, kind in enumerate(kinds) if kind == "sparse"]
            pattern_keys = "'mlp_layer_types'"
        # Nemotron-3 names its shared expert's width; DeepSeek's equals a routed expert's.
        shared_size = c.opt_int("moe_shared_expert_intermediate_size", expert_size)
    elif c.has("num_local_experts"):  # Mixtral, gpt-oss, MiniMax-M1/M2
        num_experts = c.int_("num_local_experts", minimum=0)
        if num_experts == 0:
            return None
        key = "experts_per_token" if c.has("experts_per_token") else "num_experts_per_tok"
        top_k = c.int_(key)
        # Mixtral, gpt-oss and MiniMax give the expert width as `intermediate_size`.
        expert_size = c.opt_int("moe_intermediate_size", intermediate, minimum=1)
        # MiniMax's one optional shared expert (`shared_intermediate_size`, 0 in M1/M2).
        shared_size = c.opt_int("shared_intermediate_size", 0)
        shared = 1 if shared_size > 0 else 0
        layers = list(range(num_layers))
        pattern_keys = ""
    elif c.has("num_experts"):  # Qwen2-MoE / Qwen3-MoE
        num_experts = c.int_("num_experts", minimum=0)
        if num_experts == 0:
            return None
        top_k = c.int_("num_experts_per_tok")
        expert_size = c.int_("moe_intermediate_size")
        shared_size = c.opt_int("shared_expert_intermediate_size", 0)
        shared = 1 if shared_size > 0 else 0
        step = c.opt_int("decoder_sparse_step", 1, minimum=1)
        dense_only = set(c.opt_int_list("mlp_only_layers"))
        layers = [i for i in range(num_layers) if i not in dense_only and (i + 1) % step == 0]
        pattern_keys = "'decoder_sparse_step'/'mlp_only_layers'"
    else:
        return None

    if top_k > num_experts:
        raise c.fail(f"routes each token to {top_k} experts but has only {num_experts}")
    if not layers:
        return None  # an MoE config whose layer pattern leaves every layer dense
    first, interval = _layer_pattern(c, layers, num_layers, pattern_keys or "the config")
    return MoESpec(
        num_experts=num_experts,
        experts_per_token=top_k,
        expert_intermediate_size=expert_size,
        num_shared_experts=shared,
        shared_expert_intermediate_size=shared_size,
        first_dense_layers=first,
        moe_layer_interval=interval,
    )


def parse_hf_config(raw: Mapping[str, Any], name: str) -> Architecture:
    """Build an Architecture from a parsed HF config.json (no network, no transformers)."""
    if not isinstance(raw, Mapping):
        raise ModelError(f"model config {name!r}: top level must be a JSON object")
    c = ConfigReader(_flatten(raw, name), name)
    model_type = _model_type(c)

    num_layers = c.int_("num_hidden_layers")
    blocks = parse_blocks(c)  # Nemotron-H: mixer and MLP blocks apart
    if blocks is not None:
        num_layers = blocks.mixers
    hidden = c.int_("hidden_size")
    heads = c.int_("num_attention_heads")
    kv_heads = c.opt_int("num_key_value_heads", heads, minimum=1)
    if heads % kv_heads != 0:
        raise c.fail(
            f"'num_attention_heads' ({heads}) is not a multiple of "
            f"'num_key_value_heads' ({kv_heads})"
        )
    vocab = c.int_("vocab_size")
    ffn_key = "ffn_dim" if model_type in _FFN_DIM_MODEL_TYPES else "intermediate_size"
    # A model whose every layer is MoE may name no dense width (Qwen3.5's configs): 0 until
    # the MoE pattern says whether a dense layer needs one.
    intermediate = (c.int_(ffn_key) if c.has(ffn_key) or not c.has("moe_intermediate_size")
                    else 0)
    if c.has("max_position_embeddings") or not c.has("max_sequence_length"):
        max_pos = c.int_("max_position_embeddings")
    else:
        max_pos = c.int_("max_sequence_length")  # original LLaMA-1 exports

    mla = parse_mla(c)
    if mla is not None:
        # The width of one query/key head (nope + rope part); values use v_head_dim.
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    elif c.has("head_dim") or c.has("attention_head_dim"):  # Nemotron-H: attention_head_dim
        head_dim = c.int_("head_dim" if c.has("head_dim") else "attention_head_dim")
    else:
        if hidden % heads != 0:
            raise c.fail(
                f"key 'head_dim' is absent and 'hidden_size' ({hidden}) is not divisible by "
                f"'num_attention_heads' ({heads})"
            )
        head_dim = hidden // heads

    hidden_act = (c.opt_str("hidden_act") or c.opt_str("mlp_hidden_act")  # Nemotron-H: relu2
                  or c.opt_str("activation_function") or "silu").lower()
    gated = model_type in _GATED_MODEL_TYPES or hidden_act in _GATED_ACTIVATIONS
    attention_bias = c.opt_bool("attention_bias", model_type in _QKV_BIAS_MODEL_TYPES)
    refuse_uncosted_layers(c)
    window, n_sliding = parse_sliding(c, num_layers)

    arch = Architecture(
        name=name,
        num_layers=num_layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        vocab_size=vocab,
        # OPT ties its LM head to the embeddings; the other families default to separate ones.
        tie_word_embeddings=c.opt_bool("tie_word_embeddings", model_type == "opt"),
        gated_mlp=gated,
        attention_bias=attention_bias,
        sliding_window=window,
        num_sliding_layers=n_sliding,
        max_position_embeddings=max_pos,
        moe=_parse_moe(c, num_layers, intermediate, blocks),
        mla=mla,
        attention_sinks=model_type == "gpt_oss",
        # DeepSeek names its MTP modules num_nextn_predict_layers, Qwen3.5 mtp_num_hidden_layers.
        num_mtp_layers=c.opt_int("num_nextn_predict_layers",
                                 c.opt_int("mtp_num_hidden_layers", 0)),
        bf16_modules=bf16_modules(c.raw),
        sparse=parse_sparse(c),
        qk_norm_across_heads=(c.opt_bool("use_qk_norm", False)
                              and c.opt_str("qk_norm_type") == "per_layer"),
        linear=parse_linear(c, num_layers) if blocks is None else parse_mamba(c, blocks),
        attn_output_gate=c.opt_bool("attn_output_gate", False),
        num_ffn_blocks=None if blocks is None else len(blocks.ffn_kinds),
    )
    if intermediate == 0 and arch.num_dense_mlp_layers:
        raise c.fail(f"missing required key {ffn_key!r} (the width of its "
                     f"{arch.num_dense_mlp_layers} dense MLP layers)")
    return arch
