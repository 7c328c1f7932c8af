"""`frontier hardware|models|scenarios list`: what ships and what the user added."""

from __future__ import annotations

import click

from simulator.cli.common import dump
from simulator.model.recurrent import GATED_DELTANET, MAMBA2
from simulator.units import table

# How the models table names each kind of recurrent layer.
_RECURRENT_NAMES = {GATED_DELTANET: "GDN", MAMBA2: "Mamba-2"}


def _ffn_blocks(mlp: int, moe: int) -> str:
    """Nemotron-H's FFN blocks beside its mixers, as the models table lists them."""
    return "".join(f", {n} {what} blocks" for n, what in ((mlp, "MLP"), (moe, "MoE")) if n)


@click.group()
def hardware() -> None:
    """GPU hardware profiles."""


@hardware.command("list")
@click.option("--json", "as_json", is_flag=True)
def hardware_list(as_json: bool) -> None:
    """Every profile found (shipped, FRONTIER_HARDWARE_PATH)."""
    from simulator.hardware.profile import load_hardware, profile_paths

    rows, data = [], []
    for name in sorted(profile_paths()):
        hw = load_hardware(name)
        fl = hw.dense_flops_per_s
        data.append(
            {
                "name": name,
                "description": hw.description,
                "dense_flops_per_s": fl,
                "hbm_bytes": hw.hbm_bytes,
                "hbm_bytes_per_s": hw.hbm_bytes_per_s,
                "scale_up_bytes_per_s": hw.scale_up_bytes_per_s,
                "scale_up_domain_size": hw.scale_up_domain_size,
                "board_power_w": hw.board_power_w,
            }
        )
        rows.append(
            [
                name,
                f"{fl.get('bf16', 0) / 1e12:.0f}",
                f"{fl['fp8'] / 1e12:.0f}" if "fp8" in fl else "-",
                f"{fl['fp4'] / 1e12:.0f}" if "fp4" in fl else "-",
                f"{hw.hbm_bytes / 1e9:.0f}",
                f"{hw.hbm_bytes_per_s / 1e12:.2f}",
                f"{hw.scale_up_bytes_per_s / 1e9:.0f} x{hw.scale_up_domain_size}",
                f"{hw.board_power_w:.0f}",
            ]
        )
    if as_json:
        dump(data)
        return
    headers = [
        "gpu", "BF16 TF/s", "FP8 TF/s", "FP4 TF/s", "HBM GB", "HBM TB/s", "NVLink GB/s/dir", "W"
    ]
    click.echo(table(headers, rows))


@click.group()
def models() -> None:
    """The model catalog."""


@click.group()
def scenarios() -> None:
    """The scenarios that ship with frontier."""


@scenarios.command("list")
def scenarios_list() -> None:
    """Every shipped scenario: its name (usable in place of a path) and what it teaches."""
    from simulator.inputs.shipped import shipped_scenarios

    found = shipped_scenarios()
    width = max(len(n) for n in found)
    for name, path in found.items():
        first = next((ln for ln in path.read_text().splitlines() if ln.startswith("#")), "")
        click.echo(f"{name:<{width}}  {first.lstrip('# ').strip()}")


@models.command("list")
@click.option("--json", "as_json", is_flag=True)
def models_list(as_json: bool) -> None:
    """Every catalog model with its parameter counts and attention shape."""
    from simulator.model.load import catalog_names, load_architecture

    rows, data = [], []
    for name in catalog_names():
        a = load_architecture(name)
        kind = "MLA" if a.mla else ("MHA" if a.num_kv_heads == a.num_attention_heads else "GQA")
        moe = f"{a.moe.experts_per_token}/{a.moe.num_experts}" if a.moe else "-"
        # Beside the attention: a sparse model's indexer, a hybrid's recurrent layers (and
        # Nemotron-H's MLP blocks, which stand apart from its mixers).
        recurrent = None if a.linear is None else a.linear.kind
        extra = (" DSA" if a.sparse else "") + (
            f" + {a.num_linear_layers} {_RECURRENT_NAMES[recurrent]} layers" if recurrent
            else "") + ("" if a.num_ffn_blocks is None else _ffn_blocks(a.num_dense_mlp_layers,
                                                                     a.num_moe_layers))
        data.append(
            {
                "name": name,
                "total_params": a.total_params,
                "active_params": a.active_params,
                "layers": a.num_layers,
                "hidden_size": a.hidden_size,
                "attention": kind,
                "experts": moe,
                "sparse_attention": a.sparse is not None,
                "linear_attention_layers": a.num_linear_layers,
                "recurrent_layer_kind": recurrent,
                "ffn_blocks": a.num_ffn_blocks,
            }
        )
        rows.append(
            [
                name,
                f"{a.total_params / 1e9:.1f}B",
                f"{a.active_params / 1e9:.1f}B",
                str(a.num_layers),
                str(a.hidden_size),
                f"{kind} {a.num_attention_heads}/{a.num_kv_heads}{extra}",
                moe,
            ]
        )
    if as_json:
        dump(data)
        return
    headers = ["model", "params", "active", "layers", "hidden", "attention q/kv", "top-k/experts"]
    click.echo(table(headers, rows))
