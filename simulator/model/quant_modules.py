"""Which linear-layer groups a checkpoint keeps in BF16, read from its quantization config.

A quantized checkpoint names the modules it leaves unquantized (plain names, or compressed-
tensors 're:' regular expressions); the cost model costs those groups (architecture.
MODULE_GROUPS) at BF16 whatever the weight format, since that is what the engine streams.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from simulator.model.architecture import ATTENTION_GROUPS

# Last name components of the attention input and output projections across the families.
_ATTENTION_IN = {
    "q_proj", "k_proj", "v_proj", "qkv_proj", "query_key_value", "Wqkv",
    "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "fused_qkv_a_proj_with_mqa",
    "in_proj_qkvz", "in_proj_ba",  # Gated DeltaNet (Qwen3-Next, Qwen3.5 linear_attn)
}
_ATTENTION_OUT = {"o_proj", "out_proj", "wo"}
# The token mixer as a whole: softmax attention, or a hybrid's Gated DeltaNet (linear_attn),
# whose projections the cost model counts in the same attention groups.
_ATTENTION = {"self_attn", "attn", "attention", "self_attention", "linear_attn"}


def bf16_modules(raw: Mapping[str, Any]) -> frozenset[str]:
    """Module groups (architecture.MODULE_GROUPS) the checkpoint leaves unquantized, read from
    the names its quantization config excludes: quantization_config.modules_to_not_convert
    (gpt-oss: 'model.layers.*.self_attn'), .ignore (compressed-tensors; its 're:' entries
    are regular expressions, _regex_groups) or .exclude_modules,
    and ModelOpt's quantization.exclude_modules (hf_quant_config.json: nvidia's DeepSeek-R1
    NVFP4 checkpoints list self_attn*; the FP4-v2 ones keep attention's input projections only,
    quantizing wo). A group named in any layer is costed BF16 in every layer; a plain name never
    sets dense_mlp (a config names a layer's mlp, not whether it is dense), a 're:' pattern
    that matches a dense MLP projection and no routed expert does."""
    names: list[Any] = []
    for block in (raw.get("quantization_config"), raw.get("quantization")):
        if isinstance(block, Mapping):
            for key in ("modules_to_not_convert", "ignore", "exclude_modules"):
                value = block.get(key)
                if isinstance(value, list):
                    names += value
    groups: set[str] = set()
    for n in names:
        if not isinstance(n, str):
            continue
        if n.startswith("re:"):
            groups |= _regex_groups(n[3:])
            continue
        name = n.rstrip(".*")
        last = name.rsplit(".", 1)[-1]
        if last in _ATTENTION:
            groups |= ATTENTION_GROUPS
        elif last in _ATTENTION_IN:
            groups.add("attention_in")
        elif last in _ATTENTION_OUT or (last == "dense" and "attn" in name):
            groups.add("attention_out")
        elif "shared_expert" in name:
            groups.add("shared_experts")
    return frozenset(groups)


# One module path per group, as the DeepSeek/Llama-style checkpoints name them: a compressed-
# tensors "re:" pattern keeps a group BF16 when it matches that group's path. A pattern that
# matches a dense MLP projection but no routed expert's names the dense MLP layers exactly
# (Kimi-K2.5: 're:.*mlp\\.(gate|up|gate_up|down)_proj.*').
_REGEX_PROBES: tuple[tuple[str, str], ...] = (
    *(("attention_in", f"model.layers.1.self_attn.{m}") for m in sorted(_ATTENTION_IN)),
    ("attention_out", "model.layers.1.self_attn.o_proj"),
    ("shared_experts", "model.layers.1.mlp.shared_experts.gate_proj"),
    ("dense_mlp", "model.layers.0.mlp.gate_proj"),
)
_ROUTED_EXPERT_PATH = "model.layers.1.mlp.experts.0.gate_proj"


def _regex_groups(pattern: str) -> set[str]:
    """Module groups a compressed-tensors 're:' ignore pattern keeps BF16 (re.match, as
    compressed-tensors matches it); a pattern that also matches a routed expert keeps none (it
    names the experts, which take the weight format), and an invalid pattern names nothing."""
    try:
        rx = re.compile(pattern)
    except re.error:
        return set()
    if rx.match(_ROUTED_EXPERT_PATH):
        return set()
    return {group for group, path in _REGEX_PROBES if rx.match(path)}
