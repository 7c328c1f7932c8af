"""`frontier schema [scenario|sweep]`: the JSON Schema of an input file (for editors: name it
in a `# yaml-language-server: $schema=FILE` line), or with `--reference` the Markdown
reference of every scenario key (docs/reference.md)."""

from __future__ import annotations

import json

import click


@click.command()
@click.argument("kind", type=click.Choice(["scenario", "sweep"]), default="scenario")
@click.option("--reference", is_flag=True,
              help="Print the Markdown reference of every scenario key instead.")
def schema(kind: str, reference: bool) -> None:
    """Print the JSON Schema of a scenario or sweep file (or the key reference)."""
    if reference:
        from simulator.inputs.reference import reference_markdown

        click.echo(reference_markdown(), nl=False)
        return
    from simulator.sweep.schema import scenario_schema, sweep_schema

    click.echo(json.dumps(scenario_schema() if kind == "scenario" else sweep_schema(),
                          indent=2))
