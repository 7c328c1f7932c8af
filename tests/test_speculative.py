"""Speculative decoding as a spec: closed-form acceptance against seeded draws and simulated
runs, hand-costed draft and verify steps, the roofline crossover, presets and their sources."""

from __future__ import annotations

import csv
import dataclasses
import json
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from simulator.api import simulate
from simulator.cost.draft import eagle_head
from simulator.cost.shape import BatchShape
from simulator.cost.spec_ranks import crossover_batch
from simulator.cost.step import StepModel
from simulator.inputs.speculative import (
    SpeculativeConfig,
    acceptance_length_of,
    geometric_rate,
    load_presets,
    per_position_rates,
)
from simulator.serving.engine_build import build_engine
from simulator.serving.speculative import SpecDecoding, emission_pmf

ROOT = Path(__file__).resolve().parent.parent


def scenario(
    spec: dict[str, Any] | None,
    concurrency: int = 1,
    requests: int = 8,
    out_tokens: int = 256,
    kind: str | None = None,
    gpu: str = "h100-sxm",
    max_num_seqs: int = 256,
) -> dict[str, Any]:
    d: dict[str, Any] = {
        "schema_version": 1,
        "name": "speculative test",
        "model": "llama-3.1-8b",
        "hardware": {"gpu": gpu},
        "deployment": {
            "tensor_parallel": 1,
            "scheduler": {"max_num_seqs": max_num_seqs, "max_num_batched_tokens": 8192},
        },
        "workload": {
            "arrival": {"kind": "closed_loop", "concurrency": concurrency},
            "num_requests": requests,
            "input_tokens": {"kind": "fixed", "value": 256},
            "output_tokens": {"kind": "fixed", "value": out_tokens},
            "seed": 3,
        },
    }
    if spec is not None:
        d["deployment"]["speculative"] = spec
    if kind is not None:
        d["workload"]["kind"] = kind
    return d


# ---- acceptance: closed form against draws ------------------------------------------------


def test_emission_pmf_is_the_chain_distribution() -> None:
    # k = 2, a = (0.8, 0.5): P(1) = 0.2, P(2) = 0.8·0.5 = 0.4, P(3) = 0.8·0.5 = 0.4
    assert emission_pmf((0.8, 0.5)) == pytest.approx([0.2, 0.4, 0.4])
    # mean = 1 + 0.8 + 0.8·0.5 = 2.2
    assert acceptance_length_of((0.8, 0.5)) == pytest.approx(2.2)


def test_geometric_rate_inverts_the_acceptance_length() -> None:
    # τ = 1 + a + a² + a³ with a = 0.6: 1 + 0.6 + 0.36 + 0.216 = 2.176
    assert geometric_rate(2.176, 3) == pytest.approx(0.6, abs=1e-9)
    assert geometric_rate(4.0, 3) == 1.0  # τ = k + 1: every draft accepted


@pytest.mark.parametrize("a", [0.3, 0.6, 0.85])
def test_mean_of_many_draws_matches_the_closed_form(a: float) -> None:
    k = 4
    spec = SpecDecoding(k, (a,) * k, seed=11)
    draws = np.concatenate([spec.draw(i, 0, 100_000, True)[:-1] for i in range(4)])
    expected = sum(a**j for j in range(k + 1))  # 1 + a + … + a^k
    # ~100k steps: the standard error of the mean is below 0.5 %; 1.5 % is three of them
    assert draws.mean() == pytest.approx(expected, rel=0.015)
    assert draws.min() >= 1 and draws.max() <= k + 1


def test_draws_are_seeded_and_stop_at_the_output_length() -> None:
    spec = SpecDecoding(3, (0.7,) * 3, seed=5)
    e1, e2 = spec.draw(7, 0, 301, True), spec.draw(7, 0, 301, True)
    assert np.array_equal(e1, e2)
    assert int(e1.sum()) == 301
    assert not np.array_equal(e1, spec.draw(8, 0, 301, True))


def test_simulated_mean_acceptance_matches_the_closed_form() -> None:
    # a = 0.7, k = 3: τ = 1 + 0.7 + 0.49 + 0.343 = 2.533
    spec = {"method": "eagle3", "num_speculative_tokens": 3, "acceptance_rate": 0.7}
    res = simulate(scenario(spec, concurrency=8, requests=32, out_tokens=1024), check=True)
    s = res.summary["speculative"]
    assert s["acceptance_length_expected"] == pytest.approx(2.533)
    # ~32·1024/2.53 ≈ 13k sequence-steps: 2 % is several standard errors
    assert s["acceptance_length_mean"] == pytest.approx(2.533, rel=0.02)


def test_itl_has_one_gap_and_zeros_and_token_times_count_every_token() -> None:
    spec = {"method": "eagle3", "num_speculative_tokens": 3, "acceptance_length": 2.8}
    res = simulate(scenario(spec, concurrency=1, requests=2, out_tokens=200), check=True)
    for i in range(2):
        t = res.token_times(i)
        assert t.size == 200
        gaps = np.diff(t)
        # a step that emits n tokens gives one gap and n − 1 zeros: about 1.8 of every 2.8
        zero_share = np.mean(gaps == 0)
        assert 0.5 < zero_share < 0.75
    # ITL p50 is a zero once most gaps are zeros
    assert res.summary["itl_s"]["p50"] == 0.0


# ---- step cost: draft and verify ---------------------------------------------------------


def _engine(spec: dict[str, Any], gpu: str = "h100-sxm") -> Any:
    from simulator.inputs.scenario import load_scenario_file

    sc, base = load_scenario_file(scenario(spec, gpu=gpu))
    return build_engine(sc, base)


def test_eagle3_draft_is_k_passes_of_one_layer_plus_lm_head() -> None:
    eng = _engine({"method": "eagle3", "num_speculative_tokens": 3, "acceptance_length": 2.8})
    model = eng.speculative.model
    target: StepModel = model.target
    head = StepModel(eagle_head(target.arch), target.hw, target.layout, target.formats)
    n, ctx = 4, 4 * 1000
    b = BatchShape(decode_seqs=n, decode_context_tokens=ctx, speculative_tokens_per_seq=3)
    # pass j drafts token j of each sequence, one position further along: context + j·n
    hand = sum(
        head.time_s(BatchShape(decode_seqs=n, decode_context_tokens=ctx + j * n))
        for j in range(3)
    )
    # Once per step the fc fuses 3 target hidden states of the k + 1 = 4 verified positions of
    # each sequence: M = 16, N = 4096, K = 3 x 4096 = 12288 in BF16 streams 4096 x 12288 x 2 B
    # + 16 x 12288 x 2 B + 16 x 4096 x 2 B = 101.2 MB at 0.80 x 3.35 TB/s = 37.7 us, plus
    # the 1.5 us launch (its tiles, 32 x 4-way split K, take 10.3 us: memory-bound).
    fc_s = (4096 * 12288 * 2 + 16 * 12288 * 2 + 16 * 4096 * 2) / (0.80 * 3.35e12) + 1.5e-6
    assert fc_s == pytest.approx(39.3e-6, rel=0.01)
    assert model.draft_s(b) == pytest.approx(hand + fc_s)
    # the head is one of 32 layers: each pass costs well under a target decode step
    plain = target.time_s(BatchShape(decode_seqs=n, decode_context_tokens=ctx))
    assert hand / 3 < 0.35 * plain
    # verify = the target over k+1 positions per sequence
    assert model.time_s(b) == pytest.approx(target.time_s(b) + hand + fc_s)


def test_verify_is_nearly_free_at_small_batch_and_not_at_large() -> None:
    eng = _engine({"method": "ngram", "num_speculative_tokens": 3, "acceptance_length": 1.5})
    t = eng.speculative.model.target

    def ratio(n: int) -> float:
        v = BatchShape(decode_seqs=n, decode_context_tokens=n * 512, speculative_tokens_per_seq=3)
        return t.time_s(v) / t.time_s(BatchShape(decode_seqs=n, decode_context_tokens=n * 512))

    # batch 1: 4 tokens instead of 1 still stream the same 16 GB of weights
    assert ratio(1) < 1.1
    # batch 256: 1024 tokens per GEMM, past the H100's ridge: the work shows
    assert ratio(256) > 2.0
    assert eng.speculative.model.draft_s(
        BatchShape(decode_seqs=8, decode_context_tokens=8000, speculative_tokens_per_seq=3)
    ) == 0.0  # n-gram lookup runs on the host


# huggingface.co/meta-llama/Llama-3.2-1B config.json (the fields the parser reads)
LLAMA_32_1B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
    "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 64, "max_position_embeddings": 131072,
    "vocab_size": 128256, "tie_word_embeddings": True, "rope_theta": 500000.0,
    "rms_norm_eps": 1e-05, "hidden_act": "silu", "torch_dtype": "bfloat16",
}


def test_draft_model_weights_and_kv_shrink_the_target_kv_pool(tmp_path: Path) -> None:
    import json

    draft = tmp_path / "llama-3.2-1b.json"
    draft.write_text(json.dumps(LLAMA_32_1B))
    plain = _engine({"method": "ngram", "num_speculative_tokens": 3, "acceptance_length": 1.5})
    drafted = _engine({"method": "draft_model", "num_speculative_tokens": 3,
                       "acceptance_length": 2.0, "draft_model": str(draft)})
    sp = drafted.speculative
    # 1.24 B parameters in BF16: about 2.5 GB
    assert sp.draft_weights_bytes_per_gpu == pytest.approx(2.47e9, rel=0.03)
    assert sp.kv_capacity_tokens < plain.speculative.kv_capacity_tokens
    # the pool per token now holds target and drafter KV: the capacity is what is left of the
    # KV bytes after the drafter's weights, over the summed per-token bytes
    budget = drafted.memory
    want = int((budget.kv_bytes_per_gpu - sp.draft_weights_bytes_per_gpu)
               // (budget.kv_bytes_per_token_per_gpu + sp.draft_kv_bytes_per_token_per_gpu))
    assert sp.kv_capacity_tokens == want


# ---- the crossover -----------------------------------------------------------------------


def test_crossover_exists_and_moves_out_with_the_ridge_point() -> None:
    spec = {"method": "eagle3", "num_speculative_tokens": 3, "acceptance_length": 1.5}
    # τ = 1.5 at k = 3: at batch 1 a verify step costs ~1.1 decode steps (memory-bound), so
    # drafting pays 1.5/1.1; at large batch the GEMMs are compute-bound and it costs more
    # than 1.5 decode steps. Attention still streams each KV once per verify, which keeps
    # the loss small at long context.
    eng = _engine(spec)
    model = eng.speculative.model
    cross = crossover_batch(model, 3, 1.5, 1024, 8192)
    assert cross is not None and 1 < cross < 8192
    # the same chip with twice the tensor FLOP/s: its ridge point doubles, so verify stays
    # memory-bound to a larger batch and speculation pays longer
    hw = model.target.hw
    fast = dataclasses.replace(hw, dense_flops_per_s={f: 2 * v for f, v in
                                                      hw.dense_flops_per_s.items()})
    from simulator.inputs.scenario import load_scenario_file

    sc, base = load_scenario_file(scenario(spec))
    fast_model = build_engine(sc, base, fast).speculative.model
    fast_cross = crossover_batch(fast_model, 3, 1.5, 1024, 8192)
    assert fast_cross is not None and fast_cross > cross


def test_speedup_falls_as_batch_grows() -> None:
    spec = {"method": "eagle3", "num_speculative_tokens": 3, "acceptance_length": 2.8}
    speedups = []
    for conc in (2, 16, 64):
        base = simulate(scenario(None, concurrency=conc, requests=conc * 2, out_tokens=128))
        sp = simulate(scenario(spec, concurrency=conc, requests=conc * 2, out_tokens=128))
        speedups.append(sp.summary["output_tokens_per_s"] / base.summary["output_tokens_per_s"])
    assert speedups[0] > speedups[1] > speedups[2]
    assert speedups[0] > 1.8


def test_policy_auto_turns_drafting_off_past_the_crossover() -> None:
    # τ = 1.3 with k = 4: drafting barely pays, so the crossover is at a small batch
    spec = {"method": "eagle3", "num_speculative_tokens": 4, "acceptance_length": 1.3}
    always = simulate(scenario(spec, concurrency=96, requests=192, out_tokens=128))
    auto = simulate(scenario({**spec, "policy": "auto"}, concurrency=96, requests=192,
                             out_tokens=128), check=True)
    s = auto.summary["speculative"]
    assert s["crossover_batch"] is not None and s["crossover_batch"] < 96
    assert s["policy_switches"] >= 1
    assert auto.summary["output_tokens_per_s"] > always.summary["output_tokens_per_s"]


# ---- schema, presets and workload kind ---------------------------------------------------


def test_every_preset_carries_its_source() -> None:
    text = (resources.files("simulator.inputs") / "speculative_presets.csv").read_text()
    rows = list(csv.DictReader(text.splitlines()))
    assert rows
    for r in rows:
        assert r["source"].strip() and r["dataset"].strip() and r["checkpoint"].strip()
        assert (r["acceptance_length"] != "") != (r["acceptance_rate"] != "")


def test_workload_kind_switches_the_preset_row() -> None:
    base = {"method": "eagle3", "num_speculative_tokens": 7,
            "preset": "eagle3-llama-3.1-8b-public"}
    cfg = SpeculativeConfig.model_validate(base)
    chat, code = per_position_rates(cfg, "chat"), per_position_rates(cfg, "code")
    # public checkpoint, K = 7: τ 2.77 on MT-bench, 3.49 on HumanEval
    assert acceptance_length_of(chat) == pytest.approx(2.77, abs=1e-6)
    assert acceptance_length_of(code) == pytest.approx(3.49, abs=1e-6)
    assert "eagle3-llama-3.1-8b-public" in load_presets()


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        # No acceptance: the two published Llama-3.1-8B EAGLE-3 presets are the choices.
        ({"method": "eagle3", "num_speculative_tokens": 3},
         "eagle3-llama-3.1-8b-paper, eagle3-llama-3.1-8b-public"),
        ({"method": "eagle3", "num_speculative_tokens": 3, "acceptance_length": 2,
          "acceptance_rate": 0.5}, "exactly one of"),
        ({"method": "eagle3", "num_speculative_tokens": 3, "preset": "nope"}, "unknown preset"),
        ({"method": "eagle3", "num_speculative_tokens": 3, "acceptance_rate": [0.5, 0.4]},
         "one per draft position"),
        ({"method": "draft_model", "num_speculative_tokens": 3, "acceptance_length": 2},
         "draft_model"),
        ({"method": "mtp", "num_speculative_tokens": 1, "acceptance_rate": 0.8},
         "multi-token-prediction"),
    ],
)
def test_bad_speculative_block_is_one_line_and_exit_2(
    tmp_path: Path, spec: dict[str, Any], needle: str
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario(spec)))
    p = subprocess.run([sys.executable, "-m", "simulator", "simulate", str(path)],
                       capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr
    assert "Traceback" not in p.stderr


# ---- frontier explain --speculative ------------------------------------------------------


def _explain(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "simulator", "explain", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_explain_speculative_shows_draft_verify_emitted_and_the_crossover() -> None:
    p = _explain("llama-3.1-8b", "--gpu", "h100-sxm", "--speculative", "eagle3:3:1.7",
                 "--decode-batch", "8", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)["speculative"]
    assert d["draft_s"] > 0 and d["verify_s"] > d["plain_decode_s"]
    assert d["emitted_tokens_per_step"] == 1.7
    # speed-up = plain per token / (draft + verify) per 1.7 tokens
    assert d["speedup"] == pytest.approx(d["plain_decode_s"] * 1.7 / (d["draft_s"] + d["verify_s"]))
    assert d["crossover_batch"] is not None and d["crossover_batch"] > 8
    text = _explain("llama-3.1-8b", "--gpu", "h100-sxm", "--speculative", "eagle3:3:2.8").stdout
    assert "draft" in text and "verify" in text and "speed-up" in text


@pytest.mark.parametrize(
    "arg", ["eagle3:3", "eagle9:3:2", "eagle3:x:2", "eagle3:3:9", "draft_model:3:2", "mtp:1:1.8"]
)
def test_explain_bad_speculative_is_one_line_and_exit_2(arg: str) -> None:
    # mtp on llama-3.1-8b: the model has no multi-token-prediction layers
    p = _explain("llama-3.1-8b", "--gpu", "h100-sxm", "--speculative", arg)
    assert p.returncode == 2
    assert "--speculative" in p.stderr or "multi-token" in p.stderr
    assert "Traceback" not in p.stderr


def test_speculative_validation_rows_run_or_say_why_not() -> None:
    from simulator.validation.rows import load_rows
    from simulator.validation.speculative_rows import speculative_setups

    rows = [r for r in load_rows() if r.subset == "speculative"]
    setups = speculative_setups()
    running = [r for r in rows if not r.pending]
    assert {r.id for r in running} == set(setups)
    # EAGLE-3 Table 1 on RTX 3090 and A100, Table 4 on H100, 14 acceptance-only rows, R1 MTP
    assert len(running) >= 27
    for r in rows:
        assert r.pending or r.measured is not None
    # What stays pending is a method the simulator does not model, said in so many words.
    assert all("not a simulated method" in r.pending for r in rows if r.pending)


def test_dspark_verifies_a_confidence_chosen_prefix() -> None:
    spec = SpecDecoding(3, (0.7,) * 3, seed=0, confidence_scheduled=True)
    # emitted 1: draft 1 rejected, verify 1; emitted 4 = k + 1: all 3 verified
    e = np.array([1, 2, 4, 3])
    assert spec.drafts_verified(e, True).tolist() == [1, 2, 3, 3]
    fixed = SpecDecoding(3, (0.7,) * 3, seed=0)
    assert fixed.drafts_verified(e, True).tolist() == [3, 3, 3, 3]
    assert fixed.drafts_verified(e, False).tolist() == [0, 0, 0, 0]


def test_dspark_costs_less_verify_than_dflash_at_the_same_acceptance() -> None:
    # same drafter shape, same acceptance: DSpark verifies on average
    # E[min(k, e)] = 1·P(1) + 2·P(2) + 3·(P(3) + P(4)) < 3 drafts, so at a batch where
    # verify is compute-bound its steps are shorter and throughput higher
    def run(method: str) -> float:
        s = {"method": method, "num_speculative_tokens": 3, "acceptance_length": 2.0}
        res = simulate(scenario(s, concurrency=128, requests=256, out_tokens=128), check=True)
        return float(res.summary["output_tokens_per_s"])

    assert run("dspark") > 1.05 * run("dflash")
