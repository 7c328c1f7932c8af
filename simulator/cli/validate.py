"""`frontier validate`: score predictions against published measurements."""

from __future__ import annotations

import json
from typing import Any

import click

from simulator.cli.validate_measured import measured_options
from simulator.units import table


@click.command()
@measured_options  # --measurements FILE...: score measured runs (validate_measured.py)
@click.option(
    "--subset", default=None, help="Only rows of this subset (e.g. trtllm-perf-overview)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the full result as JSON.")
@click.option(
    "--band/--no-band",
    default=True,
    show_default=True,
    help="Also run the low/high efficiency profiles and report band coverage.",
)
@click.option(
    "--write-report",
    is_flag=True,
    help="Rewrite simulator/validation/REPORT.md (the table the README links).",
)
@click.option(
    "--ablation/--no-ablation",
    default=None,
    help="Rerun the simulated rows with each issue-15 cause switched off and report the "
    "per-metric errors before and after (default: with --write-report).",
)
@click.option(
    "--update-baseline",
    is_flag=True,
    help="Record these predictions as the regression baseline (deliberate; say why).",
)
def validate(
    subset: str | None,
    as_json: bool,
    band: bool,
    write_report: bool,
    ablation: bool | None,
    update_baseline: bool,
) -> None:
    """Run every validation row; print measured, predicted and signed error, then group stats."""
    from simulator.validation.rows import load_rows
    from simulator.validation.runner import (
        REPORT,
        report_markdown,
        run_validation,
        write_baseline,
    )

    subsets = sorted({r.subset for r in load_rows()})
    if subset is not None and subset not in subsets:
        raise click.BadParameter(f"{subset!r} (valid: {', '.join(subsets)})", param_hint="--subset")
    result = run_validation(subset, band)
    ablated = None
    if ablation or (ablation is None and write_report):
        from simulator.validation.ablation import run_ablation

        ablated = run_ablation()
        result["ablation"] = ablated
    if write_report:
        from simulator.validation.ablation import ablation_markdown

        lines = ablation_markdown(ablated) if ablated is not None else None
        REPORT.write_text(report_markdown(result, lines, _measured_section()))
    if update_baseline:
        write_baseline(result)
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    _echo_text(result, ablated)


def _measured_section() -> list[str]:
    """REPORT.md's calibration-file section, cause by cause (measured/causes.py); a line
    saying so where the checkout has no calibration file beside it."""
    from simulator.measured.causes import CALIBRATION_FILE, measured_ablation, measured_markdown

    source = "../shared/reference/silicon_calibration.csv"
    if not CALIBRATION_FILE.is_file():
        return measured_markdown(None, source)
    return measured_markdown(measured_ablation(CALIBRATION_FILE), source)


def _echo_text(result: dict[str, Any], ablated: dict[str, Any] | None) -> None:
    """Print the result as text: the rows, the per-measure and per-group error stats, band
    coverage, the ablation table when run, the config ranking and the pending rows."""
    from simulator.validation.runner import REPORT, TARGET_MEDIAN, TARGET_P90

    click.echo(table(["row", "measured", "predicted", "error", "band"], _row_cells(result)))
    click.echo("")
    target = f"target (median <= {TARGET_MEDIAN:.0%}, p90 <= {TARGET_P90:.0%})"
    click.echo(table(["measures", "rows", "median |err|", "p90 |err|", target],
                     _measure_cells(result)))
    click.echo("")
    click.echo(table(["group", "rows", "median |err|", "p90 |err|"], _group_cells(result)))
    if result["band_coverage"] is not None:
        click.echo(f"\nband covers the measurement on {result['band_coverage']:.0%} of rows")
    if ablated is not None:
        from simulator.validation.ablation import ablation_markdown

        click.echo("")
        click.echo("\n".join(ablation_markdown(ablated)[4:]))  # the table, without its preamble
    click.echo(_ranking_line(result))
    click.echo(f"{len(result['pending'])} rows pending (listed in {REPORT.name} and --json)")


def _row_cells(result: dict[str, Any]) -> list[list[str]]:
    """One table row per validation row: id, measured, predicted, signed error, band."""
    from simulator.validation.runner import band_text, fmt_value

    return [
        [
            r["id"],
            fmt_value(r["measured"], r["unit"]),
            fmt_value(r["predicted"], r["unit"]),
            f"{r['error']:+.1%}",
            band_text(r),
        ]
        for r in result["rows"]
    ]


def _measure_cells(result: dict[str, Any]) -> list[list[str]]:
    """One table row per measured metric: its error stats and whether they meet the target."""
    from simulator.validation.runner import TARGET_MEDIAN, TARGET_P90

    return [
        [
            g,
            str(st["rows"]),
            f"{st['median_abs_error']:.1%}",
            f"{st['p90_abs_error']:.1%}",
            "met"
            if st["median_abs_error"] <= TARGET_MEDIAN and st["p90_abs_error"] <= TARGET_P90
            else "missed",
        ]
        for g, st in result["groups"].get("measures", {}).items()
    ]


def _group_cells(result: dict[str, Any]) -> list[list[str]]:
    """One table row per value of each grouping (GPU, weight format, model family, ...) but
    the measured metric, which has its own table: the value's error stats."""
    return [
        [f"{g}={v}", str(st["rows"]), f"{st['median_abs_error']:.1%}", f"{st['p90_abs_error']:.1%}"]
        for g, groups in result["groups"].items()
        if g != "measures"
        for v, st in groups.items()
    ]


def _ranking_line(result: dict[str, Any]) -> str:
    """How many config pairs the predictions rank in the measured order, and how close the
    measurements of the discordant ones were."""
    from simulator.validation.ranking import RankedPair

    pairs = [RankedPair(**p) for p in result["ranking"]]
    bad = [p for p in pairs if not p.concordant]
    widest = max((p.measured_gap for p in bad), default=0.0)
    return (
        f"config ranking: {len(pairs) - len(bad)} of {len(pairs)} pairs in order"
        + (f" (the discordant ones measured at most {widest:.1%} apart)" if bad else "")
    )
