"""`frontier` command line: a thin shell over the public API. Bad input: one line, exit 2.

Each command group lives in a module of its own; this one builds the group and the entry point.
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys

import click

from simulator.cli.common import USER_ERRORS
from simulator.errors import InvariantViolation, one_line

# command name -> "module:attribute". A command's module is imported only when that command
# runs (or `--help` lists it): `frontier simulate` loads none of the sweep, catalog, lesson or
# validation commands.
COMMANDS = {
    "bench": "simulator.cli.bench:bench",
    "bench-capacity": "simulator.cli.sweep:bench_capacity",
    "bench-scale": "simulator.cli.bench:bench_scale",
    "bench-validate": "simulator.cli.bench:bench_validate",
    "bench-sweep": "simulator.cli.sweep:bench_sweep",
    "calibrate": "simulator.cli.calibrate:calibrate",
    "estimate": "simulator.cli.estimate:estimate",
    "explain": "simulator.cli.explain:explain",
    "export": "simulator.cli.sweep:export_cmd",
    "hardware": "simulator.cli.catalogs:hardware",
    "lesson": "simulator.cli.lesson:lesson",
    "models": "simulator.cli.catalogs:models",
    "recommend": "simulator.cli.sweep:recommend",
    "report": "simulator.cli.sweep:report",
    "scenarios": "simulator.cli.catalogs:scenarios",
    "schema": "simulator.cli.schema:schema",
    "simulate": "simulator.cli.simulate:simulate",
    "sweep": "simulator.cli.sweep:sweep",
    "validate": "simulator.cli.validate:validate",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use (COMMANDS)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *super().list_commands(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module, attr = target.split(":")
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command) and command.name == cmd_name, target
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
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


EXIT_INVARIANT = 3  # `simulate --check` found a simulator bug (not the user's fault)


def main(argv: list[str] | None = None) -> None:
    """Entry point: every user error becomes one line on stderr and exit status 2; a broken
    invariant under `--check` one line and status 3."""
    # pydantic looks for plugins (importlib.metadata over every installed package) before it
    # builds the first schema: tens of milliseconds of start-up for plugins frontier never uses.
    # Set PYDANTIC_DISABLE_PLUGINS= (empty) to have them load after all.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    # OpenBLAS starts a spinning thread per core when numpy loads: ~50 ms of CPU at start-up
    # (more when the cores are busy) for a library frontier never calls (no matrix products).
    # One thread changes no result; sweep workers inherit it, so N workers do not fight over
    # N x cores BLAS threads. Set OPENBLAS_NUM_THREADS yourself to override.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
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


def entry() -> None:
    """The `frontier` executable: `main`, then an exit that skips tearing the interpreter down.

    Freeing every module and object of numpy, pydantic, simpy and the cost model one by one
    takes ~70-100 ms after the command has finished, a fifth of `frontier simulate` on a tiny
    scenario. The exit first does everything a normal exit must: flushes stdout and stderr and
    runs the atexit callbacks (worker pools, temporary folders, logging); where another thread
    is still alive it exits the normal way. Output files are closed by the commands themselves.
    """
    try:
        main()
        code = 0
    except SystemExit as exc:
        if exc.code is not None and not isinstance(exc.code, int):
            raise  # a message as the exit code: let Python print it
        code = exc.code or 0
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)  # CPython; elsewhere exit normally
    threads = sys.modules.get("threading")
    if run_exitfuncs is None or (threads is not None and threads.active_count() > 1):
        sys.exit(code)
    try:
        run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # `frontier ... | head`: the reader left; nothing more to say
        pass
    os._exit(code)
