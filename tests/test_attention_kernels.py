"""deployment.attention_kernel: a prefill attention kernel other than the GPU profile's default,
priced at its own published fraction of the peak (hardware_profiles/*.yaml attention_kernels)."""

from __future__ import annotations

import pytest

from simulator.cost import BatchShape, Formats, ParallelLayout, StepModel
from simulator.errors import InputError
from simulator.hardware.profile import load_hardware
from simulator.model.load import load_architecture


def test_fractions_are_the_profiles_figures() -> None:
    # H100: FA3 paper, FA2 at 35 % utilization x the 0.8 typical/peak judgement = 0.28;
    # B200: tritonbench flash_v2 315.1 and 361.6 TFLOP/s over 2,250 -> mean 0.15
    h100, b200 = load_hardware("h100-sxm"), load_hardware("b200")
    assert h100.with_prefill_kernel("flashattention-2").attention_compute_fraction == \
        pytest.approx(0.28)
    assert b200.with_prefill_kernel("flashattention-2").attention_compute_fraction == \
        pytest.approx(0.15)
    assert h100.with_prefill_kernel("flashattention-3") is h100  # the default: unchanged


def test_a_kernel_without_a_figure_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(InputError, match=r"known: flashattention-3 \(default\), "
                                         r"flashattention-2"):
        load_hardware("h100-sxm").with_prefill_kernel("flashattention-1")
    with pytest.raises(InputError, match="known: none"):
        load_hardware("gb200").with_prefill_kernel("flashattention-2")


def test_only_prefill_attention_slows() -> None:
    """A 4,096-token prefill chunk on Llama-3.1-8B, H100, BF16: the prefill attention rows take
    0.60 / 0.28 = 2.14x as long on FA2 (compute-bound at this size), every other row the same;
    a decode step is unchanged (decode attention keeps its HBM line)."""
    arch = load_architecture("llama-3.1-8b")
    hw = load_hardware("h100-sxm")
    models = [StepModel(arch, h, ParallelLayout(1, 1, 1, 1), Formats("bf16", "bf16", "bf16"))
              for h in (hw, hw.with_prefill_kernel("flashattention-2"))]
    fa3, fa2 = (m.cost(BatchShape.one_chunk(4096)) for m in models)
    attn = [sum(o.core_s for o in c.ops if o.op.startswith("attention")) for c in (fa3, fa2)]
    rest = [sum(o.core_s for o in c.ops if not o.op.startswith("attention")) for c in (fa3, fa2)]
    assert attn[1] / attn[0] == pytest.approx(0.60 / 0.28, rel=0.02)
    assert rest[1] == pytest.approx(rest[0], rel=1e-12)
    decode = [m.cost(BatchShape(decode_seqs=32, decode_context_tokens=32 * 2000)).step_time_s
              for m in models]
    assert decode[1] == pytest.approx(decode[0], rel=1e-12)
