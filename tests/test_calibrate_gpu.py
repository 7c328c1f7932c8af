"""GPU kernel-class factors in `frontier calibrate --fit host,gpu`, on synthetic truth: a silicon
CSV of Llama-3.1-70B NVFP4 on B200 under vLLM whose figures the estimate itself produced with
the FP4 block-scaled class streaming at 0.70 of HBM peak where 0.55 ships. The fit must
recover 0.70, the overlay must carry it as a hardware value, and `--calibration` must apply it
to `estimate` and `simulate` (faster decode) through the calibrated profile, and refuse a bad
key in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from simulator.calibration.applied import GpuValue
from simulator.cli.app import cli
from simulator.errors import InputError
from simulator.measured.silicon import read_silicon
from simulator.sweep.capacity import at_rate, recorded_gpu_values, search_all
from tests.test_calibrate import _fails, _row, plain_and_calibrated_sweeps, truth_file

FP4_KEY = "gemm_classes.fp4_block_scaled.hbm_fraction"
FP4_PARAM = f"b200.{FP4_KEY}"
SHIPPED_FP4 = 0.55  # hardware_profiles/b200.yaml
TRUE_FP4 = 0.70
TOLERANCE = 0.03  # the fit recovers it within 3 %


def _gpu_row(i: int, tp: int, conc: int) -> dict[str, str]:
    row = _row(i, "llama-3.1-70b", tp, conc, 512, 128)
    row.update(gpu="b200", precision="fp4", gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4")
    return row


@pytest.fixture(scope="module")
def truth_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four layouts x five concurrencies (20 runs of 4 configurations: the least the fit
    declares a GPU parameter for), figures from the estimate at the truth."""
    folder = tmp_path_factory.mktemp("calgpu")
    rows = [_gpu_row(i, tp, conc) for i, (tp, conc) in enumerate(
        (tp, conc) for tp in (1, 2, 4, 8) for conc in (1, 4, 16, 32, 64))]
    return truth_file(folder, rows, {FP4_PARAM: TRUE_FP4}, ("host", "gpu"),
                      {FP4_PARAM: SHIPPED_FP4})


@pytest.fixture(scope="module")
def overlay_path(truth_csv: Path) -> Path:
    out = truth_csv.parent / "cal.yaml"
    res = CliRunner().invoke(cli, ["calibrate", str(truth_csv), "--out", str(out),
                                   "--folds", "3", "--fit", "host,gpu", "--workers", "1"])
    assert res.exit_code == 0, res.output
    assert "held-out errors" in res.output and FP4_PARAM in res.output
    return out


def _value(overlay: Path, name: str, key: str) -> dict[str, object]:
    data = yaml.safe_load(overlay.read_text())
    return next(v for v in data["values"]
                if v["target"]["name"] == name and v["target"]["key"] == key)


def test_fit_recovers_the_fp4_streaming_fraction(overlay_path: Path, truth_csv: Path) -> None:
    fp4 = _value(overlay_path, "b200", FP4_KEY)
    assert fp4["target"] == {"kind": "hardware", "name": "b200", "key": FP4_KEY}
    assert abs(float(fp4["value"]) / TRUE_FP4 - 1) < TOLERANCE  # type: ignore[arg-type]
    assert fp4["prior"] == SHIPPED_FP4
    fitted_to = fp4["fitted_to"]
    assert isinstance(fitted_to, dict)
    assert fitted_to["files"] == [str(truth_csv)] and fitted_to["rows"] > 0
    assert fitted_to["engine_versions"] == {"vllm": "0.15.1"}
    # Held out, the TPOT of the fp4 rows gets better than at the shipped value.
    cv = fp4["cross_validated"]
    assert isinstance(cv, dict)
    assert cv["after"]["median_abs"] < cv["before"]["median_abs"]


def test_a_gpu_overlay_round_trips(overlay_path: Path, tmp_path: Path) -> None:
    from simulator.calibration.applied import applied
    from simulator.calibration.overlay import dump_overlay, read_overlay

    overlay = read_overlay(overlay_path)
    again = tmp_path / "again.yaml"
    again.write_text(dump_overlay(overlay))
    assert read_overlay(again) == overlay
    got = applied(overlay)
    fp4 = got.profiles["b200"].gemm_classes
    assert fp4 is not None and fp4.fp4_block_scaled is not None
    assert fp4.fp4_block_scaled.hbm_fraction == float(
        _value(overlay_path, "b200", FP4_KEY)["value"])  # type: ignore[arg-type]


def _scenario(tmp: Path) -> Path:
    path = tmp / "s.yaml"
    path.write_text(yaml.safe_dump({
        "name": "s", "model": "llama-3.1-70b", "hardware": {"gpu": "b200"},
        "deployment": {"engine": "vllm", "tensor_parallel": 1,
                       "precision": {"weights": "nvfp4", "activations": "nvfp4"}},
        "workload": {"arrival": {"kind": "closed_loop", "concurrency": 4},
                     "input_tokens": {"kind": "fixed", "value": 256},
                     "output_tokens": {"kind": "fixed", "value": 32}, "num_requests": 8},
    }))
    return path


def test_calibration_speeds_up_fp4_decode(overlay_path: Path, tmp_path: Path) -> None:
    """A faster FP4 stream means a shorter decode step: with the overlay TPOT drops, the first
    line names the GPU factor, and without it nothing changes."""
    scen = str(_scenario(tmp_path))
    runner = CliRunner()
    for cmd, tpot in (("simulate", lambda d: d["tpot_s"]["p50"]),
                      ("estimate", lambda d: d["tpot_ms"]["p50"])):
        plain = runner.invoke(cli, [cmd, scen])
        again = runner.invoke(cli, [cmd, scen])
        cal = runner.invoke(cli, [cmd, scen, "--calibration", str(overlay_path)])
        assert plain.exit_code == cal.exit_code == 0, cal.output
        assert plain.output == again.output
        first = cal.output.splitlines()[0]
        assert first.startswith(f"calibration: {overlay_path}")
        assert f"b200 {FP4_KEY} 0.55 -> 0.7" in first
        js_plain = runner.invoke(cli, [cmd, scen, "--json"])
        js_cal = runner.invoke(cli, [cmd, scen, "--json", "--calibration", str(overlay_path)])
        d_plain, d_cal = json.loads(js_plain.output), json.loads(js_cal.output)
        assert tpot(d_cal) < tpot(d_plain) * 0.95, cmd


def _overlay_with(overlay_path: Path, tmp_path: Path, key: str, value: float) -> Path:
    data = yaml.safe_load(overlay_path.read_text())
    for v in data["values"]:
        if v["target"]["key"] == FP4_KEY:
            v["target"]["key"], v["value"] = key, value
    out = tmp_path / f"bad-{key}-{value}.yaml"
    out.write_text(yaml.safe_dump(data))
    return out


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("gemm_classes.fp4_block_scaled.hbm_fractio", 0.7, "does not exist"),
    (FP4_KEY, 1.5, "hbm_fraction"),
    ("compute.sm_count", 100.0, "not a calibration value"),
])
def test_a_bad_gpu_value_is_one_line_exit_2(overlay_path: Path, tmp_path: Path, key: str,
                                            value: float, expected: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    bad = _overlay_with(overlay_path, tmp_path, key, value)
    scen = str(_scenario(tmp_path))
    for cmd in ("estimate", "simulate"):
        _fails([cmd, scen, "--calibration", str(bad)])
        err = capsys.readouterr().err.strip()
        assert err.startswith("frontier: ") and "\n" not in err, err
        assert expected in err and "b200" in err, err


def test_sweep_runs_every_point_on_the_calibrated_profile(overlay_path: Path,
                                                          tmp_path: Path) -> None:
    """`sweep --calibration` with GPU factors: every point runs on the calibrated B200 profile
    (TPOT equal, exactly, to `simulate --calibration` of the same point, and lower than the
    plain sweep's), its key differs from the plain point's (a store never mixes the two), and
    the first line says which factors moved."""
    first, rows_p, rows_c = plain_and_calibrated_sweeps(_scenario(tmp_path), [2, 4],
                                                        overlay_path, tmp_path)
    assert f"b200 {FP4_KEY} 0.55 -> 0.7" in first
    runner = CliRunner()
    for rp, rc in zip(rows_p, rows_c, strict=True):
        assert rp["point_id"] != rc["point_id"]
        assert rc["tpot_s.p50"] < 0.95 * rp["tpot_s.p50"]
        one = runner.invoke(cli, ["simulate", str(tmp_path / "c" / "points" /
                                                  f"{rc['point_id']}.yaml"), "--json",
                                  "--calibration", str(overlay_path)])
        got = json.loads(one.output[one.output.index("{"):])
        assert got["tpot_s"]["p50"] == pytest.approx(rc["tpot_s.p50"], rel=1e-12)
    # sweep.json records the GPU values, so recommend's capacity search reruns the points on
    # the same calibrated profile; a plain sweep records none.
    manifest = json.loads((tmp_path / "c" / "sweep.json").read_text())
    recorded = recorded_gpu_values(manifest, "sweep.json")
    fitted = yaml.safe_load(overlay_path.read_text())["values"]
    assert {(g, k): v for g, k, v, _ in recorded} == {
        (v["target"]["name"], v["target"]["key"]): v["value"] for v in fitted
        if v["target"]["kind"] == "hardware"}
    assert {g for g, *_ in recorded} == {"b200"} and any(k == FP4_KEY for _, k, *_ in recorded)
    assert recorded_gpu_values(json.loads((tmp_path / "p" / "sweep.json").read_text()),
                               "sweep.json") == ()
    _capacity_follows_the_calibrated_profile(tmp_path, str(rc["point_id"]), recorded)


def _capacity_follows_the_calibrated_profile(tmp_path: Path, point_id: str,
                                             recorded: tuple[GpuValue, ...]) -> None:
    """Under a TPOT p99 target halfway between the two profiles' TPOT p99 at a trickle of
    load, no rate meets it on the shipped B200 profile, while the calibrated one (faster FP4
    streaming) serves some: the search ran on the sweep's profile."""
    import simulator
    from simulator.calibration.applied import profiles_of

    scenario = yaml.safe_load((tmp_path / "c" / "points" / f"{point_id}.yaml").read_text())
    trickle = simulator.load_scenario(at_rate(scenario, 0.05))
    p99 = [simulator.simulate(trickle, profiles=profiles).summary["tpot_s"]["p99"]
           for profiles in (None, profiles_of(recorded))]
    assert p99[1] < 0.97 * p99[0], p99
    target = {"tpot_s.p99": (p99[0] + p99[1]) / 2}
    [plain] = search_all([scenario], target)
    [calibrated] = search_all([scenario], target, gpu_values=recorded)
    assert plain.rate_per_s == 0.0, plain
    assert calibrated.rate_per_s > 0.0, calibrated


@pytest.mark.parametrize("bad", [{"calibrated_gpu_values": [["b200", "k", "x", 1.0]]},
                                 {"calibrated_gpu_values": [["b200", 0.7]]},
                                 {"calibrated_gpu_values": "b200"}])
def test_a_bad_recorded_gpu_value_is_one_line(bad: dict[str, object]) -> None:
    with pytest.raises(InputError, match=r"sweep\.json: calibrated_gpu_values") as err:
        recorded_gpu_values(bad, "sweep.json")
    assert "\n" not in str(err.value)


def test_the_fit_predicts_what_the_calibrated_profile_makes_estimate_predict(
        truth_csv: Path) -> None:
    """The fit's predictor and `estimate --calibration` build the engine on the same
    calibrated profile: every run of the truth file, exactly."""
    import simulator
    from simulator.calibration.applied import calibrated_profile
    from simulator.measured.calibrate_runs import build_problem
    from simulator.measured.scenario import map_run

    problem = build_problem([map_run(r, None) for r in read_silicon(truth_csv)], None,
                            ("gpu",))
    values = {p.name: p.prior for p in problem.params}
    values[FP4_PARAM] = 0.66
    profiles = {"b200": calibrated_profile("b200", {
        p.target.key: values[p.name] for p in problem.params})}
    for r, mapped in enumerate(problem.used):
        est = simulator.estimate(simulator.load_scenario(mapped.scenario), profiles=profiles)
        assert problem.runs.prediction(r, values) == (est.ttft_mean_s, est.tpot_p50_s)


@pytest.mark.parametrize("gpu", ["b200", "h100-sxm"])
def test_streaming_key_paths_are_the_ones_gemm_rates_reads(gpu: str) -> None:
    """STREAMING_KEY_PATHS (what the fit moves for a run's kernel classes) mirrors
    cost/gemm.py `gemm_rates`: scaling a class's listed keys changes its streaming rate and
    scaling any other streaming key does not."""
    from simulator.calibration.applied import calibrated_profile, shipped_value
    from simulator.calibration.gpu_factors import GPU_KEYS
    from simulator.cost.gemm import gemm_rates
    from simulator.hardware.gemm_classes import STREAMING_KEY_PATHS

    base = calibrated_profile(gpu, {})
    keys = [k for k in GPU_KEYS if gpu == "b200" or "fp4_block_scaled" not in k]
    seen = set()
    # Every combination a step model asks for: FP4 MMAs only on chips with FP4 tensor cores,
    # where FP4 weights are native; weight-only kernels at a wider activation format.
    combos = [(f, n, g) for f in ("bf16", "fp8", "fp4") for n in (True, False)
              for g in (False, True) if f in base.dense_flops_per_s and (n or f != "fp4")]
    for fmt, native, grouped in combos:
        rates = gemm_rates(base, fmt, native, 64, grouped)
        seen.add(rates.kernel_class)
        listed = STREAMING_KEY_PATHS[rates.kernel_class]
        for key in keys:
            slower = calibrated_profile(gpu, {key: 0.5 * shipped_value(gpu, key)})
            moved = gemm_rates(slower, fmt, native, 64, grouped).hbm_bytes_per_s
            assert (moved != rates.hbm_bytes_per_s) == (key in listed), (rates.kernel_class, key)
    assert "dense" in seen and "grouped_dense" in seen


def test_explain_costs_the_step_on_the_calibrated_profile(overlay_path: Path) -> None:
    """`explain --calibration`: the same FP4 decode step on B200 streams its weights at the
    fitted fraction (~0.70) instead of the shipped 0.55, so the step is shorter, and the first
    line names the calibration; without the flag nothing changes."""
    args = ["explain", "llama-3.1-70b", "--gpu", "b200", "--tp", "4", "--weights", "nvfp4",
            "--activations", "nvfp4", "--kv-cache", "fp8", "--decode-batch", "1", "--json"]
    runner = CliRunner()
    plain = json.loads(runner.invoke(cli, args).output)
    again = json.loads(runner.invoke(cli, args).output)
    res = runner.invoke(cli, [*args, "--calibration", str(overlay_path)])
    assert res.exit_code == 0, res.output
    cal = json.loads(res.output)
    assert plain == again and cal["calibration"] == str(overlay_path)
    assert cal["step_time_s"] < 0.95 * plain["step_time_s"]
    text = runner.invoke(cli, [*args[:-1], "--calibration", str(overlay_path)]).output
    assert text.splitlines()[0].startswith(f"calibration: {overlay_path}")


def test_validate_scores_measured_runs_under_the_calibration(overlay_path: Path,
                                                             truth_csv: Path) -> None:
    """The truth file was made by the estimate with FP4 streaming at 0.70; scored on the shipped
    0.55 its TPOT misses, under the overlay that recovered 0.70 it is met within the fit's 3 %
    (the same rule simulate and estimate apply), and the first line says so."""
    runner = CliRunner()
    args = ["validate", "--measurements", str(truth_csv), "--method", "estimate", "--json"]
    def run(extra: list[str]) -> dict[str, object]:
        out = runner.invoke(cli, [*args, *extra]).output
        return json.loads(out[out.index("{"):])  # type: ignore[no-any-return]

    plain, cal = run([]), run(["--calibration", str(overlay_path)])
    tpot = "tpot.mean"
    before = plain["overall"]["metrics"][tpot]["median_abs_error"]  # type: ignore[index]
    after = cal["overall"]["metrics"][tpot]["median_abs_error"]  # type: ignore[index]
    assert before > 0.05 and after < TOLERANCE, (before, after)
    assert cal["calibration"] == str(overlay_path) and plain["calibration"] is None
    text = runner.invoke(cli, [*args[:-1], "--calibration", str(overlay_path)]).stdout
    assert text.splitlines()[0].startswith(f"calibration: {overlay_path}")


def test_validate_calibration_needs_measurements(overlay_path: Path) -> None:
    result = CliRunner().invoke(cli, ["validate", "--calibration", str(overlay_path)])
    assert result.exit_code == 2 and "applies to --measurements" in result.output
