"""HTML reports: self-contained files (plotly.js inlined), and in a real headless browser the
plots draw without console errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sweep_helpers import REPO, small_sweep

from simulator.cli.app import main
from simulator.report import write_scenario_report, write_sweep_report
from simulator.sweep import run_sweep

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sweep")
    outcome = run_sweep(small_sweep(), out, workers=2)
    write_sweep_report(out, out / "report.html", x=outcome.x, y=outcome.y)
    return out


@pytest.fixture(scope="module")
def scenario_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("single") / "chat.html"
    write_scenario_report(REPO / "scenarios" / "chat-llama-3.1-8b-h100.yaml", out,
                          ["workload.num_requests=200"])
    return out


def _assert_self_contained(html: str) -> None:
    assert "<script src=" not in html  # nothing loaded from the network
    assert "var Plotly=" in html  # plotly.js itself, inlined
    assert "Plotly.newPlot" in html and len(html) > 1_000_000  # plotly.js inlined


def test_sweep_report_is_one_self_contained_file(sweep_dir: Path) -> None:
    html = (sweep_dir / "report.html").read_text()
    _assert_self_contained(html)
    assert html.count("Plotly.newPlot") >= 4  # frontier, split, latency, step breakdown
    for title in ("Frontier", "Frontier by deployment.tensor_parallel", "Latency against load",
                  "Step-time breakdown"):
        assert f"<h2>{title}</h2>" in html
    # hover shows the config
    assert "deployment.tensor_parallel = 2" in html


def test_report_command_regenerates_with_other_axes(sweep_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    main(["report", str(sweep_dir), "--out", str(out), "--x", "ttft_p99",
          "--color-by", "deployment.precision.weights"])
    html = out.read_text()
    assert "TTFT p99 (s) (lower is better)" in html
    assert "Frontier by deployment.precision.weights" in html


def test_scenario_report_has_the_time_series(scenario_html: Path) -> None:
    html = scenario_html.read_text()
    _assert_self_contained(html)
    assert "Batch, queue and KV cache over time" in html and "KV used" in html


def test_scenario_report_refuses_a_sweep_file(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    sweep = REPO / "scenarios" / "sweeps" / "tp-vs-load-llama-70b-h100.yaml"
    with pytest.raises(SystemExit) as exc:
        main(["report", str(sweep), "--out", str(tmp_path / "x.html")])
    assert exc.value.code == 2 and "frontier sweep" in capsys.readouterr().err


def check_in_browser(pages: list[tuple[Path, int]], visible: tuple[str, ...] = (),
                     axis_titles: bool = False) -> None:
    """Open each page in headless Chromium: at least the given number of plots drawn, with
    traces, and no console or page error; each text of `visible` shown on the page; with
    `axis_titles`, every plot's x and y axes titled. Skips when Chromium or playwright is
    missing."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (CI: apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is not installed (pip install '.[dev]')")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for path, want in pages:
                page = browser.new_page()
                errors: list[str] = []
                page.on("console", lambda m, errors=errors: errors.append(m.text)
                        if m.type == "error" else None)
                page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
                page.goto(path.resolve().as_uri())
                page.wait_for_selector(".js-plotly-plot .main-svg", timeout=30_000)
                plots = page.evaluate("document.querySelectorAll('.js-plotly-plot').length")
                svgs = page.evaluate(
                    "document.querySelectorAll('.js-plotly-plot .main-svg').length")
                drawn = page.evaluate(
                    "document.querySelectorAll('.js-plotly-plot .scatterlayer .trace, "
                    ".js-plotly-plot .barlayer .trace, .js-plotly-plot .gl-container').length")
                assert plots >= want and svgs > 0 and drawn > 0, (path, plots, svgs, drawn)
                assert errors == [], (path, errors)
                for text in visible:
                    assert page.get_by_text(text, exact=False).first.is_visible(), (path, text)
                if axis_titles:
                    untitled = page.evaluate(
                        "[...document.querySelectorAll('.js-plotly-plot')].filter(p => "
                        "!['.xtitle', '.ytitle'].every(s => (p.querySelector(s) || "
                        "{textContent: ''}).textContent.trim())).length")
                    assert untitled == 0, (path, untitled)
                page.close()
        finally:
            browser.close()


def test_report_in_a_real_browser(sweep_dir: Path, scenario_html: Path) -> None:
    check_in_browser([(sweep_dir / "report.html", 4), (scenario_html, 3)])


def test_sweep_report_facets_by_format_with_quality(sweep_dir: Path) -> None:
    html = (sweep_dir / "report.html").read_text()
    assert "<h2>Speed and quality by format</h2>" in html
    # llama-3.1-8b: BF16 everywhere is the checkpoint (0 %); FP8 weights with an FP8 KV cache
    # has no published figure, so the legend and the table say unknown.
    # plotly writes '/' as \u002f inside its JSON
    assert "bf16\\u002fbf16\\u002fbf16, quality +0.00 % (measured)" in html
    assert "fp8\\u002fbf16\\u002ffp8, quality unknown" in html
    assert "<td>fp8/bf16/fp8</td><td>" in html and "<td>unknown</td>" in html


def test_report_of_a_shipped_scenario_by_name_writes_only_to_the_current_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`frontier report NAME` resolves a shipped scenario and writes NAME.html where the user
    is, never beside the shipped file (the installed package or the checkout)."""
    name = "chat-llama-3.1-8b-h100"
    shipped_html = REPO / "scenarios" / f"{name}.html"
    monkeypatch.chdir(tmp_path)
    main(["report", name, "--set", "workload.num_requests=30"])
    assert (tmp_path / f"{name}.html").is_file()
    assert not shipped_html.exists()
    assert f"wrote {tmp_path / (name + '.html')}" in capsys.readouterr().out


def test_report_of_nothing_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["report", "no-such-scenario"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "no such sweep folder, scenario file or shipped" in err
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1
