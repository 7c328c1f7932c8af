"""Lessons run on their reduced grid (--quick) and their headline claims hold in the numbers."""

from __future__ import annotations

import io
import itertools
import math
from pathlib import Path

import pytest

from simulator.cli.app import main
from simulator.lessons import LESSONS, run_lesson
from simulator.lessons.physics import compute_crossover_batch, linear_bound_shares, step_model
from simulator.sweep.table import Row, number, read_csv


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[str], Path]]:
    out = {}
    for name, lesson in LESSONS.items():
        folder = tmp_path_factory.mktemp(name)
        out[name] = run_lesson(lesson, folder, quick=True, workers=2, progress=io.StringIO())
    return out


def _rows(page: Path) -> list[Row]:
    _, rows = read_csv(page.parent / "results.csv")
    return [r for r in rows if (number(r, "output_tokens_per_s_per_gpu") or 0) > 0]


def _n(r: Row, column: str) -> float:
    v = number(r, column)
    assert v is not None, column
    return v


def test_lessons_are_listed_in_teaching_order(capsys: pytest.CaptureFixture[str]) -> None:
    main(["lesson"])
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert names == ["batch-size", "tp-vs-dp", "quantization", "speculative",
                     "disaggregation", "jagged", "stack", "traffic", "kernels", "sessions"]


def test_bad_lesson_input_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["lesson", "nope"],
                 ["lesson", "batch-size", "--set", "workload.arrival.concurrency=3"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.count("\n") == 1, err


def test_batch_size_trades_user_speed_for_gpu_throughput(runs: dict) -> None:
    headlines, page = runs["batch-size"]
    rows = sorted(_rows(page), key=lambda r: _n(r, "deployment.scheduler.max_num_seqs"))
    small, large = rows[0], rows[-1]
    assert _n(large, "output_tokens_per_s_per_gpu") > 5 * _n(small, "output_tokens_per_s_per_gpu")
    assert _n(large, "tpot_s.p50") > _n(small, "tpot_s.p50")
    assert (_n(large, "output_tokens_per_s_per_user.p50")
            < _n(small, "output_tokens_per_s_per_user.p50"))
    assert headlines[0].startswith("From batch 1 to 256")


def test_batch_size_reads_the_bound_explain_prints(
        runs: dict, capsys: pytest.CaptureFixture[str]) -> None:
    """Each 'whole decode step ... is bound by X: S%' sentence is what the `frontier explain`
    command it names prints for that batch and context."""
    import re

    headlines, _ = runs["batch-size"]
    claims = [h for h in headlines if h.startswith("The whole decode step")]
    assert claims
    for h in claims:
        m = re.search(r"bound by (.+?): (\d+)% of it, as `frontier (explain [^`]+)`", h)
        assert m, h
        capsys.readouterr()
        main(m.group(3).split())
        out = capsys.readouterr().out
        assert f"This step is bound by {m.group(1)}: {m.group(2)}% of its" in out, (h, out)


def test_crossover_is_the_first_compute_bound_batch() -> None:
    """The batch the lesson names: linear layers compute-bound there and not one below."""
    import yaml

    from simulator.lessons.core import lesson_file

    model = step_model(yaml.safe_load(lesson_file("batch-size").read_text()))
    b = compute_crossover_batch(model)
    assert b is not None and 1 < b < 4096
    c, m = linear_bound_shares(model, b)
    c1, m1 = linear_bound_shares(model, b - 1)
    assert c >= m and c1 < m1
    # A BF16 GEMM of m tokens does 2·m·n·k FLOPs over about 2·n·k weight bytes: intensity ≈ m
    # FLOP/byte, so the linear layers cross below the ridge and not far from it.
    assert b <= model.ridge_flops_per_byte


def test_tp_wins_latency_and_attention_dp_wins_throughput(runs: dict) -> None:
    _, page = runs["tp-vs-dp"]
    rows = _rows(page)
    dp = "deployment.attention_data_parallel"
    load = "workload.arrival.concurrency"
    lo, hi = min(_n(r, load) for r in rows), max(_n(r, load) for r in rows)

    def at(c: float, ranks: int) -> Row:
        return next(r for r in rows if _n(r, load) == c and _n(r, dp) == ranks)

    assert _n(at(lo, 1), "tpot_s.p50") < _n(at(lo, 8), "tpot_s.p50")
    assert (_n(at(hi, 8), "output_tokens_per_s_per_gpu")
            > _n(at(hi, 1), "output_tokens_per_s_per_gpu"))


def test_quantization_fp8_pays_on_both_fp4_only_on_b200(runs: dict) -> None:
    headlines, page = runs["quantization"]
    rows = _rows(page)
    load = "workload.arrival.concurrency"
    lo, hi = min(_n(r, load) for r in rows), max(_n(r, load) for r in rows)

    def at(gpu: str, weights: str, kv: str, c: float) -> Row:
        return next(r for r in rows if r["hardware.gpu"] == gpu and _n(r, load) == c
                    and r["deployment.precision.weights"] == weights
                    and r["deployment.precision.kv_cache"] == kv)

    tps = "output_tokens_per_s_per_gpu"
    for gpu in ("h100-sxm", "b200"):
        # FP8 W8A8 halves the weight bytes and doubles the tensor-core rate: faster everywhere.
        assert _n(at(gpu, "fp8", "bf16", hi), tps) > 1.2 * _n(at(gpu, "bf16", "bf16", hi), tps)
        assert (_n(at(gpu, "fp8", "bf16", lo), "tpot_s.p50")
                < _n(at(gpu, "bf16", "bf16", lo), "tpot_s.p50"))
    # B200 multiplies FP4 natively: more tokens per GPU at high load and a faster prefill.
    gain_b200 = _n(at("b200", "nvfp4", "fp8", hi), tps) / _n(at("b200", "fp8", "fp8", hi), tps)
    assert gain_b200 > 1.15
    assert (_n(at("b200", "nvfp4", "fp8", lo), "ttft_s.p50")
            < 0.9 * _n(at("b200", "fp8", "fp8", lo), "ttft_s.p50"))
    # H100 dequantizes FP4 to FP8: the compute-bound prefill does not speed up, nor (within 5 %)
    # the high-load decode; only the weight stream of a small batch shrinks.
    h100 = _n(at("h100-sxm", "nvfp4", "fp8", hi), tps) / _n(at("h100-sxm", "fp8", "fp8", hi), tps)
    assert h100 < 1.05 and h100 < gain_b200
    assert (_n(at("h100-sxm", "nvfp4", "fp8", lo), "ttft_s.p50")
            >= 0.99 * _n(at("h100-sxm", "fp8", "fp8", lo), "ttft_s.p50"))
    # No sentence claims a gain its own numbers show as a loss: where FP4's low-load TPOT is
    # above FP8's, the page says FP4 is slower there.
    text = " ".join(headlines)
    for gpu in ("h100-sxm", "b200"):
        slower = (_n(at(gpu, "nvfp4", "fp8", lo), "tpot_s.p50")
                  >= _n(at(gpu, "fp8", "fp8", lo), "tpot_s.p50"))
        line = next(h for h in headlines if h.startswith(f"NVFP4 weights against FP8 (FP8 KV "
                                                         f"cache) on {gpu}"))
        assert ("slower" in line) == slower, line
        assert not (slower and "low-load gain" in line), line
    # Quality: the published FP8 figure is quoted, the unpublished ones are called unknown.
    assert "fp8/fp8/bf16 -0." in text and "Unknown for" in text
    assert "unknown" in page.read_text()


def test_speculative_code_beats_chat_and_stops_paying_with_batch(runs: dict) -> None:
    from simulator.lessons.speculative import series, speedup

    headlines, page = runs["speculative"]
    rows = _rows(page)
    load = "workload.arrival.concurrency"
    tau = "speculative.acceptance_length_mean"
    for m in ("eagle3", "dflash", "dspark"):
        chat, code = series(rows, m, "chat"), series(rows, m, "code")
        # Published acceptance is higher on code (HumanEval) than chat (MT-bench), and the
        # engine's measured acceptance follows it, and so does the low-load speed-up.
        assert _n(code[0], tau) > _n(chat[0], tau) > 1.0
        assert speedup(rows, code[0]) > speedup(rows, chat[0]) > 1.0
        # The speed-up falls as the batch grows: the verify pass turns compute-bound.
        ups = [speedup(rows, r) for r in chat]
        assert ups[-1] < ups[0] and all(b <= a * 1.02 for a, b in itertools.pairwise(ups))
    # EAGLE-3 on chat crosses 1, and the roofline crossover the result reports lies between
    # the last load where it pays and the first where it does not.
    chat = series(rows, "eagle3", "chat")
    pays = [_n(r, load) for r in chat if speedup(rows, r) > 1.0]
    loses = [_n(r, load) for r in chat if speedup(rows, r) < 1.0]
    assert pays and loses
    cross = _n(chat[0], "speculative.crossover_batch")
    assert max(pays) < cross <= min(loses)
    # MTP's one draft token: a gain, capped below 2x.
    mtp = series(rows, "mtp", "chat")
    assert 1.0 < speedup(rows, mtp[0]) < 2.0
    assert any(line.startswith("Code is more predictable than chat") for line in headlines)


def test_disaggregation_pays_for_long_prompts_not_short(runs: dict) -> None:
    from simulator.lessons.disaggregation import best_by_layout, derive, good_per_gpu

    headlines, page = runs["disaggregation"]
    rows = [{**r, **derive(r)} for r in _rows(page)]
    by_traffic: dict[str, list[Row]] = {}
    for r in rows:
        by_traffic.setdefault(r["traffic"], []).append(r)
    long_in = by_traffic["3000-5000 in → 200 out"]
    short_in = by_traffic["100-300 in → 400 out"]

    def split_vs_agg(group: list[Row]) -> tuple[str, float, float]:
        best = best_by_layout(group)
        agg = good_per_gpu(best["aggregated ×4"])
        name, split = max(((k, good_per_gpu(r)) for k, r in best.items()
                           if not k.startswith("aggregated")), key=lambda kv: kv[1])
        return name, split, agg

    # Long prompts under a 15 ms TPOT p99: a split carries more good requests per GPU, and at
    # the aggregated best's load it keeps TPOT p99 no worse.
    name, split, agg = split_vs_agg(long_in)
    assert split > 1.2 * agg and name == "2P2D"
    agg_best = best_by_layout(long_in)["aggregated ×4"]
    load = _n(agg_best, "workload.arrival.concurrency")
    same = next(r for r in long_in if r["layout"] == name
                and _n(r, "workload.arrival.concurrency") == load)
    assert _n(same, "tpot_s.p99") <= _n(agg_best, "tpot_s.p99")
    # Short prompts: the aggregated replicas win, and the best split is decode-heavy.
    name, split, agg = split_vs_agg(short_in)
    assert agg > split and name == "1P3D"
    assert "does not pay" in " ".join(headlines)


def test_jagged_finds_the_kv_cliff(runs: dict) -> None:
    """The largest TTFT jump sits where the KV cache stops holding every running request:
    preemptions start there, or (one point on) the requests it cannot hold queue. Each step
    here carries two 4000-token prompts (~0.57 s), and the one-step scheduling lookahead adds
    one such step to every TTFT, which flattens the first jump next to the second. The cliff's
    jump is over 1.5x (57 requests fit on two H100s as CUDA reports their memory: the jump
    from 64 to 72 users is 1.8x); before it, a step of 8 users moves TTFT by less than half
    the cliff's jump (in log terms). Not flat: identical requests in a closed loop run in
    cohorts, and vLLM's 19 ms request latency shifts their phase, so the median moves by up
    to 24 % between neighbouring loads (2.37, 2.94, 2.96, 2.97, 2.39, 2.40 s)."""
    headlines, page = runs["jagged"]
    assert headlines[0].startswith("The largest jump")
    assert "preemptions rise" in headlines[1] or "queue wait grows" in headlines[1]
    rows = sorted(_rows(page), key=lambda r: _n(r, "workload.arrival.concurrency"))
    ttft = [_n(r, "ttft_s.p50") for r in rows]
    jumps = [b / a for a, b in itertools.pairwise(ttft)]
    assert max(jumps) > 1.5
    i = jumps.index(max(jumps))
    assert all(math.log(j) < 0.5 * math.log(max(jumps)) for j in jumps[:i - 1])
    assert _n(rows[i + 1], "preemptions") > 0  # past the KV cliff


def test_jagged_names_the_kv_arithmetic_and_prints_plain_numbers(runs: dict) -> None:
    """The cause is the cache: capacity tokens / (request tokens rounded up to 16-token
    blocks) requests fit, computed here from the run's own columns; no figure is printed in
    exponent form, and a step that did not change is not called the part that changed."""
    import re

    headlines, page = runs["jagged"]
    row = _rows(page)[0]
    cap, seq = _n(row, "kv_capacity_tokens"), _n(row, "kv_chain.mean_sequence_tokens")
    per = math.ceil(seq / 16) * 16
    fits = int(cap // per)
    assert fits == _n(row, "kv_chain.max_batch_that_fits")
    text = " ".join(headlines)
    assert f"= {fits} requests fit" in text and f"{per // 16} blocks of 16" in text
    assert not re.search(r"\d[eE][+-]\d", text), text
    assert not re.search(r"\(([\d.]+) → \1 ms of ([\d.]+) → \2 ms\)", text), text


def test_kernels_switches_move_the_step_by_their_figures(runs: dict) -> None:
    """Mixtral-8x7B (32 layers, 2 of 8 experts a token) on 2 x H100 at one request in flight,
    from the engine styles' figures (engines/engine_styles.yaml) and the step model:
    - unfused experts, eager: every expert's weights are read, and the GPU's own step (tested
      in tests/test_moe_kernel.py: 4x the fused expert bytes) is above the 12.0 ms eager
      floor, so TPOT = GPU step + the serial host's 1.0 ms + 8 us = 1.008 ms;
    - fused MoE, eager (vLLM PR #1440: 375 us a layer): each step waits at least 32 x 375 us
      = 12.0 ms, above the GPU's own ~6.4 ms: TPOT = 12.0 + 1.008 ms;
    - CUDA graphs, serial host: TPOT = GPU + 1.008 ms (FlashAttention-2 or -3: prefill only);
    - overlapped host (async scheduling): TPOT = max(GPU, 1.008 ms) = GPU,
    so the last two differ by the host's 1.008 ms. At 128 in flight the GPU step is above the
    floor and each request streams at the same speed with or without graphs."""
    import yaml

    from simulator.cost import BatchShape
    from simulator.lessons.core import lesson_file
    from simulator.lessons.kernels import STAGE, derive

    _, page = runs["kernels"]
    rows = [{**r, **derive(r)} for r in _rows(page)]
    at = {(r[STAGE], _n(r, "workload.arrival.concurrency")): r for r in rows}
    unfused, eager, graphs, serial, overlap = (
        "unfused experts, eager launch, FlashAttention-2, serial host",
        "fused MoE, eager launch, FlashAttention-2, serial host",
        "fused MoE, CUDA graphs, FlashAttention-2, serial host",
        "fused MoE, CUDA graphs, FlashAttention-3, serial host",
        "fused MoE, CUDA graphs, FlashAttention-3, overlapped host")
    gpu_unfused = step_model(yaml.safe_load(lesson_file("kernels").read_text()),
                             moe_kernel="unfused").cost(
        BatchShape(decode_seqs=1, decode_context_tokens=1000)).step_time_s
    assert gpu_unfused > 12.0e-3
    assert _n(at[(unfused, 1)], "tpot_s.p50") == pytest.approx(gpu_unfused + 1.008e-3,
                                                               rel=0.02)
    assert _n(at[(eager, 1)], "tpot_s.p50") == pytest.approx(12.0e-3 + 1.008e-3, rel=0.01)
    gap = _n(at[(serial, 1)], "tpot_s.p50") - _n(at[(overlap, 1)], "tpot_s.p50")
    assert gap == pytest.approx(1.008e-3, rel=0.05)
    heavy = max(_n(r, "workload.arrival.concurrency") for r in rows)
    assert _n(at[(eager, heavy)], "tpot_s.p50") == pytest.approx(
        _n(at[(graphs, heavy)], "tpot_s.p50"), rel=0.02)


def test_eager_without_a_published_figure_is_refused(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """TensorRT-LLM's eager launch cost is unknown: one line, exit 2, not a graph-speed run."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "schema_version: 1\nmodel: llama-3.1-8b\nhardware: {gpu: h100-sxm}\n"
        "deployment: {engine: trtllm, cuda_graphs: false}\n"
        "workload: {arrival: {kind: closed_loop, concurrency: 1}, num_requests: 4,\n"
        "  input_tokens: {kind: fixed, value: 64}, output_tokens: {kind: fixed, value: 8}}\n")
    with pytest.raises(SystemExit) as exc:
        main(["simulate", str(scenario)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1, err
    assert "cuda_graphs" in err and "trtllm" in err, err


def test_stack_factors_are_read_off_each_frontier(runs: dict) -> None:
    """The per-user speed each stage gives at half the baseline's best tokens/s per GPU is the
    stage's own frontier there (recomputed from results.csv), each step's factor is the ratio
    of two of them and the compound factor their running product; a stage serving fewer
    tokens/s per GPU than the one before at the heaviest load is said not to multiply."""
    import re

    from simulator.lessons.stack import GPU, LOAD, STAGE, USER, derive
    from simulator.sweep.frontier import speed_at_throughput

    headlines, page = runs["stack"]
    rows = [{**r, **derive(r)} for r in _rows(page)]
    names = list(dict.fromkeys(str(r[STAGE]) for r in rows))
    assert len(names) == 5, names
    base = [r for r in rows if r[STAGE] == names[0]]
    target = max(_n(r, GPU) for r in base) / 2
    line = next(h for h in headlines if h.startswith(f"At {target:.0f} output tokens/s per GPU"))
    speeds = []
    for name in names:
        pts = [(_n(r, USER), _n(r, GPU)) for r in rows if r[STAGE] == name]
        v = speed_at_throughput(pts, target)
        assert v is not None
        speeds.append(v)
        # ≥: every point of the stage carries more than the mark (read at its lightest load)
        assert (f"{name}: {v:.0f} tokens/s" in line or f"{name}: ≥{v:.0f} tokens/s" in line), (
            name, line)
    for i, name in enumerate(names[1:], 1):
        assert f"{name} ×{speeds[i] / speeds[i - 1]:.2f} (×{speeds[i] / speeds[0]:.2f} in all)" \
            in line, name
    heavy = max(_n(r, LOAD) for r in rows)
    light = min(_n(r, LOAD) for r in rows)
    at = {str(r[STAGE]): r for r in rows if _n(r, LOAD) == heavy}
    low = {str(r[STAGE]): r for r in rows if _n(r, LOAD) == light}
    for prev, cur in itertools.pairwise(names):
        worse = (_n(at[cur], GPU) < _n(at[prev], GPU)
                 or _n(low[cur], GPU) < _n(low[prev], GPU))
        said = any(h.startswith(f"{cur} does not multiply throughput") for h in headlines)
        assert said == worse, cur
    assert not any(re.search(r"\d[eE][+-]\d", h) for h in headlines)


def test_traffic_winners_are_read_off_the_rows(runs: dict) -> None:
    """Each (traffic, SLO tier) sentence names the point that meets the tier with the most
    output tokens/s per GPU among that traffic's rows (recomputed here from results.csv), and
    the page says the winner changes exactly when the winning layouts differ."""
    from simulator.lessons.core import lesson_spec
    from simulator.lessons.traffic import LAYOUT, TRAFFIC, derive, tiers, winner

    headlines, page = runs["traffic"]
    rows = [{**r, **derive(r)} for r in _rows(page)]
    spec = lesson_spec(LESSONS["traffic"], (), quick=True)
    layouts = set()
    traffics = sorted({str(r[TRAFFIC]) for r in rows})
    assert len(traffics) == 4, traffics
    for traffic in traffics:
        line = next(h for h in headlines if h.startswith(traffic.capitalize() + " — "))
        for tier in tiers(spec):
            w = winner([r for r in rows if r[TRAFFIC] == traffic], tier)
            if w is None:
                assert f"{tier.describe()}: no point meets it" in line
                continue
            layouts.add(w[LAYOUT])
            assert (f"{tier.describe()}: {w[LAYOUT]} at {_n(w, 'workload.arrival.concurrency'):.0f}"
                    f" in flight, {_n(w, 'output_tokens_per_s_per_gpu'):.0f} output") in line
    changes = any(h.startswith("The winner changes") for h in headlines)
    assert changes == (len(layouts) > 1), layouts


def test_sessions_cache_and_routing_find_more_and_hold_more(runs: dict) -> None:
    """At every load the prefix cache finds part of the prompts and cache-aware routing more
    (no cache: none); the stages are told apart from their swept keys (derive), and the
    tier sentence names, per stage, the highest load meeting the SLO."""
    from simulator.lessons.core import lesson_spec
    from simulator.lessons.sessions import LOAD, STAGE, STAGES, derive
    from simulator.lessons.traffic import tiers

    headlines, page = runs["sessions"]
    rows = [{**r, **derive(r)} for r in _rows(page)]
    assert {r[STAGE] for r in rows} == set(STAGES)
    hit = {(r[STAGE], _n(r, LOAD)): _n(r, "prefix_cache.token_hit_rate") for r in rows}
    for load in {_n(r, LOAD) for r in rows}:
        assert hit[("no cache", load)] == 0.0
        assert 0 < hit[("prefix cache", load)] < hit[("+ cache-aware routing", load)]
    tier = tiers(lesson_spec(LESSONS["sessions"], (), quick=True))[0]
    for stage in STAGES:
        ok = [r for r in rows if r[STAGE] == stage and tier.meets(r)]
        if not ok:
            assert f"{stage}: none of the loads swept" in headlines[0]
        else:
            best = max(ok, key=lambda r: _n(r, LOAD))
            assert f"({_n(best, LOAD):g} starting per second" in headlines[0].split(stage)[1]


def test_every_page_opens_with_what_ran(runs: dict) -> None:
    """Model, GPU, formats, workload, SLO, what was swept and the command, first on the page;
    the rerun suggestion writes to a new folder, never over the page being read."""
    for name, (_, page) in runs.items():
        text = page.read_text()
        first = text.index("What ran")
        assert first < text.index("What this run shows"), name
        for needle in ("Model ", "Workload: ", "SLO: ", "Swept: ", f"frontier lesson {name}"):
            assert needle in text[first:text.index("What this run shows")], (name, needle)
        assert f"--out {page.parent} " not in text, name


def test_every_printed_number_comes_from_the_page_data(runs: dict) -> None:
    """Each number of each lesson's sentences is a value of a row the page quotes (in the unit
    the sentence prints), a figure the analysis computed (numbers.json, shown on the page), a
    factor or percent between two of them, or arithmetic on two numbers of its own sentence
    (simulator/lessons/numbers.py). The rows are re-read from results.csv, not taken from the
    analysis. Perturbing each printed number of the shipped pages by 13-31 % is caught for
    about 40 % of them (the rest land on another value of the page: a swept load, a shared
    figure), so this catches invented and misread numbers, not every slip."""
    import json

    from simulator.lessons.numbers import PageData, unexplained

    for name, (headlines, page) in runs.items():
        record = json.loads((page.parent / "numbers.json").read_text())
        _, rows = read_csv(page.parent / "results.csv")
        quoted = set(record["cited_point_ids"])
        data = PageData([r for r in rows if r.get("point_id") in quoted],
                        record["figures"].values())
        assert quoted, name
        assert unexplained(headlines, data) == [], name


def test_lesson_reruns_write_a_new_folder(tmp_path: Path) -> None:
    from simulator.cli.lesson import _fresh_folder

    base = tmp_path / "out" / "lesson-jagged"
    assert _fresh_folder(base) == base
    base.mkdir(parents=True)
    (base / "report.html").write_text("read me")
    assert _fresh_folder(base) == base.with_name("lesson-jagged-2")


def test_lesson_pages_in_a_real_browser(runs: dict) -> None:
    """Each page: the frontier, its split by the lesson's key (once per facet) and the
    breakdown drawn, plus the lesson's own figures (speed-up; goodput per traffic mix)."""
    from test_report import check_in_browser

    plots = {"quantization": 4, "speculative": 5, "disaggregation": 6, "jagged": 4,
             "traffic": 6}
    check_in_browser([(path, plots.get(name, 3)) for name, (_, path) in runs.items()],
                     visible=("What ran", "Model "), axis_titles=True)


def test_traffic_summary_says_what_the_winner_changes_with() -> None:
    """Winners that differ only across traffics are said to change with the traffic, not
    the SLO tier; a pair no point meets is named, and 'one layout wins' is never said then
    as if every pair had a winner."""
    from simulator.lessons.traffic import LAYOUT, _summary

    def w(layout: str) -> dict[str, str]:
        return {LAYOUT: layout}

    won = {("chat", "a"): w("TP8"), ("chat", "b"): w("TP8"),
           ("code", "a"): w("TP4"), ("code", "b"): w("TP4")}
    [line] = _summary(won, ["chat", "code"], ["a", "b"], "8")
    assert line.startswith("The winner changes with the traffic (")
    lines = _summary({("chat", "a"): w("TP8")}, ["chat"], ["a", "b"], "8")
    assert lines[0].startswith("Here one layout, TP8, wins every pair that has a winner")
    assert lines[1].startswith("No point meets the tier for chat b")


def test_stack_calls_a_step_held_only_when_it_gains_at_both_ends() -> None:
    from simulator.lessons.stack import GPU, LOAD, USER, _where_it_does_not_multiply

    def row(load: float, gpu: float) -> dict[str, float]:
        return {LOAD: load, GPU: gpu, USER: 10.0}

    stages = {"A": [row(4, 100), row(64, 300)], "B": [row(4, 60), row(64, 400)]}
    [line] = _where_it_does_not_multiply(stages, ["A", "B"])
    assert line.startswith("B does not multiply throughput everywhere: at 4 in flight")
