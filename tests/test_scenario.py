"""Scenario schema: defaults, the public scenario keys, one-line errors, --set overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator.errors import InputError
from simulator.inputs.deployment import AggregatedDeployment, DisaggregatedDeployment
from simulator.inputs.scenario import (
    ClosedLoopArrival,
    LognormalLengths,
    PoissonArrival,
    Scenario,
    apply_overrides,
    load_scenario_file,
    scenario_to_dict,
)

MINIMAL: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "hardware": {"gpu": "h100-sxm"},
    "workload": {
        "arrival": {"kind": "poisson", "rate_per_s": 2.0},
        "input_tokens": {"kind": "fixed", "value": 1000},
        "output_tokens": {"kind": "fixed", "value": 100},
    },
}

# The project's published scenario example (shared design notes), verbatim (comments dropped).
DESIGN_EXAMPLE = """
schema_version: 1
name: llama-3.3-70b on 2x H200, chat
model: llama-3.3-70b
hardware: {gpu: h200-sxm, gpus_per_node: 8, nodes: 1}
deployment:
  kind: aggregated
  replicas: 1
  tensor_parallel: 2
  pipeline_parallel: 1
  attention_data_parallel: 1
  expert_parallel: 1
  precision: {weights: fp8, activations: fp8, kv_cache: fp8}
  scheduler: {max_num_seqs: 256, max_num_batched_tokens: 8192, chunked_prefill: true}
  speculative: null
workload:
  arrival: {kind: poisson, rate_per_s: 4.0}
  input_tokens: {kind: fixed, value: 1000}
  output_tokens: {kind: fixed, value: 1000}
  num_requests: 1000
  seed: 0
slo: {ttft_p99_s: 2.0, tpot_p99_s: 0.05}
"""


def _load(
    overrides: list[str] | tuple[str, ...] = (), data: dict[str, Any] | None = None
) -> Scenario:
    return load_scenario_file(MINIMAL if data is None else data, overrides)[0]


def _error(overrides: list[str], data: dict[str, Any] | None = None) -> str:
    with pytest.raises(InputError) as info:
        _load(overrides, data)
    return str(info.value)


def _contains(full: Any, part: Any) -> bool:
    """Every key and value of `part` appears in `full` (dicts compared recursively)."""
    if isinstance(part, dict):
        return isinstance(full, dict) and all(
            k in full and _contains(full[k], v) for k, v in part.items()
        )
    return bool(full == part)


# ----------------------------------------------------------------------------- loading


def test_minimal_dict_loads_with_defaults() -> None:
    s, base_dir = load_scenario_file(MINIMAL)
    assert base_dir is None
    assert s.schema_version == 1 and s.name == ""
    assert s.hardware.gpus_per_node == 8 and s.hardware.nodes == 1
    d = s.deployment
    assert isinstance(d, AggregatedDeployment)
    assert (d.replicas, d.tensor_parallel, d.pipeline_parallel) == (1, 1, 1)
    assert (d.attention_data_parallel, d.expert_parallel) == (1, 1)
    assert (d.precision.weights, d.precision.activations, d.precision.kv_cache) == ("bf16",) * 3
    assert d.scheduler.max_num_seqs == 256 and d.scheduler.max_num_batched_tokens == 8192
    assert d.scheduler.chunked_prefill and d.scheduler.policy == "fcfs"
    assert d.scheduler.block_size == 16
    assert d.engine == "vllm" and d.overhead is None and d.speculative is None
    assert d.gpu_memory_utilization == 0.9 and d.comm_overlap == 0.0
    assert d.router == "round_robin"
    assert s.workload.num_requests == 1000 and s.workload.seed == 0
    assert s.workload.priorities is None and s.slo is None
    assert s.limits.max_simulated_time_s is None and s.limits.max_waiting_requests is None
    assert s.num_gpus == 1 and s.gpus_per_replica == 1


def test_loading_does_not_mutate_the_callers_dict() -> None:
    before = yaml.safe_dump(MINIMAL)
    _load(["workload.arrival.kind=closed_loop", "workload.arrival.concurrency=4"])
    assert yaml.safe_dump(MINIMAL) == before


def test_design_example_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "chat.yaml"
    path.write_text(DESIGN_EXAMPLE)
    s, base_dir = load_scenario_file(path)
    assert base_dir == tmp_path.resolve()
    raw = yaml.safe_load(DESIGN_EXAMPLE)
    dumped = scenario_to_dict(s)
    assert _contains(dumped, raw), dumped
    assert s.num_gpus == 2
    # the dump is a complete scenario: loading it again gives the same scenario
    assert load_scenario_file(dumped)[0] == s
    assert scenario_to_dict(load_scenario_file(dumped)[0]) == dumped


@pytest.mark.parametrize(
    "override",
    [
        "deployment.speculative={method: eagle3, num_speculative_tokens: 3,"
        " acceptance_length: 2.8}",
        "workload.arrival={kind: offline}",
        "workload.arrival={kind: closed_loop, concurrency: 16}",
        "workload.arrival={kind: gamma, rate_per_s: 4.0, cv: 2.0}",
        "workload.arrival={kind: constant, rate_per_s: 4.0}",
        "workload.input_tokens={kind: uniform, min: 100, max: 2000}",
        "workload.input_tokens={kind: normal, mean: 1000, std: 100, min: 10, max: 4000}",
        "workload.input_tokens={kind: lognormal, median: 1000, p90: 3000}",
        "workload.input_tokens={kind: lognormal, median: 1000, sigma: 0.8}",
        "workload.input_tokens={kind: lognormal, mean: 1000, sigma: 0.8, max: 8000}",
        "workload.input_tokens={kind: empirical, values: [10, 20, 30]}",
        "workload.input_tokens={kind: empirical, path: lengths.csv, column: prompt}",
        "workload.priorities={values: [0, 1], weights: [0.2, 0.8]}",
        "slo={e2e_p99_s: 30}",
        "limits={max_simulated_time_s: 600, max_waiting_requests: 10000}",
        "deployment.overhead={step_s: 0.002, per_seq_s: 0.00001}",
        "deployment.engine=sglang",
        "deployment.router=least_outstanding",
        "deployment.scheduler.policy=priority",
    ],
)
def test_other_documented_keys_round_trip(override: str) -> None:
    s = _load([override])
    path, _, raw = override.partition("=")
    node: Any = scenario_to_dict(s)
    for key in path.split("."):
        node = node[key]
    assert _contains(node, yaml.safe_load(raw))
    assert load_scenario_file(scenario_to_dict(s))[0] == s


def test_disaggregated_is_validated_and_counts_both_pools() -> None:
    s = _load(
        [
            "deployment={kind: disaggregated, prefill: {replicas: 2, tensor_parallel: 2},"
            " decode: {tensor_parallel: 4}, kv_transfer: {link: nvlink, gb_per_s: 400}}"
        ]
    )
    assert isinstance(s.deployment, DisaggregatedDeployment)
    assert s.gpus_per_replica == 2 + 4
    assert s.num_gpus == 2 * 2 + 4
    assert load_scenario_file(scenario_to_dict(s))[0] == s


# ------------------------------------------------------------------------------ errors


def test_unknown_key_names_its_path() -> None:
    assert _error(["deployment.scheduler.max_seqs=4"]) == (
        "scenario: deployment.scheduler.max_seqs: unknown key; did you mean 'max_num_seqs'? "
        "(valid: block_size, chunked_prefill, max_num_batched_tokens, max_num_seqs, "
        "max_prefill_tokens, mix_prefill_decode, policy, prefix_caching, recv_interval_steps)"
    )
    assert _error(["colour=blue"]).startswith("scenario: colour: unknown key (valid: ")


def test_negative_rate_names_the_key() -> None:
    msg = _error(["workload.arrival.rate_per_s=-1"])
    assert msg == "scenario: workload.arrival.rate_per_s: Input should be greater than 0 (got -1)"


def test_too_many_gpus_gives_the_numbers() -> None:
    msg = _error(["deployment.tensor_parallel=8", "deployment.replicas=2"])
    assert "deployment uses 16 GPUs (replicas 2 × tp 8) but hardware has 8 " in msg
    assert "(gpus_per_node 8 × nodes 1)" in msg
    # the same deployment fits on two nodes
    assert _load(["deployment.tensor_parallel=8", "deployment.replicas=2", "hardware.nodes=2"])


def test_replica_wider_than_the_machine_says_how_many_nodes() -> None:
    msg = _error(["deployment.tensor_parallel=8", "deployment.pipeline_parallel=2"])
    assert "one replica needs 16 GPUs (tp 8 × pp 2)" in msg
    assert "nodes >= 2" in msg
    s = _load(["deployment.tensor_parallel=16", "hardware.nodes=2"])  # multi-node TP is allowed
    assert s.num_gpus == 16


def test_expert_parallel_limited_by_tp_times_dp() -> None:
    msg = _error(["deployment.expert_parallel=4", "deployment.tensor_parallel=2"])
    assert "deployment.expert_parallel: expert_parallel 4 exceeds tensor_parallel 2" in msg
    s = _load(
        [
            "deployment.expert_parallel=4",
            "deployment.tensor_parallel=2",
            "deployment.attention_data_parallel=2",
        ]
    )
    assert s.num_gpus == 4


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["deployment.precision.activations=int4"], "activations: int4 is a weight-only format"),
        (["deployment.precision.kv_cache=fp6"], "deployment.precision.kv_cache: Input should be"),
        (
            [
                "deployment.speculative={method: mtp, num_speculative_tokens: 2,"
                " acceptance_length: 4}"
            ],
            "acceptance_length 4.0 must lie in [1, num_speculative_tokens + 1] = [1, 3]",
        ),
        (["deployment.scheduler.block_size=0"], "deployment.scheduler.block_size: Input should"),
        (["deployment.gpu_memory_utilization=1.5"], "gpu_memory_utilization: Input should be"),
        (["deployment.comm_overlap=-0.1"], "deployment.comm_overlap: Input should be"),
        (["hardware.gpus_per_node=100"], "hardware.gpus_per_node: Input should be less than"),
        (["workload.arrival.kind=bursty"], "arrival kind 'bursty' is not one of: offline, poisson"),
        (["workload.arrival={rate_per_s: 1}"], "workload.arrival: arrival needs a kind"),
        (["deployment.kind=split"], "deployment kind 'split' is not one of: aggregated"),
        (
            ["workload.input_tokens={kind: lognormal, median: 100, p90: 300, sigma: 1}"],
            "exactly one of median+sigma, median+p90 or mean+sigma (got median+p90+sigma)",
        ),
        (["workload.input_tokens={kind: lognormal, median: 100, p90: 50}"], "must be above"),
        (["workload.input_tokens={kind: uniform, min: 10, max: 5}"], "max 5 is below min 10"),
        (["workload.input_tokens={kind: normal, mean: 10, std: 1, min: 0}"], "input_tokens.min"),
        (
            ["workload.input_tokens={kind: empirical, values: [1], path: a.csv, column: x}"],
            "either values or path+column, not both",
        ),
        (["workload.input_tokens={kind: empirical, path: a.csv}"], "both path and column"),
        (["workload.output_tokens=null"], "workload.output_tokens: required"),
        (["workload.num_requests=0"], "workload.num_requests: Input should be greater"),
        (
            ["workload.priorities={values: [0, 1, 2], weights: [1, 1]}"],
            "2 weights for 3 values",
        ),
        (["workload.priorities={values: [0], weights: [0]}"], "weights[0]: Input should be"),
        (["slo={}"], "slo: slo needs at least one of"),
        (["schema_version=2"], "schema_version: Input should be 1"),
        (["model="], "model: Input should be a valid string"),
    ],
)
def test_bad_values_are_one_clear_line(overrides: list[str], expected: str) -> None:
    msg = _error(overrides)
    assert expected in msg, msg
    assert "\n" not in msg and msg.startswith("scenario: ")


def test_trace_arrivals_take_lengths_from_the_trace() -> None:
    data = {
        "model": "m",
        "hardware": {"gpu": "b200"},
        "workload": {"arrival": {"kind": "trace", "path": "t.csv"}},
    }
    s = _load(data=data)
    assert s.workload.input_tokens is None and s.workload.output_tokens is None
    msg = _error(["workload.input_tokens={kind: fixed, value: 3}"], data)
    assert "workload.input_tokens: input_tokens must be left out with trace arrivals" in msg
    # and without a trace they are required
    assert "workload.input_tokens: required" in _error(["workload.arrival={kind: offline}"], data)


def test_yaml_problems_name_the_file(tmp_path: Path) -> None:
    not_mapping = tmp_path / "list.yaml"
    not_mapping.write_text("- a\n- b\n")
    with pytest.raises(InputError, match=r"list\.yaml: a scenario must be a YAML mapping.*list"):
        load_scenario_file(not_mapping)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(InputError, match="got an empty file"):
        load_scenario_file(empty)
    broken = tmp_path / "broken.yaml"
    broken.write_text("model: [unclosed\n")
    with pytest.raises(InputError, match=r"broken\.yaml: cannot read YAML"):
        load_scenario_file(broken)
    with pytest.raises(InputError, match=r"missing\.yaml: scenario file not found"):
        load_scenario_file(tmp_path / "missing.yaml")


def test_schema_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(MINIMAL))
    with pytest.raises(InputError) as info:
        load_scenario_file(path, ["deployment.tensor_parallel=abc"])
    assert str(info.value).startswith(f"{path}: deployment.tensor_parallel: Input should be")
    assert "(got 'abc')" in str(info.value)


# --------------------------------------------------------------------------- overrides


def test_overrides_are_typed_by_yaml() -> None:
    s = _load(
        [
            "deployment.tensor_parallel=4",  # int
            "deployment.gpu_memory_utilization=0.85",  # float
            "deployment.scheduler.chunked_prefill=false",  # bool
            "deployment.precision.weights=fp8",  # string
            "workload.priorities.values=[0, 5]",  # list
            "workload.priorities.weights=[1, 3]",
            "name=two words, a comma",
        ]
    )
    d = s.deployment
    assert isinstance(d, AggregatedDeployment)
    assert d.tensor_parallel == 4 and d.gpu_memory_utilization == 0.85
    assert d.scheduler.chunked_prefill is False and d.precision.weights == "fp8"
    assert s.workload.priorities is not None
    assert s.workload.priorities.values == (0, 5) and s.workload.priorities.weights == (1.0, 3.0)
    assert s.name == "two words, a comma"


def test_override_creates_missing_and_null_mappings() -> None:
    data = {**MINIMAL, "slo": None}
    s = _load(["slo.ttft_p99_s=2", "limits.max_waiting_requests=100"], data)
    assert s.slo is not None and s.slo.ttft_p99_s == 2.0
    assert s.limits.max_waiting_requests == 100


def test_override_replaces_a_whole_mapping() -> None:
    s = _load(["workload.arrival={kind: gamma, rate_per_s: 2, cv: 3}"])
    assert s.workload.arrival.kind == "gamma"


def test_kind_change_drops_keys_of_the_old_variant() -> None:
    s = _load(["workload.arrival.kind=closed_loop", "workload.arrival.concurrency=8"])
    assert s.workload.arrival == ClosedLoopArrival(concurrency=8)
    # order does not matter
    s = _load(["workload.arrival.concurrency=8", "workload.arrival.kind=closed_loop"])
    assert s.workload.arrival == ClosedLoopArrival(concurrency=8)
    s = _load(
        [
            "workload.input_tokens.kind=lognormal",
            "workload.input_tokens.median=100",
            "workload.input_tokens.p90=400",
        ]
    )
    assert isinstance(s.workload.input_tokens, LognormalLengths)
    # keys an override sets itself are never dropped: a wrong one is still reported
    msg = _error(
        [
            "workload.arrival.kind=closed_loop",
            "workload.arrival.concurrency=8",
            "workload.arrival.rate_per_s=3",
        ]
    )
    assert "workload.arrival.rate_per_s: unknown key (valid: concurrency, kind, start)" in msg
    # the new variant's own required keys are still required
    assert "workload.arrival.concurrency: Field required" in _error(
        ["workload.arrival.kind=closed_loop"]
    )


def test_kind_change_of_the_default_deployment() -> None:
    data = {**MINIMAL, "deployment": {"tensor_parallel": 2}}  # kind left to its default
    s = _load(["deployment.kind=disaggregated", "deployment.decode.tensor_parallel=4"], data)
    assert isinstance(s.deployment, DisaggregatedDeployment)
    assert s.num_gpus == 1 + 4


def test_same_kind_keeps_keys() -> None:
    out = apply_overrides(MINIMAL, ["workload.arrival.kind=poisson"])
    assert out["workload"]["arrival"] == {"kind": "poisson", "rate_per_s": 2.0}
    assert _load(["workload.arrival.kind=poisson"]).workload.arrival == PoissonArrival(
        rate_per_s=2.0
    )


@pytest.mark.parametrize("bad", ["no_equals_sign", "=4", " =4", "a..b=1", ".a=1", "a.=1"])
def test_malformed_override_is_named(bad: str) -> None:
    with pytest.raises(InputError, match=r"expected key\.path=value") as info:
        apply_overrides(MINIMAL, [bad])
    assert repr(bad) in str(info.value)


def test_override_through_a_scalar_is_refused() -> None:
    with pytest.raises(InputError, match=r"model is 'llama-3\.1-8b', not a mapping"):
        apply_overrides(MINIMAL, ["model.name=x"])


def test_override_with_broken_yaml_value() -> None:
    with pytest.raises(InputError, match="value is not valid YAML"):
        apply_overrides(MINIMAL, ["workload.priorities.values=[1,"])
