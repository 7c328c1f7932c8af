"""Model quality beside speed: published quality deltas of quantized formats (data in
quality_deltas.csv, each row with its source) and the lookup results and sweeps use."""

from simulator.quality.lookup import Quality, lookup_quality

__all__ = ["Quality", "lookup_quality"]
