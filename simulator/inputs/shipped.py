"""The scenarios that ship with frontier, found from a checkout or an installed wheel alike."""

from __future__ import annotations

from pathlib import Path


def scenarios_dir() -> Path:
    """scenarios/ of the checkout, else the copy packaged in the wheel."""
    checkout = Path(__file__).resolve().parents[2] / "scenarios"
    if checkout.is_dir():
        return checkout
    # The installed package's own folder (no importlib.resources: its import costs start-up).
    return Path(__file__).resolve().parents[1] / "_shipped" / "scenarios"


def shipped_scenarios() -> dict[str, Path]:
    """Scenario name (file stem) -> path, sweeps under `sweeps/<name>`."""
    root = scenarios_dir()
    found = {p.stem: p for p in sorted(root.glob("*.yaml"))}
    found.update({f"sweeps/{p.stem}": p for p in sorted((root / "sweeps").glob("*.yaml"))})
    return found


def resolve_scenario(name_or_path: str | Path) -> Path:
    """A path as given when it exists; else a shipped scenario of that name (with or without
    `.yaml`), so `frontier simulate chat-llama-3.1-8b-h100` works after a plain pip install."""
    path = Path(name_or_path)
    if path.exists():
        return path
    stem = path.name[: -len(".yaml")] if path.name.endswith(".yaml") else path.name
    key = f"sweeps/{stem}" if path.parent.name == "sweeps" else stem
    return shipped_scenarios().get(key, path)
