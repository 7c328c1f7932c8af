"""`frontier explain`, `hardware list`, `models list`: output shape, and bad input stopped at the
door with one line on stderr, exit status 2 and no traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from simulator.cli.app import main
from simulator.hardware.profile import profile_paths
from simulator.model.load import catalog_names

EXPLAIN_70B = [
    "explain", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "4", "--precision", "fp8",
    "--decode-batch", "64", "--context", "2048",
]  # fmt: skip


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Call the entry point in-process; success returns normally, errors sys.exit(2)."""
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def test_explain_json_via_python_m() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "simulator", *EXPLAIN_70B, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {"step_time_s", "bound", "breakdown", "memory"} <= set(data)
    assert data["bound"] in ("compute", "memory", "communication", "overhead")
    rows = data["breakdown"]
    assert rows and all(
        set(r) >= {"op", "flops", "bytes", "time_s", "bound", "arithmetic_intensity"} for r in rows
    )
    ops = {r["op"] for r in rows}
    assert {"attention_decode", "qkv_proj", "mlp_up_gate", "tp_allreduce", "lm_head"} <= ops
    assert data["step_time_s"] == pytest.approx(sum(r["time_s"] for r in rows), rel=1e-9)
    mem = data["memory"]
    assert {"weights_bytes_per_gpu", "kv_bytes_per_token_per_gpu", "kv_capacity_tokens"} <= set(mem)
    # Hand numbers from tests/test_cost.py: 18,170,249,216 B of weights, 40,970 B KV per token.
    assert mem["weights_bytes_per_gpu"] == pytest.approx(18_170_249_216, rel=1e-9)
    assert mem["kv_bytes_per_token_per_gpu"] == pytest.approx(40_970, rel=1e-9)
    assert isinstance(mem["kv_capacity_tokens"], int) and mem["kv_capacity_tokens"] > 0


def test_explain_text_names_the_bound(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(EXPLAIN_70B, capsys)
    assert code == 0, err
    assert "bound by" in out
    assert "attention_decode" in out and "KV capacity" in out
    assert "GEMMs run at fp8" in out


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["explain", "llama-3.1-70b", "--gpu", "h100", "--tp", "4"], ["'h100'", "h100-sxm"]),
        (
            ["explain", "llama-3-70b", "--gpu", "h100-sxm", "--tp", "4"],
            ["'llama-3-70b'", "did you mean 'llama-3"],
        ),
        (
            ["explain", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "3"],
            ["tensor_parallel 3", "64 attention heads"],
        ),
        (
            ["explain", "llama-3.1-405b", "--gpu", "h100-sxm", "--tp", "4", "--precision", "bf16"],
            ["needs 2", "GB", "86 GB"],
        ),
        (
            ["explain", "llama-3.1-70b", "--gpu", "h100-sxm", "--precision", "fp7"],
            ["--precision", "fp7"],
        ),
        (
            ["explain", "llama-3.1-8b", "--gpu", "h100-sxm", "--decode-batch", "0"],
            ["empty"],
        ),
    ],
    ids=["unknown-gpu", "unknown-model", "tp-3", "405b-no-fit", "bad-precision", "empty-step"],
)
def test_bad_input_one_line_exit_2(
    argv: list[str], needles: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_main(argv, capsys)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_bad_input_via_python_m_has_no_traceback() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "simulator", "explain", "llama-3.1-70b", "--gpu", "h100"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr and "h100-sxm" in proc.stderr


def test_hardware_list_has_every_profile(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(["hardware", "list"], capsys)
    assert code == 0, err
    names = [line.split()[0] for line in out.splitlines()[2:] if line.strip()]
    assert sorted(names) == sorted(profile_paths())
    for required in ("h100-sxm", "h200-sxm", "b200", "gb200"):
        assert required in names
    code, out, _ = run_main(["hardware", "list", "--json"], capsys)
    assert code == 0
    assert sorted(d["name"] for d in json.loads(out)) == sorted(profile_paths())


def test_models_list_has_every_catalog_model(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(["models", "list"], capsys)
    assert code == 0, err
    names = [line.split()[0] for line in out.splitlines()[2:] if line.strip()]
    assert names == catalog_names()
    for required in ("llama-3.1-8b", "llama-3.1-70b", "deepseek-v3", "gpt-oss-120b"):
        assert required in names
    code, out, _ = run_main(["models", "list", "--json"], capsys)
    assert code == 0
    assert [d["name"] for d in json.loads(out)] == catalog_names()


def test_models_list_names_hybrid_and_sparse_layers(capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3.5-397B: 45 of its 60 layers are Gated DeltaNet; GLM-5 attends sparsely."""
    code, out, err = run_main(["models", "list", "--json"], capsys)
    assert code == 0, err
    rows = {d["name"]: d for d in json.loads(out)}
    assert rows["qwen3.5-397b-a17b"]["linear_attention_layers"] == 45
    assert rows["glm-5"]["sparse_attention"] and not rows["llama-3.1-8b"]["sparse_attention"]
    code, out, _ = run_main(["models", "list"], capsys)
    assert "GQA 32/2 + 45 GDN layers" in out and "MLA 64/64 DSA" in out
