"""The `frontier` command line: one module per command group, all thin over the API."""
