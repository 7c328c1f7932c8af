"""Hybrid models with Gated DeltaNet layers (Qwen3.5, issue 36): the catalog entry's sizes, the
recurrent state's bytes, the recurrence's FLOPs and bytes by hand, the KV capacity a hybrid
gains over a dense model of the same shape, SGLang's state pool, and `explain`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import simulator
from simulator.cost import BatchShape, Formats, ParallelLayout, StepModel
from simulator.cost.linear_attention import linear_consts, linear_terms
from simulator.cost.memory import kv_bytes_per_token_per_gpu, memory_budget
from simulator.hardware.profile import load_hardware
from simulator.model.architecture import ModelError
from simulator.model.load import CATALOG_DIR, load_architecture

QWEN35 = load_architecture("qwen3.5-397b-a17b")
FP8 = Formats("fp8", "fp8", "bf16")


def test_qwen35_sizes_match_its_name() -> None:
    """397B total, 17B active (Qwen3.5-397B-A17B), vision tower not counted. By hand:
    routed experts 60 x 512 x 3 x 4096 x 1024 = 386.5B; 45 Gated DeltaNet layers of
    4096 x (20480 + 128) + 8192 x 4096 + 12288 x 4 + 2 x 64 + 128 = 117.9M each = 5.31B;
    15 attention layers of 4096 x 16384 (queries and gates) + 4096 x 1024 + 8192 x 4096 =
    104.9M each = 1.57B; shared experts 60 x 12.6M = 0.75B; embeddings and LM head
    2 x 248320 x 4096 = 2.03B; routers 0.13B: 396.3B. Active: 10 of 512 experts, 17.35B."""
    assert QWEN35.linear is not None and QWEN35.linear.num_layers == 45
    assert QWEN35.softmax_attention_layers == 15
    assert QWEN35.linear.params_per_layer(4096) == 4096 * 20608 + 8192 * 4096 + 12288 * 4 + 256
    assert QWEN35.attention_params_per_layer == 4096 * 16384 + 4096 * 1024 + 8192 * 4096
    assert QWEN35.total_params == pytest.approx(397e9, rel=0.003)
    assert QWEN35.active_params == pytest.approx(17.35e9, rel=0.003)


def test_state_per_sequence_by_hand() -> None:
    """Per linear layer: 64 value heads x 128 x 128 FP32 state = 4,194,304 bytes, plus the
    conv window (16 x 128 x 2 + 64 x 128 = 12,288 channels) x 3 past inputs x 2 bytes =
    73,728: 4,268,032 bytes, x 45 layers = 192,061,440 bytes; a quarter on each of 4 ranks.
    Independent of the context length, unlike a KV cache."""
    assert QWEN35.linear_state_bytes_per_seq() == 45 * (64 * 128 * 128 * 4 + 12288 * 3 * 2)
    assert QWEN35.linear_state_bytes_per_seq(4) == 192_061_440 / 4


def test_hybrid_kv_capacity_against_the_dense_twin() -> None:
    """Only the 15 full-attention layers cache keys and values: 15 x 2 x 1 KV head per rank
    (2 heads over TP 4: replicated) x 256 x 2 bytes = 15,360 bytes a token, a quarter of the
    same model with all 60 layers attending (Qwen3-Next's 3:1 Gated DeltaNet-to-attention
    layout). On a B200 at TP 4 the dense twin's 72.28 GB of KV hold 72.28e9 / 61,440 = 1.176M
    tokens; the hybrid's weights are 0.10 GB heavier (the Gated DeltaNet projections against
    attention's) and one state is reserved for each of 256 sequences (12.29 GB), leaving
    59.89 GB / 15,360 = 3.90M tokens: 3.3 times as many."""
    tp4 = ParallelLayout(tensor_parallel=4)
    dense = dataclasses.replace(QWEN35, linear=None)
    assert kv_bytes_per_token_per_gpu(QWEN35, tp4, "bf16") == 15 * 2 * 256 * 2
    assert kv_bytes_per_token_per_gpu(dense, tp4, "bf16") == 4 * 15 * 2 * 256 * 2
    hw = load_hardware("b200")
    hybrid = memory_budget(QWEN35, hw, tp4, FP8, max_seqs=256)
    twin = memory_budget(dense, hw, tp4, FP8, max_seqs=256)
    assert hybrid.state_reserve_bytes_per_gpu == 256 * 192_061_440 / 4
    assert twin.kv_capacity_tokens == int(twin.kv_bytes_per_gpu // 61_440) == 1_176_421
    assert hybrid.kv_bytes_per_gpu == pytest.approx(
        twin.kv_bytes_per_gpu - (hybrid.weights_bytes_per_gpu - twin.weights_bytes_per_gpu)
        - 256 * 48_015_360)
    assert hybrid.kv_capacity_tokens == int(hybrid.kv_bytes_per_gpu // 15_360) == 3_898_864


def test_sglang_state_pool_caps_running_requests() -> None:
    """SGLang sets r / (1 + r) of the memory after weights aside for states (r = 0.9) and runs
    at most its slots / 3: with K bytes left, slots = floor(0.4737 K / 48,015,360)."""
    hw, tp4 = load_hardware("b200"), ParallelLayout(tensor_parallel=4)
    plain = memory_budget(QWEN35, hw, tp4, FP8, max_seqs=1)
    left = plain.kv_bytes_per_gpu + plain.state_reserve_bytes_per_gpu
    pooled = memory_budget(QWEN35, hw, tp4, FP8, max_seqs=1, state_pool_share=0.4737,
                           state_slots_per_request=3)
    slots = int(left * 0.4737 // 48_015_360)
    assert pooled.state_reserve_bytes_per_gpu == slots * 48_015_360
    assert pooled.max_seqs_by_state == slots // 3
    assert pooled.kv_bytes_per_gpu == pytest.approx(left - slots * 48_015_360)


def test_decode_recurrence_by_hand_and_independent_of_context() -> None:
    """8 sequences at TP 8 (8 value heads a rank): 8 x 8 x 7 x 128 x 128 = 7,340,032 FLOPs a
    layer; bytes: q, k, v, o (2 x 16 x 128 + 2 x 64 x 128) / 8 x 2 = 5,120 a token, and each
    state read and written, 2 x 8 x 16,384 x 4 = 1,048,576 a sequence: 8,429,568 a layer,
    x 45 layers. The same for any context length."""
    m = StepModel(QWEN35, load_hardware("h200-sxm"), ParallelLayout(tensor_parallel=8), FP8)
    short = BatchShape(decode_seqs=8, decode_context_tokens=8 * 100)
    long = BatchShape(decode_seqs=8, decode_context_tokens=8 * 100_000)

    def gdn(b: BatchShape) -> tuple[float, float]:
        op = next(o for o in m.attention_ops(b) if o.op == "gdn_decode")
        return op.flops, op.bytes

    assert gdn(short) == (45 * 7_340_032, 45 * (8 * 5_120 + 8 * 1_048_576))
    assert gdn(long) == gdn(short)


def test_prefill_recurrence_by_hand() -> None:
    """One 1,000-token prompt at TP 1, chunks of 64: per token and value head
    6 x 128 x 128 + 64 x (6 x 128 + 4 x 128) + 64^2 / 3 = 181,589.3 FLOPs; bytes per token:
    q, k, v, o (2 x 16 x 128 + 2 x 64 x 128) x 2 = 40,960 plus the chunk states written and
    read (2 x 64 x 16,384 x 2 / 64 = 65,536), and the sequence's state read and written once
    (2 x 64 x 16,384 x 4 = 8,388,608); all x 45 layers."""
    consts = linear_consts(QWEN35.linear, 1)  # type: ignore[arg-type]
    b = BatchShape(prefill_tokens=1000, prefill_seqs=1, prefill_attention_pairs=500_500)
    prefill, decode = linear_terms(consts, b, 1)
    per_head = 6 * 128 * 128 + 64 * (6 * 128 + 4 * 128) + 64 * 64 / 3
    assert decode is None and prefill is not None
    assert prefill[0] == pytest.approx(45 * 1000 * 64 * per_head, rel=1e-12)
    assert prefill[1] == pytest.approx(45 * (1000 * (40_960 + 65_536) + 8_388_608), rel=1e-12)


def test_explain_shows_the_layer_kinds(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.cli_helpers import run_cli

    code, out, err = run_cli(["explain", "qwen3.5-397b-a17b", "--gpu", "b200", "--tp", "4",
                              "--precision", "fp8", "--decode-batch", "16", "--context",
                              "2048"], capsys)
    assert code == 0, err
    assert "layers: 15 full attention, 45 linear attention" in out
    for op in ("gdn_in_proj", "gdn_conv_norm", "gdn_decode", "gdn_out_proj", "qkv_proj"):
        assert op in out, op
    assert "set aside for recurrent states, 48.0 MB a sequence" in out


def _config(**changes: object) -> dict[str, object]:
    raw = json.loads((CATALOG_DIR / "qwen3.5-397b-a17b.json").read_text())
    text = dict(raw["text_config"])
    text.update(changes)
    return {**raw, "text_config": {k: v for k, v in text.items() if v is not None}}


@pytest.mark.parametrize(("changes", "needle"), [
    ({"linear_num_key_heads": None}, "missing required key 'linear_num_key_heads'"),
    ({"linear_num_value_heads": 60}, "not a multiple of 'linear_num_key_heads'"),
    ({"mamba_ssm_dtype": "float8"}, "'mamba_ssm_dtype' is 'float8'"),
    ({"layer_types": ["mamba"] * 60}, "'mamba', a layer kind"),
    ({"hybrid_override_pattern": "M-M*"}, "lists 4 blocks but 'num_hidden_layers' is 60"),
    ({"mlp_only_layers": [0]}, "missing required key 'intermediate_size'"),
])
def test_bad_hybrid_configs_are_refused_in_one_line(tmp_path: Path, changes: dict[str, object],
                                                    needle: str) -> None:
    refused_in_one_line(tmp_path, _config(**changes), needle)


def refused_in_one_line(tmp_path: Path, config: dict[str, object], needle: str) -> None:
    """The config, written as a user's config.json, is refused with one line naming `needle`."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ModelError) as err:
        load_architecture(str(path))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_state_dtype_from_the_config(tmp_path: Path) -> None:
    """A BF16 state halves the recurrent bytes: 45 x (64 x 128 x 128 x 2 + 73,728)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_config(mamba_ssm_dtype="bfloat16")))
    arch = load_architecture(str(path))
    assert arch.linear_state_bytes_per_seq() == 45 * (64 * 128 * 128 * 2 + 73_728)


def test_pd_transfer_moves_the_state_beside_the_kv() -> None:
    """Prefill TP 4 to decode TP 4 over the network: 4 lanes. A 1,000-token prompt moves
    1,000 x 15,360 x 4 bytes of KV and 192,061,440 bytes of state (48,015,360 on each of 4
    receivers); the state alone is a fixed cost, the same for any prompt length."""
    from simulator.cost.kv_transfer import kv_link_cost

    hw, tp4 = load_hardware("b200"), ParallelLayout(tensor_parallel=4)
    link = kv_link_cost(hw, "network", tp4, tp4, 15_360, 60,
                        state_bytes_per_request_per_gpu=48_015_360)
    plain = dataclasses.replace(link, state_bytes_per_request=0.0)
    assert link.state_bytes_per_request == 192_061_440
    assert link.transfer_s(1000) - plain.transfer_s(1000) == pytest.approx(
        192_061_440 / link.bytes_per_s)
    assert link.exposed_s(1000, 0.0) == pytest.approx(link.transfer_s(1000))


def test_sglang_serves_a_hybrid_without_overlap_and_within_its_state_pool() -> None:
    """SGLang 0.5.9 turns its overlap scheduler off for a hybrid with the radix cache on, and
    runs at most a third of its state slots; vLLM keeps both as for any model."""
    from simulator.engines.style import engine_style

    sglang = engine_style("sglang").for_hybrid()
    assert not sglang.overlap_cpu_with_gpu and not sglang.schedules_ahead
    vllm = engine_style("vllm")
    assert vllm.for_hybrid() == vllm
    hw, tp4 = load_hardware("b200"), ParallelLayout(tensor_parallel=4)
    budget = memory_budget(QWEN35, hw, tp4, FP8, max_seqs=1024,
                           state_pool_share=sglang.state_pool_share,
                           state_slots_per_request=sglang.state_slots_per_request)
    assert budget.max_seqs_by_state is not None and 100 < budget.max_seqs_by_state < 300
    # Speculating, SGLang runs the hybrid without its radix cache: one slot a request, so three
    # times the running requests from the same pool (slots // 1 against slots // 3).
    speculating = engine_style("sglang").for_hybrid(speculative=True)
    assert speculating.state_slots_per_request == 1 and not speculating.overlap_cpu_with_gpu
    spec_budget = memory_budget(QWEN35, hw, tp4, FP8, max_seqs=1024,
                                state_pool_share=speculating.state_pool_share,
                                state_slots_per_request=speculating.state_slots_per_request)
    slots = spec_budget.state_reserve_bytes_per_gpu // 48_015_360
    assert spec_budget.max_seqs_by_state == slots
    assert budget.max_seqs_by_state == slots // 3


@pytest.mark.parametrize(("name", "total_b", "active_b", "linear", "full"), [
    ("qwen3.5-122b-a10b", 122, 10, 36, 12),
    ("qwen3.5-35b-a3b", 35, 3, 30, 10),
    ("qwen3.5-27b", 27, 27, 48, 16),
])
def test_the_other_qwen35_sizes_match_their_names(name: str, total_b: float, active_b: float,
                                                  linear: int, full: int) -> None:
    """Each size's name gives its parameters (and active ones) in billions: counted here
    within 4 % (the vision tower is left out; Qwen3.5-35B-A3B counts 3.45B active). Three of
    every four layers are Gated DeltaNet in each."""
    arch = load_architecture(name)
    assert arch.total_params == pytest.approx(total_b * 1e9, rel=0.04)
    assert arch.active_params == pytest.approx(active_b * 1e9, rel=0.16)
    assert (arch.num_linear_layers, arch.softmax_attention_layers) == (linear, full)


def _hybrid(engine: str, **deployment: object) -> dict[str, object]:
    return {
        "model": "qwen3.5-35b-a3b", "hardware": {"gpu": "h100-sxm"},
        "deployment": {"tensor_parallel": 1, "engine": engine,
                       "precision": {"weights": "fp8", "activations": "fp8", "kv_cache": "bf16"},
                       **deployment},
        "workload": {"arrival": {"kind": "closed_loop", "concurrency": 48},
                     "input_tokens": {"kind": "fixed", "value": 2000},
                     "output_tokens": {"kind": "fixed", "value": 300},
                     "num_requests": 150, "seed": 0},
    }


def test_vllm_pages_each_running_states_in_its_kv_pool() -> None:
    """Qwen3.5-35B-A3B on one H100, BF16 KV: 10 attention layers x 2 KV heads x 256 x 2 x 2
    bytes = 20,480 bytes a token; a state is 30 x (32 x 128 x 128 x 4 + 8,192 x 3 x 2) =
    64,389,120 bytes = 64,389,120 / (16 x 20,480) = 196.5 -> 197 blocks, taken by each running
    request beside its context's blocks (vLLM's hybrid KV manager), none reserved up front.
    SGLang keeps its own pool instead, and TensorRT-LLM (assumed) one state reserved for each
    of its 256 schedulable sequences: no state blocks."""
    from simulator.serving.engine_build import build_engine

    vllm = build_engine(simulator.load_scenario(_hybrid("vllm")).scenario)
    assert vllm.memory.state_reserve_bytes_per_gpu == 0
    assert vllm.memory.state_bytes_per_seq_per_gpu == 64_389_120
    assert vllm.scheduler.state_blocks == 197
    sglang = build_engine(simulator.load_scenario(_hybrid("sglang")).scenario)
    assert sglang.scheduler.state_blocks == 0 and sglang.memory.max_seqs_by_state is not None
    trt = build_engine(simulator.load_scenario(_hybrid("trtllm")).scenario)
    assert trt.scheduler.state_blocks == 0
    assert trt.memory.state_reserve_bytes_per_gpu == 256 * 64_389_120


def test_paged_states_keep_the_block_invariants_under_pressure() -> None:
    """At 47 % of memory the KV pool holds fewer than 48 running requests of 2,300 tokens and their
    states, so 48 users preempt; every step's blocks are accounted (state included) and all
    come back at the end (serving/invariants.py)."""
    from simulator.serving.engine_build import build_engine
    from simulator.serving.invariants import InvariantChecker
    from simulator.serving.simulation import run
    from simulator.workload.stream import build_stream

    loaded = simulator.load_scenario(_hybrid("vllm", gpu_memory_utilization=0.47))
    engine = build_engine(loaded.scenario)
    checker = InvariantChecker(engine)
    stream, _ = build_stream(loaded.scenario, None)
    out = run(loaded.scenario, engine, stream, check=checker)
    checker.finish(out)
    assert out.preemptions > 0
    assert int((out.records["finish_s"] == out.records["finish_s"]).sum()) == 150
    # Each request holds 197 state blocks beyond its 144 context blocks (2,300 / 16).
    per_request = 197 + 144
    assert engine.scheduler.num_blocks // per_request < 48
