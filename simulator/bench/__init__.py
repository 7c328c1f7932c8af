"""Benchmarks of the simulator itself: how fast it costs steps, runs requests and sweeps."""
