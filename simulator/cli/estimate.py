"""`frontier estimate`: the closed-form steady state of a scenario, before any simulation."""

from __future__ import annotations

import math
from typing import Any

import click

from simulator.cli.calibration_flag import (
    calibration_applied,
    calibration_line,
    calibration_option,
    calibration_overrides,
)
from simulator.cli.common import USER_ERRORS, dump
from simulator.errors import InputError, located_message


def _ms(v: float) -> str:
    return "overload" if math.isinf(v) else f"{v:.1f}"


def estimate_text(d: dict[str, Any], name: str) -> str:
    """The estimate in milliseconds, and what the full simulation would add."""
    load = "below capacity" if d["stable"] else "OVER capacity (the queue grows all run)"
    lines = [
        f"{name}: closed-form estimate (fluid steady state, no simulation)",
        f"model: {d['kind']}",
        f"load: {d['requests_per_s']:.3g} req/s served of {d['capacity_requests_per_s']:.3g} "
        f"req/s capacity, {load}",
        f"batch: {d['batch']:.1f} sequences per unit (limit {d['batch_limit']:.1f}, set by "
        f"{d['limit']}); KV cache holds {d['kv_limit_seqs']:.1f} mean sequences "
        f"({d['kv_capacity_tokens']} tokens per unit)",
        f"step: {d['step_ms']:.2f} ms",
        f"TTFT: {_ms(d['ttft_ms']['mean'])} ms mean, {_ms(d['ttft_ms']['p99'])} ms p99 "
        f"(queue {_ms(d['queue_mean_ms'])} ms mean)",
        f"TPOT: {d['tpot_ms']['p50']:.2f} ms typical, {d['tpot_ms']['p99']:.2f} ms p99",
        f"throughput: {d['output_tokens_per_s']:.0f} output tok/s "
        f"({d['output_tokens_per_s_per_gpu']:.0f} per GPU on {d['num_gpus']}; "
        f"{d['run_output_tokens_per_s_per_gpu']:.0f} per GPU over this run's requests, drain "
        f"included), {d['output_tokens_per_s_per_user_p50']:.1f} tok/s per user",
    ]
    lines.extend(f"approximation: {n}" for n in d["notes"])
    lines.append("the full simulation adds: " + "; ".join(d["not_modelled"]))
    lines.append(f"run it: frontier simulate {name}")
    return "\n".join(lines)


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE",
              help="Override any scenario key, typed through the schema (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the estimate as JSON (ms).")
@click.option("--skip-bad-rows", is_flag=True,
              help="Skip malformed trace rows instead of refusing.")
@calibration_option
def estimate(scenario: str, overrides: tuple[str, ...], as_json: bool,
             skip_bad_rows: bool, calibration: str | None) -> None:
    """Estimate SCENARIO's TTFT, TPOT, throughput, batch and KV limit in closed form."""
    import simulator

    try:
        profiles = None
        if calibration is not None:
            overrides = (*overrides, *calibration_overrides(scenario, overrides, calibration))
            profiles = calibration_applied(calibration).profiles
        loaded = simulator.load_scenario(scenario, overrides)
        est = simulator.estimate(loaded, skip_bad_rows=skip_bad_rows, profiles=profiles)
    except USER_ERRORS as exc:  # one line naming the file and, where known, the key
        raise InputError(located_message(scenario, exc)) from None
    d = est.to_dict()
    if calibration is not None:
        d = {"calibration": calibration, **d}
    if as_json:
        dump(_finite(d))
    else:
        if calibration is not None:
            click.echo(calibration_line(calibration))
        click.echo(estimate_text(d, scenario))


def _finite(d: Any) -> Any:
    """JSON has no infinity: an overloaded latency is null."""
    if isinstance(d, dict):
        return {k: _finite(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_finite(v) for v in d]
    if isinstance(d, float) and not math.isfinite(d):
        return None
    return d
