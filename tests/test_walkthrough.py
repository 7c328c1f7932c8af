"""docs/capacity-planning.md cannot drift from the tool: this test reruns the walkthrough's
commands and compares every output block and figure of the page with what they print now.
FRONTIER_UPDATE_DOCS=1 rewrites the blocks instead (review the diff: it shows what moved)."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest

from tests.cli_helpers import run_cli

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "capacity-planning.md"
SWEEP = REPO / "scenarios" / "sweeps" / "capacity-plan-llama-3.3-70b.yaml"
PRICES = ["--gpu-price", "h100-sxm=2", "--gpu-price", "b200=7"]
RATE = 20.0
BLOCK = re.compile(r"(<!-- walkthrough: (\w+) -->\n```text\n)(.*?)(```)", re.S)


def _figures(ranked: list[dict[str, object]]) -> str:
    """The walkthrough's arithmetic from recommend's JSON: copies = ceil(rate / capacity) of
    each config, its GPUs and cost; and the B200 price at which the cheapest B200 config would
    tie the winner."""
    lines = []
    for r in ranked:
        values = r["values"]
        assert isinstance(values, dict)
        cap = r["capacity"]
        assert isinstance(cap, dict)
        capacity = float(cap["rate_per_s"])
        copies, per = int(str(r["copies"])), int(str(r["gpus_per_copy"]))
        assert copies == math.ceil(RATE / capacity - 1e-9)
        lines.append(f"{values['hardware.gpu']} TP{values['deployment.tensor_parallel']} "
                     f"{values['deployment.precision.weights']}: capacity {capacity:.3g} req/s "
                     f"-> ceil({RATE:g} / {capacity:.3g}) = {copies} copies x {per} GPUs = "
                     f"{copies * per} GPUs, ${float(str(r['usd_per_hour'])):.2f}/h")
    win = ranked[0]
    b200 = [r for r in ranked if r["values"]["hardware.gpu"] == "b200"]  # type: ignore[index]
    if b200 and win["values"]["hardware.gpu"] != "b200":  # type: ignore[index]
        gpus = int(str(b200[0]["copies"])) * int(str(b200[0]["gpus_per_copy"]))
        tie = float(str(win["usd_per_hour"])) / gpus
        lines.append(f"B200 would tie the winner at ${tie:.2f} per GPU-hour ({gpus} B200 GPUs "
                     f"for ${float(str(win['usd_per_hour'])):.2f}/h)")
    return "\n".join(lines) + "\n"


def test_the_capacity_planning_walkthrough_is_what_the_tool_prints(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FRONTIER_GPU_PRICES", raising=False)
    code, _, err = run_cli(["sweep", str(SWEEP), "--out", "plan", "--no-report"], capsys)
    assert code == 0, err
    rate = ["--rate", f"{RATE:g}", *PRICES]
    code, text, err = run_cli(["recommend", "plan", *rate], capsys)
    assert code == 0, err
    code, js, err = run_cli(["recommend", "plan", *rate, "--json", "--runner-ups", "20"], capsys)
    assert code == 0, err
    code, export, err = run_cli(["export", "plan", *rate, "--top", "1"], capsys)
    assert code == 0, err
    now = {"recommend": text, "figures": _figures(json.loads(js)["ranked"]), "export": export}
    doc = DOC.read_text()
    found = {m.group(2): m.group(3) for m in BLOCK.finditer(doc)}
    assert set(found) == set(now), f"blocks in {DOC.name}: {sorted(found)}"
    if os.environ.get("FRONTIER_UPDATE_DOCS"):
        DOC.write_text(BLOCK.sub(lambda m: m.group(1) + now[m.group(2)] + m.group(4), doc))
        return
    for name, block in found.items():
        assert block == now[name], f"{DOC.name} block '{name}' differs from the tool's output"
