"""`frontier` command line: a thin shell over the public API. Bad input: one line, exit 2."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from simulator.architecture import ModelError, catalog_names, load_architecture
from simulator.cost import Formats, LayoutError, MemoryFitError, ParallelLayout
from simulator.errors import InputError, located_message, one_line
from simulator.hardware import load_hardware, profile_paths
from simulator.invariants import InvariantViolation
from simulator.precision import FORMAT_NAMES
from simulator.units import table

USER_ERRORS: tuple[type[Exception], ...] = (
    InputError,
    ModelError,
    LayoutError,
    MemoryFitError,
    ValueError,
)

_FORMAT = click.Choice(FORMAT_NAMES)


def _dump(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, allow_nan=False))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="frontier-sim")
@click.option(
    "--hardware-path",
    "hardware_paths",
    multiple=True,
    type=click.Path(file_okay=False, exists=True),
    help="A folder of your own GPU profile YAMLs, added to the shipped ones (repeatable; "
    "same as FRONTIER_HARDWARE_PATH).",
)
def cli(hardware_paths: tuple[str, ...]) -> None:
    """frontier: predict the latency/throughput frontier of LLM serving without GPUs."""
    if hardware_paths:
        # Sweep workers inherit the environment, so the flag reaches every process.
        parts = [p for p in os.environ.get("FRONTIER_HARDWARE_PATH", "").split(os.pathsep) if p]
        os.environ["FRONTIER_HARDWARE_PATH"] = os.pathsep.join([*parts, *hardware_paths])


@cli.command()
@click.argument("model")
@click.option("--gpu", required=True, help="Hardware profile name (see `frontier hardware list`).")
@click.option("--tp", "tp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--pp", "pp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--ep", "ep", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--attention-dp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--weights", type=_FORMAT, default=None)
@click.option("--activations", type=_FORMAT, default=None)
@click.option("--kv-cache", type=_FORMAT, default=None)
@click.option("--precision", type=_FORMAT, default=None, help="Sets weights, activations and KV.")
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
    from simulator.explain import explain as run_explain

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
        _dump(result.to_dict())
    else:
        click.echo(result.to_text())


@cli.group()
def hardware() -> None:
    """GPU hardware profiles."""


@hardware.command("list")
@click.option("--json", "as_json", is_flag=True)
def hardware_list(as_json: bool) -> None:
    """Every profile found (shipped, FRONTIER_HARDWARE_PATH)."""
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
        _dump(data)
        return
    headers = [
        "gpu", "BF16 TF/s", "FP8 TF/s", "FP4 TF/s", "HBM GB", "HBM TB/s", "NVLink GB/s/dir", "W"
    ]
    click.echo(table(headers, rows))


@cli.group()
def models() -> None:
    """The model catalog."""


@cli.group()
def scenarios() -> None:
    """The scenarios that ship with frontier."""


@scenarios.command("list")
def scenarios_list() -> None:
    """Every shipped scenario: its name (usable in place of a path) and what it teaches."""
    from simulator.shipped import shipped_scenarios

    found = shipped_scenarios()
    width = max(len(n) for n in found)
    for name, path in found.items():
        first = next((ln for ln in path.read_text().splitlines() if ln.startswith("#")), "")
        click.echo(f"{name:<{width}}  {first.lstrip('# ').strip()}")


@models.command("list")
@click.option("--json", "as_json", is_flag=True)
def models_list(as_json: bool) -> None:
    """Every catalog model with its parameter counts and attention shape."""
    rows, data = [], []
    for name in catalog_names():
        a = load_architecture(name)
        kind = "MLA" if a.mla else ("MHA" if a.num_kv_heads == a.num_attention_heads else "GQA")
        moe = f"{a.moe.experts_per_token}/{a.moe.num_experts}" if a.moe else "-"
        data.append(
            {
                "name": name,
                "total_params": a.total_params,
                "active_params": a.active_params,
                "layers": a.num_layers,
                "hidden_size": a.hidden_size,
                "attention": kind,
                "experts": moe,
            }
        )
        rows.append(
            [
                name,
                f"{a.total_params / 1e9:.1f}B",
                f"{a.active_params / 1e9:.1f}B",
                str(a.num_layers),
                str(a.hidden_size),
                f"{kind} {a.num_attention_heads}/{a.num_kv_heads}",
                moe,
            ]
        )
    if as_json:
        _dump(data)
        return
    headers = ["model", "params", "active", "layers", "hidden", "attention q/kv", "top-k/experts"]
    click.echo(table(headers, rows))


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
    for reason, count in result.drop_reasons().items():
        lines.append(f"dropped {count}: {reason}")
    lines.extend(f"warning: {w}" for w in d["warnings"])
    return "\n".join(lines)


@cli.command()
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
def simulate(
    scenario: str,
    overrides: tuple[str, ...],
    as_json: bool,
    requests_csv: str | None,
    timeseries: str | None,
    check: bool,
    band: bool,
    skip_bad_rows: bool,
) -> None:
    """Simulate SCENARIO.yaml and print its latency and throughput summary."""
    import numpy as np

    import simulator
    from simulator.serving.simulation import TIMESERIES_COLUMNS

    try:
        loaded = simulator.load_scenario(scenario, overrides)
        result = simulator.simulate(
            loaded, timeseries=timeseries is not None, check=check, skip_bad_rows=skip_bad_rows
        )
    except USER_ERRORS as exc:  # one line naming the file and, where known, the key
        raise InputError(located_message(scenario, exc)) from None
    try:
        if requests_csv:
            recs = result.requests
            names = recs.dtype.names or ()
            np.savetxt(requests_csv, np.column_stack([recs[n] for n in names]),
                       delimiter=",", header=",".join(names), comments="", fmt="%.9g")
        if timeseries and result.timeseries is not None:
            np.savetxt(timeseries, result.timeseries, delimiter=",",
                       header=",".join(TIMESERIES_COLUMNS), comments="", fmt="%.9g")
    except OSError as exc:  # a missing folder, no permission: the user's path, not a bug
        where = exc.filename or "output file"
        raise InputError(f"{where}: cannot write ({exc.strerror or exc})") from None
    bands = _bands(loaded, skip_bad_rows) if band else None
    if as_json:
        data = result.to_dict()
        if bands is not None:
            data["band"] = bands
        _dump(data)
    else:
        click.echo(_summary_text(result, loaded.scenario.name or scenario))
        for key, (low, high) in (bands or {}).items():
            click.echo(f"band {key}: {low:.4g} .. {high:.4g}")


BAND_KEYS = ("output_tokens_per_s", "ttft_s.p99", "tpot_s.p50", "e2e_s.p50")


def _bands(loaded: Any, skip_bad_rows: bool) -> dict[str, list[float]]:
    """Headline metrics on the pessimistic and optimistic GPU profiles, as [low, high]."""
    import simulator
    from simulator.hardware import load_hardware
    from simulator.uncertainty import perturbed

    hw = load_hardware(loaded.scenario.hardware.gpu)
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


@cli.command()
@click.option("--requests", "num_requests", type=click.IntRange(min=1), default=10_000,
              show_default=True)
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--step-evals", type=click.IntRange(min=1), default=200_000, show_default=True)
def bench(num_requests: int, repeat: int, step_evals: int) -> None:
    """Benchmark the simulator itself: step-cost evaluations/s and requests simulated/s."""
    from simulator.bench import run_bench

    for line in run_bench(num_requests, repeat, step_evals):
        click.echo(line)


@cli.command("bench-scale")
@click.option("--requests", "num_requests", type=click.IntRange(min=1), default=1_000_000,
              show_default=True)
@click.option("--steps", type=click.IntRange(min=1, max=4), default=2, show_default=True,
              help="Also run 1/10, 1/100, ... of the requests first, to show the scaling.")
def bench_scale(num_requests: int, steps: int) -> None:
    """Scale benchmark: wall time, requests/s and peak memory for many requests."""
    from simulator.bench import run_bench_scale

    for line in run_bench_scale(num_requests, steps):
        click.echo(line)


from simulator.cli_validate import validate  # noqa: E402

cli.add_command(validate)
from simulator.cli_sweep import register; register(cli)  # noqa: E402, E702, I001


EXIT_INVARIANT = 3  # `simulate --check` found a simulator bug (not the user's fault)


def main(argv: list[str] | None = None) -> None:
    """Entry point: every user error becomes one line on stderr and exit status 2; a broken
    invariant under `--check` one line and status 3."""
    try:
        cli.main(args=argv, prog_name="frontier", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("frontier: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        click.echo(f"frontier: {one_line(exc.format_message())}", err=True)
        sys.exit(2)
    except InvariantViolation as exc:
        click.echo(f"frontier: simulator bug: {one_line(str(exc))}", err=True)
        sys.exit(EXIT_INVARIANT)
    except USER_ERRORS as exc:
        text = one_line(str(exc)) if str(exc) else type(exc).__name__
        click.echo(f"frontier: {text}", err=True)
        sys.exit(2)
    except BrokenPipeError:
        sys.exit(0)
