"""`frontier simulate`: run one scenario and print or write its results."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from simulator.cli.calibration_flag import (
    calibration_applied,
    calibration_line,
    calibration_option,
    calibration_overrides,
)
from simulator.cli.common import USER_ERRORS, dump
from simulator.cli.format_text import kv_chain_line, quality_line
from simulator.errors import InputError, located_message
from simulator.safeio import refuse_same_file, write_output
from simulator.units import table


def _summary_text(result: Any, name: str) -> str:
    d = result.to_dict()

    def ms(block: dict[str, float | None], key: str) -> str:
        v = block[key]
        return "-" if v is None else f"{v * 1e3:.1f}"

    rows = []
    for label, key in (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("ITL", "itl_s"),
                       ("E2E", "e2e_s"), ("queue", "queue_s")):
        b = d[key]
        rows.append([label, ms(b, "mean"), ms(b, "p50"), ms(b, "p90"), ms(b, "p99")])
    lines = [
        f"{name}: {d['status']}, {d['requests_completed']} completed, "
        f"{d['requests_dropped']} dropped, {d['preemptions']} preemptions, "
        f"{d['duration_s']:.1f} s simulated on {d['num_gpus']} GPU(s)",
        f"throughput: {d['output_tokens_per_s']:.0f} output tok/s "
        f"({d['output_tokens_per_s_per_gpu']:.0f} per GPU), {d['input_tokens_per_s']:.0f} input "
        f"tok/s, {d['requests_per_s']:.2f} req/s",
        "",
        table(["latency (ms)", "mean", "p50", "p90", "p99"], rows),
    ]
    pu = d["output_tokens_per_s_per_user"]
    if pu["p50"] is not None:
        lines.append(f"\nper user: {pu['p50']:.1f} tok/s (p50), {pu['p90']:.1f} (p90)")
    if d["slo_attainment"] is not None:
        lines.append(
            f"SLO: {d['slo_attainment']:.1%} of requests met every target; goodput "
            f"{d['goodput_requests_per_s']:.2f} req/s"
        )
    pools = d.get("disaggregation")
    if pools is not None:
        lines.append(_pools_text(pools))
    spec = d.get("speculative")
    if spec is not None:
        lines.append(_speculative_text(spec))
    for reason, count in result.drop_reasons().items():
        lines.append(f"dropped {count}: {reason}")
    lines.extend(x for x in (kv_chain_line(d.get("kv_chain")), quality_line(d.get("quality")))
                 if x is not None)
    lines.extend(f"warning: {w}" for w in d["warnings"])
    return "\n".join(lines)


def _speculative_text(s: dict[str, Any]) -> str:
    """Measured acceptance, the drafter's share of GPU time and where drafting stops paying."""
    mean = s["acceptance_length_mean"]
    measured = "no verify step ran" if mean is None else f"{mean:.2f} tokens per verify step"
    cross = s["crossover_batch"]
    where = (
        f"drafting stops paying past a decode batch of {cross - 1}"
        if cross is not None
        else "drafting pays at every batch up to max_num_seqs"
    )
    kinds = s.get("acceptance_by_kind") or {}
    by_kind = ""
    if len(kinds) > 1:
        parts = []
        for name, k in kinds.items():
            m = k["acceptance_length_mean"]
            got = "-" if m is None else f"{m:.2f}"
            parts.append(f"{name} {got} (expected {k['acceptance_length_expected']:.2f})")
        by_kind = "; by kind: " + ", ".join(parts)
    return (
        f"\nspeculative {s['method']} k={s['num_speculative_tokens']} ({s['policy']}, "
        f"{s['workload_kind']} traffic): acceptance {measured} (expected "
        f"{s['acceptance_length_expected']:.2f}){by_kind}; GPU time "
        f"{s['draft_share_of_gpu_time']:.0%} draft, {s['verify_share_of_gpu_time']:.0%} verify; "
        f"{where} (judged at {s['crossover_context_tokens']:.0f} context tokens)"
    )


def _pools_text(p: dict[str, Any]) -> str:
    def ms(block: dict[str, float | None]) -> str:
        v = block["p99"]
        return "-" if v is None else f"{v * 1e3:.1f} ms"

    pf, dc = p["prefill"], p["decode"]
    # Pools on two GPU types (deployment.<pool>.hardware) say which runs where.
    pg, dg = (f" {pf['gpu']}", f" {dc['gpu']}") if pf.get("gpu") != dc.get("gpu") else ("", "")
    return (
        f"\npools {p['ratio']}: prefill {pf['gpus']}{pg} GPU(s) busy {pf['busy_fraction']:.0%}, "
        f"queue p99 {ms(pf['queue_s'])}; decode {dc['gpus']}{dg} GPU(s), "
        f"{dc['batch_slot_fraction']:.0%} of batch slots, queue p99 {ms(dc['queue_s'])}; "
        f"KV transfer p50 {ms({'p99': p['kv_transfer_s']['p50']})}, p99 "
        f"{ms(p['kv_transfer_s'])} at {p['kv_link_gb_per_s']:.0f} GB/s\nhint: {p['hint']}"
    )


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE",
              help="Override any scenario key, typed through the schema (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the result JSON on stdout.")
@click.option("--requests-csv", type=click.Path(dir_okay=False, writable=True),
              help="Write one row per request (times, lengths, preemptions, drop reason).")
@click.option("--timeseries", type=click.Path(dir_okay=False, writable=True),
              help="Write one row per engine step (batch, queue, KV use, step time by kind).")
@click.option("--check", is_flag=True, help="Check the simulation's invariants every step.")
@click.option("--band", is_flag=True,
              help="Also run the GPU's low/high efficiency profiles: an uncertainty band.")
@click.option("--skip-bad-rows", is_flag=True,
              help="Skip malformed trace rows instead of refusing.")
@calibration_option
def simulate(
    scenario: str,
    overrides: tuple[str, ...],
    as_json: bool,
    requests_csv: str | None,
    timeseries: str | None,
    check: bool,
    band: bool,
    skip_bad_rows: bool,
    calibration: str | None,
) -> None:
    """Simulate SCENARIO.yaml and print its latency and throughput summary."""
    import numpy as np

    import simulator
    from simulator.serving.simulation import TIMESERIES_COLUMNS

    for flag, target in (("--requests-csv", requests_csv), ("--timeseries", timeseries)):
        if target is not None:  # checked before the run: never overwrite the scenario
            refuse_same_file(target, [scenario], flag)
    try:
        profiles = None
        if calibration is not None:
            overrides = (*overrides, *calibration_overrides(scenario, overrides, calibration))
            profiles = calibration_applied(calibration).profiles
        loaded = simulator.load_scenario(scenario, overrides)
        result = simulator.simulate(
            loaded, timeseries=timeseries is not None, check=check, skip_bad_rows=skip_bad_rows,
            profiles=profiles,
        )
    except USER_ERRORS as exc:  # one line naming the file and, where known, the key
        raise InputError(located_message(scenario, exc)) from None
    if requests_csv is not None:
        recs = result.requests
        names = recs.dtype.names or ()
        write_output(requests_csv, _csv(np.column_stack([recs[n] for n in names]), names))
    if timeseries is not None and result.timeseries is not None:
        write_output(timeseries, _csv(result.timeseries, TIMESERIES_COLUMNS))
    bands = _bands(loaded, skip_bad_rows, profiles) if band else None
    if as_json:
        data = result.to_dict()
        if bands is not None:
            data["band"] = bands
        if calibration is not None:
            data = {"calibration": calibration, **data}
        dump(data)
    else:
        if calibration is not None:
            click.echo(calibration_line(calibration))
        click.echo(_summary_text(result, loaded.scenario.name or scenario))
        for key, (low, high) in (bands or {}).items():
            click.echo(f"band {key}: {low:.4g} .. {high:.4g}")


def _csv(table: Any, columns: Any) -> str:
    """A numeric table as CSV text with a header line (every value to 9 digits)."""
    import io

    import numpy as np

    buf = io.StringIO()
    np.savetxt(buf, table, delimiter=",", header=",".join(columns), comments="", fmt="%.9g")
    return buf.getvalue()


BAND_KEYS = ("output_tokens_per_s", "ttft_s.p99", "tpot_s.p50", "e2e_s.p50")


def _bands(loaded: Any, skip_bad_rows: bool,
           profiles: Mapping[str, Any] | None = None) -> dict[str, list[float]]:
    """Headline metrics on the pessimistic and optimistic GPU profiles (of the calibrated
    profile where `profiles` has the scenario's GPU), as [low, high]."""
    import simulator
    from simulator.hardware.profile import load_hardware
    from simulator.validation.uncertainty import perturbed

    gpu = loaded.scenario.hardware.gpu
    hw = (profiles or {}).get(gpu) or load_hardware(gpu)
    runs = [
        simulator.simulate(loaded, hardware=perturbed(hw, d), skip_bad_rows=skip_bad_rows).to_dict()
        for d in (-1, 1)
    ]
    out: dict[str, list[float]] = {}
    for key in BAND_KEYS:
        vals = []
        for r in runs:
            v: Any = r
            for part in key.split("."):
                v = v[part]
            vals.append(v)
        if all(isinstance(v, float | int) for v in vals):
            out[key] = [float(min(vals)), float(max(vals))]
    return out
