"""The context-window bound a real engine enforces: prompt + output tokens of one request may not
pass the engine's `max_model_len`, which is the model's `max_position_embeddings` unless the
deployment sets a smaller one.

vLLM refuses, per request, a prompt longer than `max_model_len` and a prompt whose `max_tokens`
would run past it ("This model's maximum context length is ... tokens"); at start-up it refuses
a `max_model_len` above the model's own window. A scenario states its lengths as
distributions, so one whose every request, or a share of requests visible in a benchmark
(above one in a thousand), passes the window describes a load no engine would serve: it is
refused with one line. Rarer tail draws of an unclipped normal or lognormal are dropped per
request (drop reason "exceeds max context length") and counted in the result.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simulator.errors import InputError
from simulator.inputs.scenario import (
    MAX_TOKENS,
    EmpiricalLengths,
    FixedLengths,
    LengthSpec,
    LognormalLengths,
    NormalLengths,
    Scenario,
    TraceArrival,
    UniformLengths,
)
from simulator.model.architecture import Architecture
from simulator.workload.stream import lognormal_params
from simulator.workload.trace_files import csv_column, resolve_path

# Standard normal quantile at 0.999: the "tail" of an unclipped distribution is its p99.9,
# i.e. one request in a thousand may pass it.
Z999 = 3.090232306167813
TAIL = "p99.9 of the unclipped distribution"


def engine_max_model_len(requested: int | None, arch: Architecture, key: str) -> int:
    """The engine's context window: `requested` if set, else the model's; a request above the
    model's own window is refused, as vLLM refuses it at start-up."""
    window = arch.max_position_embeddings
    if requested is None:
        return window
    if requested > window:
        raise InputError(
            f"{key}: max_model_len {requested} exceeds {arch.name}'s context window of {window}"
            f" tokens (max_position_embeddings); use at most {window}"
        )
    return requested


def length_ceiling(spec: LengthSpec, base_dir: Path | None) -> tuple[int, str]:
    """The largest length a spec draws, or for an unclipped normal or lognormal its p99.9; and
    the words that say which (for the message)."""
    if isinstance(spec, FixedLengths):
        return spec.value, "the fixed value"
    if isinstance(spec, UniformLengths):
        return spec.max, "max"
    if spec.max is not None:
        return spec.max, "max"
    if isinstance(spec, EmpiricalLengths):
        if spec.values is not None:
            return max(spec.values), "largest value"
        assert spec.path is not None and spec.column is not None  # the schema says so
        pool = csv_column(resolve_path(spec.path, base_dir), spec.column)
        return int(pool.max()), f"largest value of {spec.path}:{spec.column}"
    if isinstance(spec, NormalLengths):
        return _round_up(spec.mean + Z999 * spec.std), TAIL
    assert isinstance(spec, LognormalLengths)
    mu, sigma = lognormal_params(spec)
    return _round_up(float(np.exp(min(mu + Z999 * sigma, 700.0)))), TAIL


def _round_up(x: float) -> int:
    return int(min(np.ceil(x), MAX_TOKENS))  # the sampler caps draws there too


def check_workload_fits(scenario: Scenario, max_model_len: int, window_text: str,
                        base_dir: Path | None) -> None:
    """Refuse lengths whose prompt, or prompt + output, passes the context window (trace rows
    are checked row by row when the trace is read)."""
    w = scenario.workload
    if isinstance(w.arrival, TraceArrival) or w.input_tokens is None or w.output_tokens is None:
        return
    inp, inp_how = length_ceiling(w.input_tokens, base_dir)
    if inp >= max_model_len:
        raise InputError(
            f"workload.input_tokens: prompts up to {inp} tokens ({inp_how}) leave no room for "
            f"an output token in {window_text} of {max_model_len} tokens; clip them with max: "
            f"{max_model_len - 1} or below"
        )
    out, out_how = length_ceiling(w.output_tokens, base_dir)
    if inp + out > max_model_len:
        raise InputError(
            f"workload.output_tokens: prompt {inp} ({inp_how}) + output {out} ({out_how}) = "
            f"{inp + out} tokens pass {window_text} of {max_model_len} tokens; keep prompt + "
            f"output within it (clip with max)"
        )


def scenario_max_model_len(scenario: Scenario, arch: Architecture) -> tuple[int, str]:
    """The deployment's context window in tokens, and the words that name where it comes from.
    A disaggregated request must fit both pools."""
    best: tuple[int, str] | None = None
    for key, pool in scenario.deployment.engine_types:
        n = engine_max_model_len(pool.max_model_len, arch, f"{key}.max_model_len")
        text = (f"{key}.max_model_len" if pool.max_model_len is not None
                else f"{arch.name}'s context window (max_position_embeddings)")
        if best is None or n < best[0]:
            best = (n, text)
    assert best is not None
    return best
