"""Summaries of a run's request records: latency percentiles, throughput, SLO, per-pool figures."""
