"""The closed-form estimate: a scenario's steady state by queueing arithmetic, without
simulating."""
