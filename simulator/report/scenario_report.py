"""The HTML report of one simulation: its time series (batch, queue, KV use, step time) and
latency distributions."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from simulator.report.page import Section, facts_table, render_page
from simulator.report.sweep_figures import BREAKDOWN_PARTS, PALETTE
from simulator.safeio import write_atomic

MAX_POINTS_PER_TRACE = 4000
MAX_REPLICAS_SHOWN = 4


def _stride(n: int) -> int:
    return max(1, -(-n // MAX_POINTS_PER_TRACE))


def timeseries_figure(ts: npt.NDArray[np.float64], columns: Sequence[str]) -> go.Figure:
    """Batch size, queue and KV use per engine step against simulated time, per replica."""
    col = {c: i for i, c in enumerate(columns)}
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=("batch (sequences per step)",
                                        "requests running and waiting",
                                        "KV cache used (fraction of blocks)"))
    replicas = sorted({int(v) for v in ts[:, col["replica"]]})
    for n, rep in enumerate(replicas[:MAX_REPLICAS_SHOWN]):
        sub = ts[ts[:, col["replica"]] == rep]
        sub = sub[:: _stride(len(sub))]
        t = sub[:, col["time_s"]]
        color = PALETTE[n % len(PALETTE)]
        tag = f"replica {rep}"
        series = (
            (1, "batch_seqs", "solid", "batch"),
            (1, "decode_seqs", "dot", "decoding"),
            (2, "running", "solid", "running"),
            (2, "waiting", "dash", "waiting"),
            (3, "kv_used_fraction", "solid", "KV used"),
        )
        for k, (row, name, dash, label) in enumerate(series):
            one = len(replicas) == 1  # one replica: a colour per series, else per replica
            fig.add_trace(go.Scattergl(
                x=t, y=sub[:, col[name]], mode="lines",
                name=label if one else f"{tag}: {label}", legendgroup=tag,
                line={"color": PALETTE[k] if one else color, "dash": "solid" if one else dash,
                      "width": 1},
            ), row=row, col=1)
    fig.update_xaxes(title_text="simulated time (s)", row=3, col=1)
    fig.update_layout(template="plotly_white", height=780,
                      title="Engine state over time" + (
                          f" (first {MAX_REPLICAS_SHOWN} of {len(replicas)} replicas)"
                          if len(replicas) > MAX_REPLICAS_SHOWN else ""))
    return fig


def step_time_figure(ts: npt.NDArray[np.float64], columns: Sequence[str]) -> go.Figure:
    """Total engine time by kind, for decode-only steps and for steps that carry prefill."""
    col = {c: i for i, c in enumerate(columns)}
    has_prefill = ts[:, col["prefill_tokens"]] > 0
    groups = (("steps with prefill", has_prefill), ("decode-only steps", ~has_prefill))
    labels = [f"{name} ({int(mask.sum()):,})" for name, mask in groups]
    fig = go.Figure()
    for n, (name, label) in enumerate(BREAKDOWN_PARTS):
        fig.add_trace(go.Bar(
            y=labels, x=[float(ts[mask, col[name]].sum()) for _, mask in groups], name=label,
            orientation="h", marker={"color": PALETTE[n % len(PALETTE)]},
            hovertemplate=f"{label}: %{{x:.3f}} s<extra></extra>",
        ))
    fig.update_layout(barmode="stack", template="plotly_white", height=320,
                      xaxis_title="engine time summed over steps and replicas (s)",
                      title="Where the engine time goes")
    fig.update_yaxes(automargin=True)
    return fig


def latency_figure(requests: npt.NDArray[Any]) -> go.Figure:
    """Histograms of per-request TTFT and TPOT."""
    done = requests[(requests["drop_reason"] == 0) & np.isfinite(requests["finish_s"])]
    ttft = done["first_token_s"] - done["arrival_s"]
    multi = done["output_tokens"] > 1
    tpot = ((done["finish_s"] - done["first_token_s"])[multi]
            / (done["output_tokens"][multi] - 1))
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT (s)", "TPOT (s)"))
    fig.add_trace(go.Histogram(x=ttft, name="TTFT", marker={"color": PALETTE[0]}), row=1, col=1)
    fig.add_trace(go.Histogram(x=tpot, name="TPOT", marker={"color": PALETTE[1]}), row=1, col=2)
    fig.update_yaxes(title_text="requests", row=1, col=1)
    fig.update_layout(template="plotly_white", height=400, showlegend=False,
                      title="Latency distributions over requests")
    return fig


def _facts(d: dict[str, Any]) -> list[tuple[str, str]]:
    def ms(block: dict[str, Any], key: str) -> str:
        v = block.get(key)
        return "-" if v is None else f"{v * 1e3:.1f} ms"

    rows = [
        ("status", f"{d['status']}: {d['requests_completed']} completed, "
                   f"{d['requests_dropped']} dropped, {d['preemptions']} preemptions"),
        ("simulated", f"{d['duration_s']:.1f} s on {d['num_gpus']} GPU(s)"),
        ("throughput", f"{d['output_tokens_per_s']:.0f} output tok/s "
                       f"({d['output_tokens_per_s_per_gpu']:.0f} per GPU), "
                       f"{d['requests_per_s']:.2f} req/s"),
    ]
    for label, key in (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("ITL", "itl_s"),
                       ("E2E", "e2e_s")):
        b = d[key]
        rows.append((label, f"p50 {ms(b, 'p50')}, p90 {ms(b, 'p90')}, p99 {ms(b, 'p99')}"))
    if d.get("slo_attainment") is not None:
        rows.append(("SLO", f"{d['slo_attainment']:.1%} of requests met every target"))
    if d.get("gpu_busy_fraction") is not None:
        rows.append(("GPU busy", f"{d['gpu_busy_fraction']:.1%} of simulated time"))
    rows.extend(("warning", w) for w in d.get("warnings", []))
    return rows


def write_scenario_report(scenario: str | Path, html_path: Path,
                          overrides: Sequence[str] = (), skip_bad_rows: bool = False) -> Path:
    """Simulate one scenario with its time series and write the report (atomically)."""
    import simulator
    from simulator.serving.simulation import TIMESERIES_COLUMNS

    loaded = simulator.load_scenario(scenario, overrides)
    result = simulator.simulate(loaded, timeseries=True, skip_bad_rows=skip_bad_rows)
    d = result.to_dict()
    sections = [Section("Summary", "", html_body=facts_table(_facts(d)))]
    ts = result.timeseries
    if ts is not None and ts.size:
        sections.append(Section(
            "Batch, queue and KV cache over time",
            "One point per engine step. A growing waiting queue means the load exceeds what "
            "the deployment serves; a KV cache near full precedes preemptions.",
            timeseries_figure(ts, TIMESERIES_COLUMNS),
        ))
        sections.append(Section(
            "Step time by kind",
            "Engine time split into compute-, memory- and communication-bound GPU time, fixed "
            "kernel costs and host time, for steps that carry prefill and for decode-only "
            "steps (their count in brackets).",
            step_time_figure(ts, TIMESERIES_COLUMNS),
        ))
    if d["requests_completed"]:
        sections.append(Section("Latency distributions", "", latency_figure(result.requests)))
    name = loaded.scenario.name or Path(str(scenario)).name
    page = render_page(f"Simulation report: {name}",
                       "Predicted by the frontier simulator; no GPU was used.", sections)
    write_atomic(html_path, page)
    return html_path
