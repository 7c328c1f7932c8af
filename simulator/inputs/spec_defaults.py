"""The acceptance a speculative block takes when it gives none: the preset published for the
scenario's model, method and traffic kind, when exactly one fits. Never an invented number:
with none or several fitting, the build refuses in one line that names the choices."""

from __future__ import annotations

from simulator.errors import InputError
from simulator.inputs.speculative import (
    DEFAULT_KIND,
    SpeculativeConfig,
    load_presets,
    preset_row,
)


def fitting_presets(model: str, method: str, kind: str) -> list[str]:
    """Presets with a published figure for `model` drafted by `method` on `kind` traffic."""
    return sorted(
        name
        for name, rows in load_presets().items()
        if kind in rows and rows[kind].method == method and rows[kind].model == model
    )


def gives_acceptance(cfg: SpeculativeConfig) -> bool:
    return (cfg.acceptance_length, cfg.acceptance_rate, cfg.preset) != (None, None, None)


def with_default_acceptance(
    cfg: SpeculativeConfig, model: str, kind: str | None, key: str
) -> tuple[SpeculativeConfig, str | None]:
    """`cfg` as given, or with the one fitting preset filled in and a note that says so;
    `key` is where the block sits (deployment.speculative, deployment.decode.speculative)."""
    if gives_acceptance(cfg):
        return cfg, None
    want = kind or DEFAULT_KIND
    fits = fitting_presets(model, cfg.method, want)
    if len(fits) == 1:
        row = preset_row(fits[0], want)
        note = (
            f"{key}: no acceptance given, so the published figure for {model} with "
            f"{cfg.method} on {want} traffic is used: preset {fits[0]} ({row.checkpoint}, "
            f"{row.dataset}; its source: speculative.preset_source); give acceptance_length, "
            f"acceptance_rate or preset to choose"
        )
        return cfg.model_copy(update={"preset": fits[0]}), note
    how = (
        f"give acceptance_length (mean tokens per verify step, bonus included: 1 to "
        f"num_speculative_tokens + 1 = {cfg.num_speculative_tokens + 1}) or acceptance_rate"
    )
    if fits:
        raise InputError(
            f"{key}: no acceptance given and {len(fits)} published presets fit {model} with "
            f"{cfg.method} on {want} traffic: {', '.join(fits)}; pick one (preset: NAME) or {how}"
        )
    same_method = sorted(
        name for name, rows in load_presets().items()
        if next(iter(rows.values())).method == cfg.method
    )
    published = ", ".join(same_method) if same_method else "none"
    raise InputError(
        f"{key}: no acceptance given and no published figure for {model} with {cfg.method} on "
        f"{want} traffic (presets of {cfg.method}, for other models or kinds: {published}); "
        f"{how}"
    )
