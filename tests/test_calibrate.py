"""`frontier calibrate` end to end on synthetic truth: a silicon CSV whose figures the estimate
itself produced with vLLM's host step cost at 3x the shipped value; the fit must recover it,
the overlay must say what it was fitted to, and `--calibration` must apply it."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from simulator.cli.app import cli
from simulator.measured.silicon import read_silicon

HEADER = (  # noqa: SIM905
    "id,backend,backend_version,model,gpu,precision,gemm_quant_mode,moe_quant_mode,mode,"
          "isl,osl,concurrency,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,"
          "moe_ep_size,prefill_batch_size,decode_batch_size,prefill_tp_size,prefill_pp_size,"
          "prefill_attention_dp_size,prefill_moe_tp_size,prefill_moe_ep_size,"
          "prefill_num_workers,decode_tp_size,decode_pp_size,decode_attention_dp_size,"
          "decode_moe_tp_size,decode_moe_ep_size,decode_num_workers,ttft_ms,tpot_ms,measured,"
          "source").split(",")
TRUE_STEP_US = 3000.0  # shipped vllm cpu_step_us is 1000
TRUE_LATENCY_US = 80_000.0  # shipped vllm request_latency_us is unset (the fit starts at 10 ms)
TOLERANCE = 0.05  # the fit recovers it within 5 %


def _row(i: int, model: str, tp: int, conc: int, isl: int, osl: int) -> dict[str, str]:
    row = dict.fromkeys(HEADER, "")
    row.update(id=f"r{i}", backend="vllm", backend_version="0.15.1", model=model,
               gpu="h100-sxm", precision="bf16", mode="agg", isl=str(isl), osl=str(osl),
               concurrency=str(conc), batch_size=str(conc), tp_size=str(tp), pp_size="1",
               attention_dp_size="1", moe_tp_size=str(tp), moe_ep_size="1",
               # placeholders until truth_file writes the figures; distinct, so no two rows
               # read as one measurement listed under two layouts (silicon.py)
               ttft_ms=str(i + 1), tpot_ms=str(i + 1), measured="2026-01-01",
               source="synthetic")
    return row


def _write(path: Path, rows: list[dict[str, str]]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, HEADER)
        w.writeheader()
        w.writerows(rows)


@pytest.fixture(scope="module")
def truth_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six configurations x three concurrencies, figures from the estimate at the truth."""
    folder = tmp_path_factory.mktemp("cal")
    rows, i = [], 0
    # Tensor-parallel 8B models: a decode step's GPU part under the shipped 1 ms host step,
    # so the host cost shows in TPOT (with the host overlapped, a GPU-bound run cannot tell).
    for model, tp in (("llama-3.1-8b", 8), ("qwen3-8b", 8), ("llama-3.1-8b", 4),
                      ("qwen3-8b", 4), ("llama-3.1-8b", 2), ("qwen3-8b", 2)):
        for conc in (1, 4, 16):
            rows.append(_row(i, model, tp, conc, 512, 128))
            i += 1
    return truth_file(folder, rows, {"vllm.cpu_step_us": TRUE_STEP_US,
                                     "vllm.request_latency_us": TRUE_LATENCY_US})


def truth_file(folder: Path, rows: list[dict[str, str]], truth: dict[str, float],
               fit: tuple[str, ...] = ("host",), shipped: dict[str, float] | None = None
               ) -> Path:
    """folder/truth.csv: the rows with the figures the fit's own predictor gives at the
    priors with `truth`'s parameters set (and `shipped`'s priors checked first)."""
    from simulator.measured.calibrate_runs import build_problem
    from simulator.measured.scenario import map_run

    draft = folder / "draft.csv"
    _write(draft, rows)
    problem = build_problem([map_run(r, None) for r in read_silicon(draft)], None, fit)
    assert len(problem.used) == len(rows)
    values = {p.name: p.prior for p in problem.params}
    for name, prior in (shipped or {}).items():
        assert values[name] == prior
    values.update(truth)
    for r, row in enumerate(rows):
        ttft, tpot = problem.runs.prediction(r, values)
        row["ttft_ms"], row["tpot_ms"] = repr(ttft * 1e3), repr(tpot * 1e3)
    path = folder / "truth.csv"
    _write(path, rows)
    return path


def fit_one_kind(folder: Path, rows: list[dict[str, str]], param: str, true_value: float,
                 kind: str, shipped: float) -> Path:
    """folder/cal.yaml: `frontier calibrate --fit KIND` (2 folds, one worker, no confirmation)
    on figures the estimate gives with `param` at `true_value` (its prior checked to be the
    shipped value first)."""
    truth = truth_file(folder, rows, {param: true_value}, (kind,), {param: shipped})
    out = folder / "cal.yaml"
    res = CliRunner().invoke(cli, ["calibrate", str(truth), "--out", str(out), "--folds", "2",
                                   "--fit", kind, "--workers", "1", "--confirm", "0"])
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture(scope="module")
def overlay_path(truth_csv: Path) -> Path:
    out = truth_csv.parent / "cal.yaml"
    res = CliRunner().invoke(cli, ["calibrate", str(truth_csv), "--out", str(out),
                                   "--folds", "3"])
    assert res.exit_code == 0, res.output
    assert "held-out errors" in res.output and "overall" in res.output
    # The third target: config pairs (within a model, GPU, engine, mode and lengths) ordered
    # as measured, on the held-out predictions.
    assert "config pairs ordered as measured (held out)" in res.output
    return out


def test_fit_recovers_truth(overlay_path: Path, truth_csv: Path) -> None:
    data = yaml.safe_load(overlay_path.read_text())
    values = {v["target"]["key"]: v for v in data["values"]
              if v["target"]["name"] == "vllm"}
    step = values["cpu_step_us"]
    assert abs(step["value"] / TRUE_STEP_US - 1) < TOLERANCE
    assert step["prior"] == 1000
    assert step["fitted_to"]["rows"] > 0
    # The request latency (TTFT alone sees it) is recovered beside the host step (TPOT).
    assert abs(values["request_latency_us"]["value"] / TRUE_LATENCY_US - 1) < TOLERANCE
    assert step["fitted_to"]["files"] == [str(truth_csv)]
    assert step["fitted_to"]["engine_versions"] == {"vllm": "0.15.1"}
    assert data["header"]["files"][0]["rows"] == 18


def _scenario(tmp: Path) -> Path:
    path = tmp / "s.yaml"
    path.write_text(yaml.safe_dump({
        "name": "s", "model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
        "deployment": {"engine": "vllm", "tensor_parallel": 8},
        "workload": {"arrival": {"kind": "closed_loop", "concurrency": 1},
                     "input_tokens": {"kind": "fixed", "value": 256},
                     "output_tokens": {"kind": "fixed", "value": 32}, "num_requests": 8},
    }))
    return path


def test_calibration_flag_changes_prediction(overlay_path: Path, tmp_path: Path) -> None:
    """--calibration moves the prediction and says so first; without it nothing changes."""
    scen = str(_scenario(tmp_path))
    runner = CliRunner()
    for cmd in ("simulate", "estimate"):
        plain = runner.invoke(cli, [cmd, scen])
        again = runner.invoke(cli, [cmd, scen])
        cal = runner.invoke(cli, [cmd, scen, "--calibration", str(overlay_path)])
        assert plain.exit_code == cal.exit_code == 0, cal.output
        assert plain.output == again.output
        assert not plain.output.startswith("calibration:")
        assert cal.output.splitlines()[0].startswith(f"calibration: {overlay_path}")
        assert cal.output.splitlines()[1:] != plain.output.splitlines()
        js = runner.invoke(cli, [cmd, scen, "--json", "--calibration", str(overlay_path)])
        assert js.exit_code == 0 and '"calibration": ' in js.output


def _fails(args: list[str]) -> str:
    from simulator.cli.app import main

    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    return ""


def test_bad_inputs_exit_2(tmp_path: Path, truth_csv: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
    bad_overlay = tmp_path / "bad.yaml"
    bad_overlay.write_text("header: [1\n")
    scen = str(_scenario(tmp_path))
    for args in (["calibrate", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "o")],
                 ["calibrate", str(truth_csv), "--out", str(tmp_path / "no" / "o.yaml")],
                 ["simulate", scen, "--calibration", str(bad_overlay)],
                 ["estimate", scen, "--calibration", str(tmp_path / "none.yaml")],
                 # fewer than one request in flight: refused before any run is read
                 ["calibrate", str(truth_csv), "--out", str(tmp_path / "o"),
                  "--max-concurrency", "0"]):
        _fails(args)
        err = capsys.readouterr().err.strip()
        assert err.startswith("frontier: ") and "\n" not in err, err
    assert not (tmp_path / "no").exists()
    assert not (tmp_path / "o").exists()


def test_max_concurrency_keeps_the_low_loads(truth_csv: Path, tmp_path: Path) -> None:
    """--max-concurrency 4 keeps the truth file's runs at 1 and 4 in flight: 12 of its 18."""
    out = tmp_path / "low.yaml"
    res = CliRunner().invoke(cli, ["calibrate", str(truth_csv), "--out", str(out), "--folds",
                                   "3", "--max-concurrency", "4", "--confirm", "0"])
    assert res.exit_code == 0, res.output
    assert "runs read 18, used 12," in res.output, res.output


def test_one_configuration_fits_in_sample_and_says_so(tmp_path: Path) -> None:
    """A user's own runs of one deployment (two `vllm bench serve` results at concurrency 4
    and 16 with the scenario beside them) hold one configuration: nothing can be held out, so
    the report says its errors are in-sample instead of refusing."""
    import json

    files = []
    for c in (4, 16):
        n = 20 * c
        data = {"backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B-Instruct",
                "num_prompts": n, "request_rate": "inf", "max_concurrency": c,
                "duration": 30.0, "completed": n, "total_input_tokens": n * 1000,
                "total_output_tokens": n * 200, "request_throughput": 2.0,
                "output_throughput": 400.0, "total_token_throughput": 2400.0}
        for k, v in (("ttft", 30.0 + c), ("tpot", 7.0 + c / 4), ("itl", 7.0), ("e2el", 1500.0)):
            data.update({f"mean_{k}_ms": v, f"median_{k}_ms": v, f"std_{k}_ms": 1.0,
                         f"p99_{k}_ms": 2 * v})
        path = tmp_path / f"c{c}.json"
        path.write_text(json.dumps(data))
        files.append(str(path))
    out = tmp_path / "cal.yaml"
    res = CliRunner().invoke(cli, ["calibrate", *files, "--scenario",
                                   "scenarios/chat-llama-3.1-8b-h100.yaml", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "in-sample errors (the runs are of one configuration" in res.output
    assert out.exists()


def test_the_fit_predicts_what_the_overlay_makes_estimate_predict(truth_csv: Path) -> None:
    """The fit swaps host costs into a cached engine; `--calibration` sets the scenario's
    `deployment.overhead`. Both must give the same prediction, or the overlay would apply
    other values than the ones the fit chose: every run of the truth file, exactly."""
    import copy

    import simulator
    from simulator.measured.calibrate_runs import build_problem
    from simulator.measured.scenario import map_run

    problem = build_problem([map_run(r, None) for r in read_silicon(truth_csv)])
    values = {p.name: p.prior for p in problem.params}
    values["vllm.cpu_step_us"], values["vllm.cpu_per_seq_us"] = 2500.0, 11.0
    values["vllm.request_latency_us"] = 40_000.0
    for r, mapped in enumerate(problem.used):
        scenario = copy.deepcopy(mapped.scenario)
        assert scenario is not None
        scenario["deployment"]["overhead"] = {"step_s": 2500.0 * 1e-6, "per_seq_s": 11.0 * 1e-6,
                                              "request_latency_s": 40_000.0 * 1e-6}
        est = simulator.estimate(simulator.load_scenario(scenario))
        assert problem.runs.prediction(r, values) == (est.ttft_mean_s, est.tpot_p50_s)


def plain_and_calibrated_sweeps(scenario: Path, tps: list[int], overlay: Path, tmp_path: Path
                                ) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """The scenario swept over tensor parallelism into tmp/p, then into tmp/c under
    `--calibration overlay`: (the calibrated sweep's first line, plain rows, calibrated rows)."""
    from simulator.sweep.table import read_csv

    spec = yaml.safe_load(scenario.read_text())
    spec["sweep"] = {"deployment.tensor_parallel": tps}
    sweep_file = tmp_path / "sw.yaml"
    sweep_file.write_text(yaml.safe_dump(spec))
    runner = CliRunner()
    plain = runner.invoke(cli, ["sweep", str(sweep_file), "--out", str(tmp_path / "p"),
                                "--no-report"])
    cal = runner.invoke(cli, ["sweep", str(sweep_file), "--out", str(tmp_path / "c"),
                              "--no-report", "--calibration", str(overlay)])
    assert plain.exit_code == cal.exit_code == 0, cal.output
    _, rows_p = read_csv(tmp_path / "p" / "results.csv")
    _, rows_c = read_csv(tmp_path / "c" / "results.csv")
    return cal.output.splitlines()[0], rows_p, rows_c


def test_sweep_under_a_calibration_runs_the_calibrated_engines(
        overlay_path: Path, tmp_path: Path) -> None:
    """`sweep --calibration` gives every point the overlay's vllm host cost (3000 us a step
    where 1000 ships): each point's scenario file carries it, its mean TPOT is what `simulate
    --calibration` of that point predicts, and the sweep says so first."""
    first, rows_p, rows_c = plain_and_calibrated_sweeps(_scenario(tmp_path), [4, 8],
                                                        overlay_path, tmp_path)
    assert first.startswith(f"calibration: {overlay_path}")
    runner = CliRunner()
    fitted = yaml.safe_load(overlay_path.read_text())
    step_us = next(v["value"] for v in fitted["values"] if v["target"]["name"] == "vllm"
                   and v["target"]["key"] == "cpu_step_us")
    for rp, rc in zip(rows_p, rows_c, strict=True):
        point_file = tmp_path / "c" / "points" / f"{rc['point_id']}.yaml"
        point = yaml.safe_load(point_file.read_text())
        assert point["deployment"]["overhead"]["step_s"] == pytest.approx(step_us * 1e-6)
        assert rc["tpot_s.mean"] > rp["tpot_s.mean"]
        one = runner.invoke(cli, ["simulate", str(tmp_path / "p" / "points" /
                                                  f"{rp['point_id']}.yaml"), "--json",
                                  "--calibration", str(overlay_path)])
        got = json.loads(one.output[one.output.index("{"):])
        assert got["tpot_s"]["mean"] == pytest.approx(rc["tpot_s.mean"], rel=1e-9)


def test_lesson_takes_a_calibration(overlay_path: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["lesson", "batch-size", "--quick", "--out",
                                   str(tmp_path / "l"), "--calibration", str(overlay_path)])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0].startswith(f"calibration: {overlay_path}")


def test_calibrate_confirms_by_simulation(truth_csv: Path, tmp_path: Path) -> None:
    """After the fit (on the closed-form estimate), --confirm N simulates N of the runs used on
    the shipped values and under the overlay and prints both; --confirm 0 skips it."""
    out = tmp_path / "c.yaml"
    res = CliRunner().invoke(cli, ["calibrate", str(truth_csv), "--out", str(out), "--folds",
                                   "3", "--confirm", "4"])
    assert res.exit_code == 0, res.output
    text = res.stdout
    assert "confirmed by simulation on 4 of the runs used (seed 0; in sample" in text
    assert "median |err| before" in text and "tpot.mean" in text.split("confirmed")[1]
    res = CliRunner().invoke(cli, ["calibrate", str(truth_csv), "--out", str(out), "--folds",
                                   "3", "--confirm", "0"])
    assert res.exit_code == 0 and "confirmed by simulation" not in res.stdout
