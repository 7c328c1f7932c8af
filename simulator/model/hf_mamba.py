"""Nemotron-H's hybrid layout from an HF config.json: its blocks (Mamba-2, attention, MLP)
and the shape of its Mamba-2 layers.

A Nemotron-H config lists one block per `num_hidden_layers`, each a Mamba-2 mixer, an
attention mixer or an MLP, by `hybrid_override_pattern` ("M", "*", "-"; vLLM
transformers_utils/configs/nemotron_h.py) or, in transformers' newer form, `layers_block_type`
("mamba", "attention", "mlp"), and Nemotron-3's MoE blocks ("E", "moe": the model's routed
experts, read by hf_config as any DeepSeek-style MoE). Nemotron-3 Super's latent MoE
(`moe_latent_size`: tokens projected down before the experts) is refused in one line.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.model.hf_attention import state_dtype_bytes
from simulator.model.hf_reader import ConfigReader
from simulator.model.recurrent import MAMBA2, LinearAttentionSpec

# Block kind of each pattern character.
_PATTERN_KINDS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
_BLOCK_KINDS = tuple(_PATTERN_KINDS.values())
# Without mamba_ssm_cache_dtype the state takes the model's dtype (vLLM's cache default
# "auto"; Nemotron-H checkpoints are BF16). Newer Nemotron configs declare "float32".
DEFAULT_MAMBA_STATE_DTYPE = "bfloat16"
# Without a chunk size: the NemotronHConfig default, mamba_chunk_size 256 (vLLM's copy).
DEFAULT_CHUNK_TOKENS = 256


@dataclass(frozen=True, slots=True)
class HybridBlocks:
    """How many blocks of each kind a Nemotron-H config lists."""

    mamba: int
    attention: int
    ffn_kinds: tuple[str, ...]  # "mlp" or "moe", in order: the FFN blocks

    @property
    def mixers(self) -> int:
        """Mixer blocks (Mamba-2 and attention): the Architecture's num_layers."""
        return self.mamba + self.attention

    @property
    def moe_blocks(self) -> list[int]:
        """Indices, among the FFN blocks, of the MoE ones."""
        return [i for i, kind in enumerate(self.ffn_kinds) if kind == "moe"]


def _block_kinds(c: ConfigReader) -> tuple[str, list[str]] | None:
    """(the key that lists them, each block's kind), or None for a config without blocks."""
    pattern = c.opt_str("hybrid_override_pattern")
    if pattern is not None:
        unknown = sorted(set(pattern) - set(_PATTERN_KINDS))
        if unknown:
            raise c.fail(f"key 'hybrid_override_pattern' has {unknown[0]!r}, not a block kind "
                         "(valid: M Mamba-2, * attention, - MLP, E MoE)")
        return "hybrid_override_pattern", [_PATTERN_KINDS[ch] for ch in pattern]
    listed = c.opt_str_list("layers_block_type")
    if listed is None:
        return None
    unknown = sorted(set(listed) - set(_BLOCK_KINDS))
    if unknown:
        raise c.fail(f"key 'layers_block_type' lists {unknown[0]!r}, not a block kind "
                     f"(valid: {', '.join(_BLOCK_KINDS)})")
    return "layers_block_type", listed


def parse_blocks(c: ConfigReader) -> HybridBlocks | None:
    """The blocks of a Nemotron-H-style config; None when the config lists none."""
    found = _block_kinds(c)
    if found is None:
        return None
    key, kinds = found
    n = c.int_("num_hidden_layers")
    if len(kinds) != n:
        raise c.fail(f"key {key!r} lists {len(kinds)} blocks but 'num_hidden_layers' is {n}")
    if "moe" in kinds:
        if not c.has("n_routed_experts"):
            raise c.fail(f"key {key!r} has MoE blocks but the config sets no "
                         "'n_routed_experts'")
        if c.has("moe_latent_size"):
            raise c.fail("key 'moe_latent_size' asks for a latent MoE (Nemotron-3 Super: "
                         "tokens projected down before the experts), which this simulator "
                         "does not cost yet")
    ffn = tuple(k for k in kinds if k in ("mlp", "moe"))
    blocks = HybridBlocks(kinds.count("mamba"), kinds.count("attention"), ffn)
    if blocks.attention == 0:
        raise c.fail(f"key {key!r} has no attention block; a model without a KV cache is "
                     "not costed (at least one '*' or 'attention')")
    return blocks


def _first_int(c: ConfigReader, keys: tuple[str, ...], default: int | None = None) -> int:
    """The first of `keys` the config sets (saved configs and constructor arguments name some
    Mamba-2 sizes differently: n_groups / mamba_n_groups, conv_kernel / mamba_d_conv)."""
    for key in keys:
        if c.has(key):
            return c.int_(key)
    if default is None:
        return c.int_(keys[0])  # reports the missing key
    return default


def parse_mamba(c: ConfigReader, blocks: HybridBlocks) -> LinearAttentionSpec | None:
    """The Mamba-2 layers of a Nemotron-H config (None without any): heads of mamba_head_dim
    over an ssm_state_size state, B and C per group (cost/linear_attention.py maps them onto
    the linear-attention shape)."""
    if blocks.mamba == 0:
        return None
    heads = c.int_("mamba_num_heads")
    groups = _first_int(c, ("n_groups", "mamba_n_groups"))
    if heads % groups != 0:
        raise c.fail(f"'mamba_num_heads' ({heads}) is not a multiple of 'n_groups' ({groups})")
    return LinearAttentionSpec(
        num_layers=blocks.mamba,
        key_heads=groups,
        value_heads=heads,
        key_head_dim=_first_int(c, ("ssm_state_size", "mamba_d_state")),
        value_head_dim=c.int_("mamba_head_dim"),
        conv_kernel=_first_int(c, ("conv_kernel", "mamba_d_conv")),
        state_bytes_per_element=state_dtype_bytes(c, "mamba_ssm_cache_dtype",
                                                  DEFAULT_MAMBA_STATE_DTYPE),
        kind=MAMBA2,
        chunk_tokens=_first_int(c, ("chunk_size", "mamba_chunk_size"), DEFAULT_CHUNK_TOKENS),
    )
