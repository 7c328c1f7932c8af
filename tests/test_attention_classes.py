"""Attention kernel classes (hardware/attention_classes.py, cost/operators.attention_rates):
hand-derived rates per architecture, the flat switch and the schema's refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simulator.cost.layout import Formats, ParallelLayout
from simulator.cost.operators import attention_rates
from simulator.cost.shape import BatchShape
from simulator.cost.step import StepModel
from simulator.errors import InputError
from simulator.hardware.gemm_classes import KERNEL_MODEL_ENV
from simulator.hardware.profile import load_hardware, load_profile_file, profile_paths
from simulator.model.load import load_architecture

H100 = load_hardware("h100-sxm")
B200 = load_hardware("b200")
BF16 = Formats("bf16", "bf16", "bf16")
FP8 = Formats("fp8", "fp8", "fp8")


def _model(name: str, hw: object, tp: int = 1, formats: Formats = BF16) -> StepModel:
    return StepModel(load_architecture(name), hw, ParallelLayout(tensor_parallel=tp), formats)  # type: ignore[arg-type]


def test_head_dim_64_prefill_runs_at_0_72_of_the_head_dim_128_rate() -> None:
    # H100 prefill attention: 0.60 x 989 TFLOP/s = 593.4 at head dim 128 (Llama); gpt-oss's
    # head dim 64 runs FA3 at 392 / 541.3 = 0.72 of that: 427.2 TFLOP/s. Decode keeps the
    # generic rate and the 0.75 x 3.35 TB/s line.
    llama = attention_rates(_model("llama-3.1-8b", H100))
    gpt = attention_rates(_model("gpt-oss-20b", H100))
    assert llama == pytest.approx((593.4e12, 593.4e12, 0.75 * 3.35e12))
    assert gpt == pytest.approx((0.72 * 593.4e12, 593.4e12, 0.75 * 3.35e12))
    # B200: FA4's d64 / d128 ratio 0.68 on 0.57 x 2250.
    assert attention_rates(_model("gpt-oss-20b", B200))[0] == pytest.approx(0.68 * 0.57 * 2250e12)


def test_mla_prefill_and_absorbed_decode_run_their_own_kernels() -> None:
    # DeepSeek-R1 on H100: non-absorbed prefill at 0.86 x 593.4 = 510.3 TFLOP/s; absorbed
    # decode on FlashMLA's rates, 0.67 x 989 = 662.6 TFLOP/s and 0.87 x 3.35 = 2.91 TB/s.
    m = _model("deepseek-r1", H100, tp=8, formats=FP8)
    assert attention_rates(m) == pytest.approx((0.86 * 593.4e12, 662.63e12, 2.9145e12))
    # B200 has no dense MLA decode figure: the generic decode line, MLA prefill at 0.91.
    b = _model("deepseek-r1", B200, tp=8, formats=FP8)
    generic = 0.57 * 2250e12
    assert attention_rates(b) == pytest.approx((0.91 * generic, generic, 0.78 * 8e12))


def test_mla_decode_row_by_hand() -> None:
    # 32 sequences x 2000 cached tokens (+1 each) on DeepSeek-R1, TP8, FP8 KV: the latent
    # cache is (512 + 64) x 1 B (+ block scales) per token per layer, replicated on every
    # rank. Memory-bound: bytes / 2.9145 TB/s + 61 layers x 15 us.
    m = _model("deepseek-r1", H100, tp=8, formats=FP8)
    row = next(o for o in m.cost(BatchShape(decode_seqs=32, decode_context_tokens=64000)).ops
               if o.op == "attention_decode")
    assert row.bound == "memory"
    assert row.time_s == pytest.approx(row.bytes / 2.9145e12 + 61 * 15e-6, rel=1e-9)
    # against the generic GQA decode line (0.75 of HBM) it streams 0.87 / 0.75 = 1.16x faster
    generic_core = row.bytes / (0.75 * 3.35e12)
    assert generic_core / (row.time_s - 61 * 15e-6) == pytest.approx(0.87 / 0.75)


def test_flat_switch_keeps_the_generic_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KERNEL_MODEL_ENV, "flat")
    hw = load_hardware("h100-sxm")
    assert hw.attention_classes is None
    assert attention_rates(_model("gpt-oss-20b", hw)) == pytest.approx(
        (593.4e12, 593.4e12, 0.75 * 3.35e12)
    )


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c.update(prefill_head_dims=[128, 64]), "increase strictly"),
        (lambda c: c.update(prefill_multiplier=[0.7]), "equal, non-zero length"),
        (lambda c: c["mla_decode"].update(hbm_fraction=1.3), "hbm_fraction"),
    ],
)
def test_bad_attention_classes_get_one_clear_line(
    tmp_path: Path, edit: object, message: str
) -> None:
    raw = yaml.safe_load(profile_paths()["h100-sxm"].read_text())
    edit(raw["attention_classes"])  # type: ignore[operator]
    path = tmp_path / "h100-sxm.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(InputError) as exc:
        load_profile_file(path)
    assert message in str(exc.value) and "h100-sxm.yaml" in str(exc.value)


def test_explain_names_each_gemm_kernel_class() -> None:
    from simulator.cost.explain import explain

    # gpt-oss on H100: attention projections stay BF16 (modules_to_not_convert) on the dense
    # class; MXFP4 experts are dequantized (Hopper has no FP4 MMA) in a grouped kernel.
    e = explain("gpt-oss-120b", "h100-sxm", ParallelLayout(tensor_parallel=8),
                Formats("mxfp4", "bf16", "bf16"), decode_batch=64)
    assert e.kernel_classes() == {
        "attention_projections": "dense",
        "moe_experts": "grouped_weight_only",
        "lm_head": "dense (bf16)",
    }
    assert "GEMM kernel classes: attention_projections dense" in e.to_text()
    b = explain("llama-3.1-8b", "b200", ParallelLayout(), Formats("nvfp4", "nvfp4", "fp8"))
    assert b.to_dict()["kernel_classes"]["dense_mlp"] == "fp4_block_scaled"
