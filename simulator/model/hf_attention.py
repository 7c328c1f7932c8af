"""The attention kinds of an HF config: MLA, DeepSeek-style sparse attention, sliding windows,
Gated DeltaNet linear attention, and the layer kinds this simulator refuses to cost."""

from __future__ import annotations

from simulator.model.architecture import MLASpec, SparseAttentionSpec
from simulator.model.hf_reader import ConfigReader
from simulator.model.recurrent import LinearAttentionSpec


def parse_mla(c: ConfigReader) -> MLASpec | None:
    if not c.has("kv_lora_rank"):
        return None
    return MLASpec(
        q_lora_rank=c.opt_int("q_lora_rank", 0),  # null in DeepSeek-V2-Lite: no q compression
        kv_lora_rank=c.int_("kv_lora_rank"),
        qk_rope_head_dim=c.int_("qk_rope_head_dim"),
        qk_nope_head_dim=c.int_("qk_nope_head_dim"),
        v_head_dim=c.int_("v_head_dim"),
    )


def parse_sparse(c: ConfigReader) -> SparseAttentionSpec | None:
    """DeepSeek-V3.2-style sparse attention (DeepSeek-V3.2, GLM-5): `index_topk` keys a query,
    chosen by an indexer of `index_n_heads` heads of `index_head_dim`."""
    if not c.has("index_topk"):
        return None
    if not c.has("kv_lora_rank"):
        raise c.fail("key 'index_topk' (sparse attention) without MLA ('kv_lora_rank'): only "
                     "DeepSeek-V3.2-style sparse attention over MLA is costed")
    if c.opt_bool("use_sliding_window", False):
        raise c.fail("key 'index_topk' (sparse attention) with 'use_sliding_window': the two "
                     "are not costed together")
    return SparseAttentionSpec(
        topk=c.int_("index_topk"),
        index_heads=c.int_("index_n_heads"),
        index_head_dim=c.int_("index_head_dim"),
    )


# The recurrent state's dtype by its HF name (mamba_ssm_dtype), in bytes per element.
_STATE_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Where a hybrid config names no state dtype: FP32, the dtype Qwen3.5's configs declare and
# the Gated DeltaNet kernels accumulate the state in.
DEFAULT_STATE_DTYPE = "float32"
def state_dtype_bytes(c: ConfigReader, key: str, default: str) -> int:
    """Bytes per element of a recurrent state whose dtype the config names by `key` (an HF
    dtype name; `default` where it names none); one line for a dtype not in the table."""
    dtype = c.opt_str(key) or default
    if dtype not in _STATE_DTYPE_BYTES:
        raise c.fail(f"key {key!r} is {dtype!r} (valid: {', '.join(_STATE_DTYPE_BYTES)})")
    return _STATE_DTYPE_BYTES[dtype]


# Per-layer attention kinds a `layer_types` list may name.
_LAYER_KINDS = ("full_attention", "sliding_attention", "linear_attention")


def refuse_uncosted_layers(c: ConfigReader) -> None:
    """Refuse layers this simulator does not cost: MiniMax's lightning attention
    (`attn_type_list` 0, MiniMax-Text-01/M1; M2 lists only 1) and any `layer_types` kind but
    the three it knows (Nemotron-H's Mamba-2 blocks are read by hf_mamba)."""
    kinds = c.raw.get("attn_type_list")
    if isinstance(kinds, list) and any(k == 0 for k in kinds):
        raise c.fail("key 'attn_type_list' marks linear-attention layers (0), which this "
                     "simulator does not cost (softmax attention only)")
    layer_types = c.opt_str_list("layer_types") or []
    unknown = sorted(set(layer_types) - set(_LAYER_KINDS))
    if unknown:
        raise c.fail(f"key 'layer_types' lists {unknown[0]!r}, a layer kind this simulator "
                     f"does not cost (valid: {', '.join(_LAYER_KINDS)})")


def parse_linear(c: ConfigReader, num_layers: int) -> LinearAttentionSpec | None:
    """Gated DeltaNet layers of a hybrid model (Qwen3-Next, Qwen3.5): the `layer_types` listed
    "linear_attention", shaped by the linear_* keys; None when no layer is linear."""
    layer_types = c.opt_str_list("layer_types") or []
    n_linear = sum(1 for t in layer_types if t == "linear_attention")
    if n_linear == 0:
        return None
    if "sliding_attention" in layer_types:
        raise c.fail("key 'layer_types' mixes 'linear_attention' with 'sliding_attention' "
                     "layers, which are not costed together")
    key_heads = c.int_("linear_num_key_heads")
    value_heads = c.int_("linear_num_value_heads")
    if value_heads % key_heads != 0:
        raise c.fail(f"'linear_num_value_heads' ({value_heads}) is not a multiple of "
                     f"'linear_num_key_heads' ({key_heads})")
    return LinearAttentionSpec(
        num_layers=n_linear,
        key_heads=key_heads,
        value_heads=value_heads,
        key_head_dim=c.int_("linear_key_head_dim"),
        value_head_dim=c.int_("linear_value_head_dim"),
        conv_kernel=c.int_("linear_conv_kernel_dim"),
        state_bytes_per_element=state_dtype_bytes(c, "mamba_ssm_dtype", DEFAULT_STATE_DTYPE),
    )


def parse_sliding(c: ConfigReader, num_layers: int) -> tuple[int | None, int]:
    """(window, number of layers that use it)."""
    layer_types = c.opt_str_list("layer_types")
    if layer_types is not None:  # gpt-oss (and newer HF configs) list each layer's attention
        if len(layer_types) != num_layers:
            raise c.fail(
                f"key 'layer_types' lists {len(layer_types)} layers but "
                f"'num_hidden_layers' is {num_layers}"
            )
        n_sliding = sum(1 for t in layer_types if t == "sliding_attention")
        if n_sliding == 0:
            return None, 0
        return c.int_("sliding_window"), n_sliding
    if not c.has("sliding_window"):
        return None, 0
    if not c.opt_bool("use_sliding_window", True):
        return None, 0  # Qwen configs carry a window that is switched off
    window = c.int_("sliding_window")
    if c.has("use_sliding_window") and c.has("max_window_layers"):
        # Qwen2-style: layers at index >= max_window_layers use the window.
        n_sliding = max(0, num_layers - c.int_("max_window_layers", minimum=0))
    else:
        n_sliding = num_layers  # Mistral-style: every layer
    return (window, n_sliding) if n_sliding > 0 else (None, 0)
