"""Engine styles per release (issue 30, cause 1): a deployment names its engine's version and
runs on that release's defaults; measured runs carry the version they recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

import simulator
from simulator.engines.style import engine_style, load_engine_styles, release_number
from simulator.errors import InputError
from tests.cli_helpers import run_cli

GOOD_BODY = ("description: d\n  cpu_step_us: 100\n  cpu_per_seq_us: 2\n"
             "  overlap_cpu_with_gpu: true\n  source: s\n")


@pytest.mark.parametrize(("text", "release"), [
    ("0.12.0", (0, 12, 0)),
    ("v0.14", (0, 14)),
    ("1.2.0rc6.post3", (1, 2, 0)),  # a pre- or post-release counts as its release
    ("0.5.1-rc0.pre3", (0, 5, 1)),
    ("nightly-dev", None),
    ("gpt-oss-dev", None),
    ("", None),
    ("0f3e1a2", None),  # a commit hash
    ("5b8c30d", None),
    ("12abc", None),
    ("7", None),  # a bare number
    ("1.1.0-dev.2", (1, 1, 0)),
])
def test_release_numbers(text: str, release: tuple[int, ...] | None) -> None:
    assert release_number(text) == release


def test_vllm_before_0_14_schedules_synchronously() -> None:
    """vLLM made async scheduling the default in 0.14.0 (engine_styles.yaml cites it): 0.12.0
    runs host and GPU in series and plans an arrival at the next boundary; 0.14.0 and later,
    a release-less version and no version keep the newest defaults."""
    old = engine_style("vllm", "0.12.0")
    assert (old.overlap_cpu_with_gpu, old.schedules_ahead, old.version) == (False, False, "0.12.0")
    for version in ("0.14.0", "0.19.0", None, "nightly-5b8c30d"):
        new = engine_style("vllm", version)
        assert new.overlap_cpu_with_gpu and new.schedules_ahead
    # Everything the range does not name stays the newest release's.
    default = load_engine_styles()["vllm"]
    assert (old.cpu_step_s, old.cpu_per_seq_s, old.front_end) == (
        default.cpu_step_s, default.cpu_per_seq_s, default.front_end)
    # A 5 ms GPU step with 1 sequence: 5 + (1000 + 8) us in series on 0.12.0, 5 ms hidden on 0.19.
    assert old.step_time_s(5e-3, 1) == pytest.approx(6.008e-3)
    assert engine_style("vllm", "0.19.0").step_time_s(5e-3, 1) == pytest.approx(5e-3)


def _scenario(engine: dict[str, object]) -> dict[str, object]:
    return {
        "model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
        "deployment": engine,
        "workload": {"arrival": {"kind": "closed_loop", "concurrency": 1},
                     "input_tokens": {"kind": "fixed", "value": 100},
                     "output_tokens": {"kind": "fixed", "value": 50}, "num_requests": 3},
    }


def test_vllm_0_12_decode_step_pays_the_host_time_in_series() -> None:
    """One closed-loop client on Llama-3.1-8B / H100: every decode step carries one sequence,
    so vLLM 0.12.0's TPOT is the newest release's plus its host time, 1000 + 8 x 1 us, exactly
    (the GPU step, about 6 ms, is longer than the host's 1.008 ms, which async hides)."""
    new = simulator.simulate(simulator.load_scenario(_scenario({"engine": "vllm"})))
    old = simulator.simulate(simulator.load_scenario(_scenario({"engine": "vllm@0.12.0"})))
    diff_s = old.summary["tpot_s"]["mean"] - new.summary["tpot_s"]["mean"]
    assert diff_s == pytest.approx(1.008e-3, rel=1e-6)


def test_shorthand_is_engine_and_version() -> None:
    a = simulator.load_scenario(_scenario({"engine": "vllm@0.12.0"})).scenario.deployment
    b = simulator.load_scenario(
        _scenario({"engine": "vllm", "engine_version": "0.12.0"})).scenario.deployment
    assert a == b and a.engine == "vllm" and a.engine_version == "0.12.0"


@pytest.mark.parametrize(("engine", "needle"), [
    ({"engine": "vllm@0.12.0", "engine_version": "0.13.0"}, "give the version once"),
    ({"engine": "vllm", "engine_version": "nightly"}, "is not a release number"),
    ({"engine": "vllm@"}, "engine_version"),
    ({"engine": "tgi@1.0"}, "'tgi'"),
])
def test_bad_versions_get_one_line(engine: dict[str, object], needle: str, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_scenario(engine)))
    code, out, err = run_cli(["simulate", str(path)], capsys)
    assert code == 2 and out == ""
    assert needle in err and len(err.strip().splitlines()) == 1, err


def test_version_ranges_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "styles.yaml"
    bad_key = ("s:\n  " + GOOD_BODY + "  versions:\n  - before: 1.0.0\n"
               "    values: {cpu_per_token_us: 3}\n    source: x\n")
    path.write_text(bad_key)
    with pytest.raises(InputError, match="cpu_per_token_us"):
        load_engine_styles(path)
    bad_release = ("s:\n  " + GOOD_BODY + "  versions:\n  - before: next\n"
                   "    values: {cpu_step_us: 3}\n    source: x\n")
    path.write_text(bad_release)
    with pytest.raises(InputError, match="not a release number"):
        load_engine_styles(path)


def test_ranges_apply_in_order_with_inclusive_since_and_exclusive_before(tmp_path: Path) -> None:
    path = tmp_path / "styles.yaml"
    path.write_text("s:\n  " + GOOD_BODY + "  versions:\n"
                    "  - {before: 1.0.0, values: {cpu_step_us: 10}, source: a}\n"
                    "  - {since: 0.5.0, before: 1.0.0, values: {cpu_per_seq_us: 5}, source: b}\n")
    assert engine_style("s", "0.4.9", path).cpu_step_s == pytest.approx(10e-6)
    assert engine_style("s", "0.4.9", path).cpu_per_seq_s == pytest.approx(2e-6)
    assert engine_style("s", "0.5.0", path).cpu_per_seq_s == pytest.approx(5e-6)
    assert engine_style("s", "1.0.0", path).cpu_step_s == pytest.approx(100e-6)


def test_measured_rows_carry_their_release(tmp_path: Path) -> None:
    """A silicon row's backend_version becomes the pool's engine_version; one that names no
    release runs on the newest defaults and says so."""
    from simulator.measured.scenario import map_run
    from simulator.measured.silicon import read_silicon

    header = ("id,backend,backend_version,model,gpu,precision,gemm_quant_mode,moe_quant_mode,"
              "mode,isl,osl,concurrency,batch_size,tp_size,pp_size,attention_dp_size,"
              "moe_tp_size,moe_ep_size,ttft_ms,tpot_ms")
    rows = [f"{v or 'none'},vllm,{v},llama-3.1-8b,h100-sxm,,,,agg,1024,128,4,4,1,1,,1,1,50,8"
            for v in ("0.12.0", "nightly-dev", "")]
    path = tmp_path / "silicon.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    old, nightly, blank = (map_run(run, None) for run in read_silicon(path))
    assert old.scenario is not None and old.scenario["deployment"]["engine_version"] == "0.12.0"
    for m, note in ((nightly, "'nightly-dev' names no release"),
                    (blank, "engine version not recorded")):
        assert m.scenario is not None and "engine_version" not in m.scenario["deployment"]
        assert any(note in d for d in m.defaults), m.defaults
