"""`frontier lesson [NAME]`: run one trade-off lesson and write its page."""

from __future__ import annotations

from pathlib import Path

import click

from simulator.cli.calibration_flag import (
    calibration_applied,
    calibration_line,
    calibration_option,
)
from simulator.errors import InputError


@click.command()
@click.argument("name", required=False)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Folder for the sweep and report.html [default: out/lesson-NAME].")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE",
              help="Change a scenario key the lesson does not sweep, e.g. hardware.gpu=b200.")
@click.option("--quick", is_flag=True, help="A reduced grid and fewer requests per point.")
@click.option("--workers", type=click.IntRange(min=1), default=None)
@calibration_option
def lesson(name: str | None, out_dir: str | None, overrides: tuple[str, ...], quick: bool,
           workers: int | None, calibration: str | None) -> None:
    """Run lesson NAME (without NAME: list the lessons)."""
    from simulator.lessons import LESSONS, run_lesson

    if name is None:
        width = max(len(n) for n in LESSONS)
        for n, les in LESSONS.items():
            click.echo(f"{n:<{width}}  {les.summary}")
        return
    if name not in LESSONS:
        raise InputError(f"unknown lesson {name!r} (valid: {', '.join(LESSONS)})")
    out = Path(out_dir) if out_dir else _fresh_folder(Path(f"out/lesson-{name}"))
    applied = calibration_applied(calibration) if calibration is not None else None
    if calibration is not None:
        click.echo(calibration_line(calibration))
    headlines, page = run_lesson(LESSONS[name], out, overrides, quick=quick, workers=workers,
                                 calibration=applied)
    for line in headlines:
        click.echo(line)
    click.echo(f"wrote {page}")


def _fresh_folder(base: Path) -> Path:
    """`base`, or base-2, base-3, ...: the first that holds no lesson page yet, so a rerun
    never overwrites the page a reader has open (`--out` names a folder explicitly)."""
    n, path = 1, base
    while (path / "report.html").exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path
