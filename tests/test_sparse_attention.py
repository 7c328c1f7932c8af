"""DeepSeek-V3.2-style sparse attention (DSA) as GLM-5 runs it (issue 36): the catalog entry's
sizes, the indexer's cache and cost by hand, attention capped at the top-k keys, and the
indexer shown by `explain`."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.cost import BatchShape, Formats, ParallelLayout, StepModel
from simulator.cost.memory import kv_bytes_per_token_per_gpu
from simulator.cost.operators import indexer_consts, indexer_terms
from simulator.hardware.profile import load_hardware
from simulator.model.load import load_architecture

GLM5 = load_architecture("glm-5")
TP8 = ParallelLayout(tensor_parallel=8, expert_parallel=8)


def test_glm5_sizes_match_its_published_totals() -> None:
    """744B parameters, about 40B active (GLM-5's README); the indexer: 2048 x 32 x 128 query
    + 6144 x 128 key + 6144 x 32 weights = 9,371,648 parameters a layer."""
    assert GLM5.total_params == pytest.approx(744e9, rel=0.002)
    assert GLM5.active_params == pytest.approx(41.8e9, rel=0.01)
    assert GLM5.indexer_params_per_layer == 2048 * 32 * 128 + 6144 * 128 + 6144 * 32
    assert GLM5.sparse is not None and GLM5.sparse.topk == 2048


def test_the_cache_holds_every_token_and_its_index_key() -> None:
    """Per token and layer: the MLA latent (512 + 64) x 2 bytes in BF16 plus the FP8 index key
    128 + one FP32 scale 4 = 1,284 bytes, x 78 layers = 100,152 bytes on every TP rank."""
    assert GLM5.index_key_bytes == 132
    assert kv_bytes_per_token_per_gpu(GLM5, TP8, "bf16") == 78 * (576 * 2 + 132)
    dense = dataclasses.replace(GLM5, sparse=None)
    assert kv_bytes_per_token_per_gpu(dense, TP8, "bf16") == 78 * 576 * 2


def test_indexer_cost_by_hand() -> None:
    """32 decode sequences, 131,072 cached tokens in all: the indexer scores 131,072 + 32 keys
    (each sequence's new token too) with 2 x 32 x 128 = 8,192 FLOPs each and reads 132 bytes
    of each, in 78 layers: 83.8 GFLOP and 1.35 GB."""
    m = StepModel(GLM5, load_hardware("h200-sxm"), TP8, Formats("fp8", "fp8", "bf16"))
    got = indexer_terms(m, indexer_consts(m), BatchShape(decode_seqs=32,
                                                         decode_context_tokens=131_072))
    assert got is not None
    flops, nbytes = got
    assert flops == 8192 * 131_104 * 78
    assert nbytes == 132 * 131_104 * 78


def test_attention_reads_the_top_k_keys_only() -> None:
    """One sequence with 16,383 cached tokens: its decode attention reads 2,048 keys a layer
    under DSA, all 16,384 in the dense model of the same shape."""
    hw, fm = load_hardware("h200-sxm"), Formats("fp8", "fp8", "bf16")
    b = BatchShape(decode_seqs=1, decode_context_tokens=16_383)
    sparse = StepModel(GLM5, hw, TP8, fm)
    dense = StepModel(dataclasses.replace(GLM5, sparse=None), hw, TP8, fm)

    def attention_bytes(m: StepModel) -> float:
        return next(op.bytes for op in m.attention_ops(b) if op.op == "attention_decode")

    assert attention_bytes(sparse) / attention_bytes(dense) == pytest.approx(2048 / 16_384)
    assert [op.op for op in sparse.attention_ops(b)] == ["attention_decode", "dsa_indexer"]
    assert [op.op for op in dense.attention_ops(b)] == ["attention_decode"]


def test_explain_shows_the_indexer(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.cli_helpers import run_cli

    code, out, err = run_cli(["explain", "glm-5", "--gpu", "h200-sxm", "--tp", "8", "--ep", "8",
                              "--precision", "fp8", "--kv-cache", "bf16", "--decode-batch", "32",
                              "--context", "4096"], capsys)
    assert code == 0, err
    for op in ("dsa_indexer ", "dsa_indexer_q_proj", "dsa_indexer_k_proj", "attention_decode"):
        assert op in out, op


@pytest.mark.parametrize(("extra", "needle"), [
    ({"kv_lora_rank": None}, "without MLA"),
    ({"use_sliding_window": True, "sliding_window": 4096}, "use_sliding_window"),
])
def test_sparse_configs_the_cost_model_cannot_cost_are_refused(extra: dict[str, object],
                                                               needle: str) -> None:
    import json

    from simulator.model.architecture import ModelError
    from simulator.model.hf_config import parse_hf_config
    from simulator.model.load import CATALOG_DIR

    raw = json.loads((CATALOG_DIR / "glm-5.json").read_text())
    raw = {k: v for k, v in {**raw, **extra}.items() if v is not None}
    with pytest.raises(ModelError, match=needle):
        parse_hf_config(raw, "x")


def test_an_eagle_head_on_a_sparse_model_attends_densely() -> None:
    from simulator.cost.draft import eagle_head

    assert eagle_head(GLM5).sparse is None


def test_mlp_layer_types_set_the_dense_layers() -> None:
    """transformers' newer form names each layer's MLP: three 'dense' then 'sparse' is GLM-5's
    first_k_dense_replace 3; a wrong length is one line."""
    import json

    from simulator.model.architecture import ModelError
    from simulator.model.hf_config import parse_hf_config
    from simulator.model.load import CATALOG_DIR

    raw = json.loads((CATALOG_DIR / "glm-5.json").read_text())
    del raw["first_k_dense_replace"]
    raw["mlp_layer_types"] = ["dense"] * 3 + ["sparse"] * 75
    assert parse_hf_config(raw, "x").total_params == GLM5.total_params
    raw["mlp_layer_types"] = ["dense"] * 3
    with pytest.raises(ModelError, match="mlp_layer_types"):
        parse_hf_config(raw, "x")
