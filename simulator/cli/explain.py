"""`frontier explain`: one engine step of a model, operator by operator."""

from __future__ import annotations

import click

from simulator.cli.common import FORMAT, dump
from simulator.cost import Formats, ParallelLayout


@click.command()
@click.argument("model")
@click.option("--gpu", required=True, help="Hardware profile name (see `frontier hardware list`).")
@click.option("--tp", "tp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--pp", "pp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--ep", "ep", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--attention-dp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--weights", type=FORMAT, default=None)
@click.option("--activations", type=FORMAT, default=None)
@click.option("--kv-cache", type=FORMAT, default=None)
@click.option("--precision", type=FORMAT, default=None, help="Sets weights, activations and KV.")
@click.option("--decode-batch", type=click.IntRange(min=0), default=1, show_default=True)
@click.option("--context", type=click.IntRange(min=0), default=1024, show_default=True)
@click.option("--prefill-tokens", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--gpu-memory-utilization", type=click.FloatRange(0, 1, min_open=True), default=0.9)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def explain(
    model: str,
    gpu: str,
    tp: int,
    pp: int,
    ep: int,
    attention_dp: int,
    weights: str | None,
    activations: str | None,
    kv_cache: str | None,
    precision: str | None,
    decode_batch: int,
    context: int,
    prefill_tokens: int,
    gpu_memory_utilization: float,
    as_json: bool,
) -> None:
    """Cost one engine step of MODEL operator by operator (the teaching view)."""
    from simulator.cost.explain import explain as run_explain

    base = precision or "bf16"
    act_default = base if precision != "int4" else "bf16"
    formats = Formats(weights or base, activations or act_default, kv_cache or base)
    result = run_explain(
        model,
        gpu,
        ParallelLayout(tp, pp, attention_dp, ep),
        formats,
        decode_batch,
        context,
        prefill_tokens,
        gpu_memory_utilization,
    )
    if as_json:
        dump(result.to_dict())
    else:
        click.echo(result.to_text())
