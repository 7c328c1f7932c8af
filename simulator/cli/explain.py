"""`frontier explain`: one engine step of a model, operator by operator."""

from __future__ import annotations

from typing import TYPE_CHECKING, get_args

import click

from simulator.cli.calibration_flag import calibration_applied, calibration_line, calibration_option
from simulator.cli.common import FORMAT, FiniteFloat, dump

if TYPE_CHECKING:
    from simulator.cost.spec_explain import SpeculativeExplanation
    from simulator.cost.step import StepModel


@click.command()
@click.argument("model")
@click.option("--gpu", required=True, help="Hardware profile name (see `frontier hardware list`).")
@click.option("--tp", "tp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--pp", "pp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--ep", "ep", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--attention-dp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--moe-dispatch",
    type=click.Choice(["gather", "all_to_all"]),
    default="gather",
    show_default=True,
    help="How attention-DP ranks exchange tokens on MoE layers (all_to_all: DeepEP-style).",
)
@click.option("--weights", type=FORMAT, default=None)
@click.option("--activations", type=FORMAT, default=None)
@click.option("--kv-cache", type=FORMAT, default=None)
@click.option("--precision", type=FORMAT, default=None, help="Sets weights, activations and KV.")
@click.option("--decode-batch", type=click.IntRange(min=0), default=1, show_default=True)
@click.option("--context", type=click.IntRange(min=0), default=1024, show_default=True)
@click.option("--prefill-tokens", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--gpu-memory-utilization", type=FiniteFloat(0, 1, min_open=True), default=0.9)
@click.option(
    "--speculative",
    default=None,
    metavar="METHOD:K:TAU[:DRAFT]",
    help="Also cost a draft-and-verify step: method, draft tokens k, acceptance length τ "
    "(bonus included), and for draft_model the drafter's catalog name or config.json.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@calibration_option
def explain(
    model: str,
    gpu: str,
    tp: int,
    pp: int,
    ep: int,
    attention_dp: int,
    moe_dispatch: str,
    weights: str | None,
    activations: str | None,
    kv_cache: str | None,
    precision: str | None,
    decode_batch: int,
    context: int,
    prefill_tokens: int,
    gpu_memory_utilization: float,
    speculative: str | None,
    as_json: bool,
    calibration: str | None,
) -> None:
    """Cost one engine step of MODEL operator by operator (the teaching view)."""
    from simulator.cost import Formats, ParallelLayout
    from simulator.cost.explain import explain as run_explain

    base = precision or "bf16"
    act_default = base if precision != "int4" else "bf16"
    formats = Formats(weights or base, activations or act_default, kv_cache or base)
    # A calibration's GPU factors are the profile a step is costed on; its host costs do not
    # enter one GPU step (simulate and estimate add them).
    hardware = calibration_applied(calibration).profiles.get(gpu) if calibration else None
    result = run_explain(
        model,
        gpu,
        ParallelLayout(tp, pp, attention_dp, ep, moe_all_to_all=moe_dispatch == "all_to_all"),
        formats,
        decode_batch,
        context,
        prefill_tokens,
        gpu_memory_utilization,
        hardware,
    )
    spec = None
    if speculative is not None:
        spec = _speculative(speculative, result.model, decode_batch, context)
    if as_json:
        out = result.to_dict()
        if spec is not None:
            out["speculative"] = spec.to_dict()
        if calibration is not None:
            out = {"calibration": calibration, **out}
        dump(out)
    else:
        if calibration is not None:
            click.echo(calibration_line(calibration))
        click.echo(result.to_text())
        if spec is not None:
            click.echo("")
            click.echo(spec.to_text())


def _speculative(
    text: str, target: StepModel, decode_batch: int, context: int
) -> SpeculativeExplanation:
    """Parse METHOD:K:TAU[:DRAFT] and cost it (one clear line on bad input)."""
    from simulator.cost.spec_explain import explain_speculative
    from simulator.inputs.speculative import SpeculativeMethod
    from simulator.model.load import load_architecture

    methods = get_args(SpeculativeMethod)
    parts = text.split(":", 3)
    bad = f"--speculative {text!r}: expected METHOD:K:TAU[:DRAFT], e.g. eagle3:3:2.8"
    if len(parts) < 3:
        raise click.BadParameter(bad)
    method, k_text, tau_text = parts[:3]
    if method not in methods:
        raise click.BadParameter(f"{bad}; METHOD is one of {', '.join(methods)}")
    try:
        k, tau = int(k_text), float(tau_text)
    except ValueError:
        raise click.BadParameter(f"{bad}; K is an integer, TAU a number") from None
    if not 1 <= k <= 16:
        raise click.BadParameter(f"{bad}; K must lie in [1, 16]")
    draft = parts[3] if len(parts) == 4 else None
    if (method == "draft_model") != (draft is not None):
        raise click.BadParameter(f"{bad}; DRAFT (a model) is given with draft_model and only then")
    try:
        arch = load_architecture(draft) if draft is not None else None
        return explain_speculative(target, method, k, tau, decode_batch, context, arch)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
