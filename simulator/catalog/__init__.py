"""Shipped HF config.json files and the offline parser that turns them into Architectures."""
