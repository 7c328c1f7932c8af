"""The newcomer's path stays true (issue 33): the README carries no internal numbering, every
relative link of the README and docs/ resolves, its accuracy table is what accuracy.yaml and
REPORT.md say, and its picture is what the tool draws from the sweep its caption names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simulator.validation.accuracy import load_accuracy
from tests.cli_helpers import run_cli

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_carries_no_internal_numbering() -> None:
    assert not re.search(r"\b[Ii]ssue \d+", README.read_text())


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    for target in LINK.findall(page.read_text()):
        if not target.startswith(("http://", "https://", "mailto:")):
            assert (page.parent / target).exists(), f"{page.name}: {target}"


def _report_row(measures: str) -> tuple[float, float]:
    """(median, p90) % of a quantity in REPORT.md's errors-per-metric table."""
    text = (REPO / "simulator" / "validation" / "REPORT.md").read_text()
    m = re.search(rf"^\| {measures} \| \d+ \| ([\d.]+)% \| ([\d.]+)% \|", text, re.M)
    assert m, measures
    return float(m.group(1)), float(m.group(2))


def test_the_readme_accuracy_table_is_what_the_measurements_say() -> None:
    """Each cell of the README's table, rounded to whole percents, against its source."""
    text = README.read_text()
    acc = load_accuracy().metrics
    for label, key, measures in (("TPOT", "tpot", "TPOT"), ("TTFT", "ttft", "TTFT")):
        row = next(ln for ln in text.splitlines() if ln.startswith(f"| {label} "))
        median, p90 = _report_row(measures)
        assert f"| {acc[key].median_abs:.0%}".replace("%", " %") in row, row
        assert f"| {median:.0f} % / {p90:.0f} % |" in row, row
    row = next(ln for ln in text.splitlines() if ln.startswith("| throughput "))
    median, p90 = _report_row("throughput")
    assert f"| {median:.0f} % / {p90:.0f} % |" in row, row


def test_the_readme_picture_is_what_its_caption_command_draws(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = REPO / "scenarios" / "sweeps" / "tp-vs-load-llama-70b-h100.yaml"
    out = tmp_path / "tp"
    code, _, err = run_cli(["sweep", str(sweep), "--out", str(out), "--no-report"], capsys)
    assert code == 0, err
    svg = tmp_path / "frontier.svg"
    code, _, err = run_cli(["report", str(out), "--out", str(tmp_path / "r.html"), "--svg",
                            str(svg)], capsys)
    assert code == 0, err
    assert svg.read_text() == (REPO / "docs" / "frontier.svg").read_text(), (
        "docs/frontier.svg is stale: rerun the command in the README's caption")
    assert svg.read_text().count("<circle") >= 10 and "<polyline" in svg.read_text()
