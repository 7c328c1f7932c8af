"""The reference a newcomer reads cannot drift (issue 33): docs/reference.md is what the schema
generates, `frontier schema` validates every shipped scenario, sweep and lesson file, a
misspelt key is answered with the key it was probably meant to be, and `precision: fp8` is
shorthand for FP8 weights and activations."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

import simulator
from simulator.errors import InputError
from simulator.inputs.reference import reference_markdown
from tests.cli_helpers import run_cli

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))
SWEEPS = sorted((REPO / "scenarios" / "sweeps").glob("*.yaml")) + sorted(
    (REPO / "scenarios" / "lessons").glob("*.yaml"))
CHAT = str(REPO / "scenarios" / "chat-llama-3.1-8b-h100.yaml")


def test_the_checked_in_reference_is_what_the_schema_generates() -> None:
    assert (REPO / "docs" / "reference.md").read_text() == reference_markdown(), (
        "docs/reference.md is stale: frontier schema --reference > docs/reference.md")


def test_every_scenario_key_is_in_the_reference() -> None:
    """Each leaf key of every shipped scenario appears in the reference, by its path (or, for
    a P/D pool's engine keys, by its key under the aggregated deployment; for a length
    distribution, by its key under workload.input_tokens, whose keys it shares)."""
    text = reference_markdown()

    def leaves(node: object, prefix: str) -> list[str]:
        if isinstance(node, dict):
            return [p for k, v in node.items() for p in leaves(v, f"{prefix}{k}.")]
        return [prefix.rstrip(".")]

    for path in SCENARIOS:
        for key in leaves(yaml.safe_load(path.read_text()), ""):
            short = key.replace("deployment.prefill.", "deployment.").replace(
                "deployment.decode.", "deployment.").replace("output_tokens", "input_tokens")
            for alias in ("sessions.turns", "sessions.first_input_tokens"):  # length specs
                short = short.replace(f"workload.{alias}", "workload.input_tokens")
            assert f"`{key}`" in text or f"`{short}`" in text, f"{path.name}: {key}"


def _schema(kind: str, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    code, out, err = run_cli(["schema", kind], capsys)
    assert code == 0, err
    schema: dict[str, object] = json.loads(out)
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def test_the_json_schema_accepts_every_shipped_file(capsys: pytest.CaptureFixture[str]) -> None:
    scenario, sweep = _schema("scenario", capsys), _schema("sweep", capsys)
    for path in SCENARIOS:
        jsonschema.validate(yaml.safe_load(path.read_text()), scenario)
    for path in SWEEPS:
        jsonschema.validate(yaml.safe_load(path.read_text()), sweep)


def test_the_json_schema_refuses_what_the_tool_refuses(
        capsys: pytest.CaptureFixture[str]) -> None:
    scenario = _schema("scenario", capsys)
    data = yaml.safe_load(Path(CHAT).read_text())
    data["deployment"]["tensor_paralel"] = 2
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, scenario)
    sweep = _schema("sweep", capsys)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"sweep": {"deployment.tensor_parallel": 4}}, sweep)
    data["deployment"].pop("tensor_paralel")
    data["deployment"]["precision"] = "fp8"  # the shorthand is valid to editors too
    jsonschema.validate(data, scenario)
    data["deployment"]["precision"] = "fp9"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, scenario)


@pytest.mark.parametrize(("override", "suggested"), [
    ("deployment.tensor_paralel=2", "tensor_parallel"),
    ("workload.arival.kind=poisson", "arrival"),
    ("workload.arrival.rate_per_sec=3", "rate_per_s"),
    ("deployment.schedular.max_num_seqs=4", "scheduler"),
    ("hardware.gpuz=h100-sxm", "gpu"),
])
def test_a_misspelt_key_names_the_key_it_was_meant_to_be(override: str, suggested: str) -> None:
    with pytest.raises(InputError) as exc:
        simulator.load_scenario(CHAT, [override])
    text = str(exc.value)
    assert f"unknown key; did you mean {suggested!r}?" in text
    assert "(valid: " in text and "\n" not in text


def test_precision_shorthand_is_weights_and_activations() -> None:
    short = simulator.load_scenario(CHAT, ["deployment.precision=fp8"]).scenario
    full = simulator.load_scenario(CHAT, [
        "deployment.precision={weights: fp8, activations: fp8}"]).scenario
    assert short.deployment.precision == full.deployment.precision
    assert short.deployment.precision.kv_cache == "bf16"
    w4 = simulator.load_scenario(CHAT, ["deployment.precision=int4"]).scenario
    assert (w4.deployment.precision.weights, w4.deployment.precision.activations) == (
        "int4", "bf16")
    with pytest.raises(InputError, match=r"deployment\.precision\.weights"):
        simulator.load_scenario(CHAT, ["deployment.precision=fp9"])
