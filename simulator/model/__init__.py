"""What is served: transformer architectures, the HF config catalog, numeric formats."""
