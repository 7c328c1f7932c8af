"""Run the `frontier` CLI in-process for tests: exit status, stdout and stderr of one command."""

from __future__ import annotations

import pytest

from simulator.cli.app import main


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run `frontier ARGV` in-process; (exit status, stdout, stderr) of that command alone."""
    capsys.readouterr()
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = 0 if exc.code is None else int(exc.code)
    out, err = capsys.readouterr()
    return code, out, err


# A scenario of five short requests: the smallest input the edge and bound tests start from.
TINY_SCENARIO = {
    "model": "llama-3.1-8b",
    "hardware": {"gpu": "h100-sxm"},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 4.0},
                 "input_tokens": {"kind": "fixed", "value": 100},
                 "output_tokens": {"kind": "fixed", "value": 10}, "num_requests": 5},
}
