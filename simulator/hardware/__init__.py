"""GPU hardware profiles: the validated YAML schema and where profiles are found."""
