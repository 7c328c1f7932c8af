"""What the user writes: scenario and workload schemas, YAML loading, shipped names."""
