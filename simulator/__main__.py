"""`python -m simulator` is the same CLI as `frontier`."""

from simulator.cli.app import entry

entry()
