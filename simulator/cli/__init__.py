"""The `frontier` command line: one module per command group, all thin over the API.

Importing it first routes the standard library's compiles of generated code through a
bytecode cache (simulator/code_cache.py: start-up time of every command).
"""

from simulator.code_cache import install

install()
