"""The calibration fitting core on synthetic runs whose true parameters are known: the fit
recovers them within the standard error the noise implies, names what the data cannot pin
down, and the grouped k-fold never splits a configuration."""

from __future__ import annotations

import io
import math
import time
from collections.abc import Mapping

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.calibration.crossval import assign_folds, cross_validate
from simulator.calibration.fit import BAD_LOG_ERROR, fit, log_errors
from simulator.calibration.params import (
    FloatArray,
    FreeParameter,
    IntArray,
    Observation,
    ObservationSet,
    Target,
    check_parameters,
)
from simulator.errors import InputError
from simulator.progress import Progress

NOISE = 0.05  # multiplicative (log-normal) measurement noise of the synthetic runs
TRUE_A, TRUE_B = 1.3, 0.02


def _param(name: str, prior: float, key: str | None = None) -> FreeParameter:
    return FreeParameter(name, Target("engine_style", "toy", key or name), prior,
                         prior / 100, prior * 100)


def _linear_runs(n: int, seed: int) -> tuple[ObservationSet, FloatArray]:
    """TPOT = a + b * batch with 5 % noise, 40 configurations of n / 40 batch sizes each."""
    rng = np.random.default_rng(seed)
    batch = rng.integers(1, 257, size=n).astype(np.float64)
    measured = (TRUE_A + TRUE_B * batch) * np.exp(NOISE * rng.standard_normal(n))
    rows = [Observation(float(m), "tpot", f"cfg{i % 40}", ("h100", "vllm" if i % 2 else "sglang"))
            for i, m in enumerate(measured)]
    return ObservationSet.of(rows), batch


def _linear_predictor(batch: FloatArray):  # type: ignore[no-untyped-def]
    def predict(values: Mapping[str, float], idx: IntArray) -> FloatArray:
        return values["a"] + values["b"] * batch[idx]

    return predict


def test_recovers_a_and_b_within_the_noise_and_leaves_an_ignored_parameter_at_its_prior() -> None:
    obs, batch = _linear_runs(2000, seed=7)
    params = [_param("a", 1.0), _param("b", 0.01), _param("c", 5.0)]
    result = fit(params, obs, _linear_predictor(batch))
    # Hand-derived standard errors of ln a, ln b: sigma^2 (J'J)^-1 with the Jacobian of
    # log(a + b x) in (ln a, ln b) at the truth: columns a / (a + b x) and b x / (a + b x).
    pred = TRUE_A + TRUE_B * batch
    jac = np.column_stack([TRUE_A / pred, TRUE_B * batch / pred])
    se_ln = np.sqrt(np.diag(NOISE**2 * np.linalg.inv(jac.T @ jac)))
    a, b, c = result.parameters
    assert a.identified and b.identified
    for p, true, se in ((a, TRUE_A, se_ln[0]), (b, TRUE_B, se_ln[1])):
        assert abs(math.log(p.value / true)) < 4 * se, (p.name, p.value, se)
        assert p.std_error is not None
        assert 0.7 < p.std_error / (true * se) < 1.4  # the reported error matches the derived
    assert not c.identified and c.value == c.prior == 5.0 and c.std_error is None
    assert c.reason is not None and "moves no prediction" in c.reason
    assert result.not_identified() == (c,)
    assert result.median_abs_log_error_after < result.median_abs_log_error_before
    assert result.median_abs_log_error_after < NOISE  # median |N(0, s)| = 0.67 s
    assert a.rows == b.rows == len(obs) and c.rows == 0 and 0 < a.residual < NOISE


def test_collinear_parameters_are_flagged_and_their_product_still_fits() -> None:
    rng = np.random.default_rng(3)
    x = rng.uniform(1, 10, size=500)
    measured = 1.5 * x * np.exp(NOISE * rng.standard_normal(500))
    obs = ObservationSet.of([Observation(float(m), "ttft", f"c{i % 10}") for i, m in
                             enumerate(measured)])

    def predict(values: Mapping[str, float], idx: IntArray) -> FloatArray:
        return values["a"] * values["b"] * x[idx]

    result = fit([_param("a", 1.0), _param("b", 1.0)], obs, predict)
    a, b = result.parameters
    assert a.identified and not b.identified and b.value == 1.0
    assert b.reason is not None and b.reason.startswith("collinear with a")
    assert abs(math.log(a.value * b.value / 1.5)) < 4 * NOISE / math.sqrt(500)


def test_soft_l1_resists_outliers() -> None:
    """10 % of runs 3x slow (a throttled GPU): least squares on logs would move a constant
    by 0.1 ln 3 = 11 %; soft-L1 stays within a few percent."""
    rng = np.random.default_rng(11)
    measured = 2.0 * np.exp(NOISE * rng.standard_normal(1000))
    measured[::10] *= 3.0
    obs = ObservationSet.of([Observation(float(m), "tpot", f"c{i % 20}") for i, m in
                             enumerate(measured)])
    result = fit([_param("a", 1.0)], obs, lambda v, idx: np.full(idx.shape, v["a"]))
    assert abs(result.parameters[0].value / 2.0 - 1) < 0.04


def test_bounds_are_respected() -> None:
    obs, batch = _linear_runs(400, seed=1)
    bounded = FreeParameter("a", ("engine_style", "toy", "a"), 1.0, 0.5, 1.1)  # type: ignore[arg-type]
    result = fit([bounded, _param("b", 0.01)], obs, _linear_predictor(batch))
    a = result.parameters[0]
    assert a.value == pytest.approx(1.1) and a.at_bound
    assert isinstance(bounded.target, Target)  # a plain tuple is taken as a Target


def test_unusable_predictions_cost_a_large_fixed_error() -> None:
    obs = ObservationSet.of([Observation(1.0, "tpot", "c")] * 3)
    pred = np.array([np.nan, -1.0, math.e])
    errs = log_errors(lambda v, idx: pred[idx], {}, obs, np.arange(3))
    assert errs.tolist() == pytest.approx([BAD_LOG_ERROR, BAD_LOG_ERROR, 1.0])


def _six_parameter_runs(n: int) -> tuple[ObservationSet, list[FreeParameter], object]:
    """TPOT and TTFT rows of two engines, a host + GPU style model with six parameters."""
    rng = np.random.default_rng(5)
    batch = rng.integers(1, 257, n).astype(np.float64)
    prompt = rng.integers(128, 8192, n).astype(np.float64)
    is_ttft = np.arange(n) % 2 == 0
    sglang = (np.arange(n) // 2) % 2 == 0

    def model(v: Mapping[str, float], idx: IntArray) -> FloatArray:
        tpot = v["step"] + v["per_seq"] * batch[idx] + v["kv"] * batch[idx] * prompt[idx] * 1e-6
        ttft = v["step"] + v["prefill"] * prompt[idx] * 1e-3 + v["quad"] * prompt[idx] ** 2 * 1e-9
        return np.where(is_ttft[idx], ttft, tpot) * np.where(sglang[idx], v["sglang"], 1.0)

    truth = {"step": 1.0, "per_seq": 0.01, "kv": 0.5, "prefill": 2.0, "quad": 3.0,
             "sglang": 0.9}
    measured = model(truth, np.arange(n)) * np.exp(NOISE * rng.standard_normal(n))
    rows = [Observation(float(m), "ttft" if is_ttft[i] else "tpot", f"cfg{i // 50}",
                        ("h100", "sglang" if sglang[i] else "vllm"))
            for i, m in enumerate(measured)]
    params = [_param(k, v * 1.5) for k, v in truth.items()]
    return ObservationSet.of(rows), params, model


def test_six_parameters_on_thousands_of_rows_fit_in_seconds() -> None:
    obs, params, model = _six_parameter_runs(4000)
    t0 = time.perf_counter()
    result = fit(params, obs, model)  # type: ignore[arg-type]
    elapsed = time.perf_counter() - t0
    assert elapsed < 5.0, elapsed
    assert all(p.identified for p in result.parameters)
    for p in result.parameters:
        assert p.std_error is not None
        assert abs(p.value - p.prior / 1.5) < 5 * p.std_error, (p.name, p.value, p.std_error)


def test_cross_validation_improves_held_out_errors_and_summarises_per_group() -> None:
    obs, params, model = _six_parameter_runs(2000)
    stream = io.StringIO()
    cv = cross_validate(params, obs, model, k=4, seed=2,  # type: ignore[arg-type]
                        progress=Progress(4, stream, every_s=0.0, label="cv", unit="folds"))
    assert stream.getvalue().count("\n") == 4 and "cv: 4/4 folds" in stream.getvalue()
    for f, result in enumerate(cv.fits):
        assert not set(result.indices) & set(np.flatnonzero(cv.folds == f))
    overall = {s.metric: s for s in cv.summaries if s.group is None}
    assert set(overall) == {"tpot", "ttft"}
    for s in overall.values():
        assert s.after.median_abs < 0.06 < s.before.median_abs  # priors 1.5x off
        assert s.before.median_signed > 0.3  # priors predict too slow
    per_group = [s for s in cv.summaries if s.group is not None]
    assert {s.group for s in per_group} == {("h100", "sglang"), ("h100", "vllm")}
    assert sum(s.after.count for s in per_group) == len(obs)


def test_cross_validation_needs_two_configurations_and_caps_k() -> None:
    obs, batch = _linear_runs(120, seed=0)
    params = [_param("a", 1.0), _param("b", 0.01)]
    assert cross_validate(params, obs, _linear_predictor(batch), k=100).k == 40
    one = ObservationSet.of([Observation(1.0, "tpot", "only")] * 5)
    with pytest.raises(InputError, match="at least two configurations"):
        cross_validate(params, one, _linear_predictor(batch))


@settings(max_examples=200, deadline=None)
@given(configs=st.lists(st.text("abcdef", min_size=1, max_size=3), min_size=1, max_size=60),
       k=st.integers(2, 7), seed=st.integers(0, 2**32), shuffle_seed=st.integers(0, 1000))
def test_grouped_folds_never_split_a_configuration(configs: list[str], k: int, seed: int,
                                                   shuffle_seed: int) -> None:
    folds = assign_folds(configs, k, seed)
    fold_of: dict[str, int] = {}
    for c, f in zip(configs, folds, strict=True):
        assert 0 <= f < k
        assert fold_of.setdefault(c, int(f)) == f  # one fold per configuration
    sizes = np.bincount(list(fold_of.values()), minlength=k)
    assert sizes.max() - sizes.min() <= 1  # dealt round-robin
    shuffled = list(np.random.default_rng(shuffle_seed).permutation(configs))
    again = assign_folds(shuffled, k, seed)
    assert all(fold_of[c] == f for c, f in zip(shuffled, again, strict=True))  # row order free


def test_parameter_declarations_are_checked() -> None:
    target = Target("hardware", "h100-sxm", "efficiency.gemm_compute_fraction")
    with pytest.raises(ValueError, match="lower > 0"):
        FreeParameter("g", target, 0.5, 0.0, 1.0)
    with pytest.raises(ValueError, match="outside"):
        FreeParameter("g", target, 2.0, 0.1, 1.0)
    with pytest.raises(ValueError, match="dotted key path"):
        FreeParameter("g", Target("hardware", "h100-sxm", "efficiency..x"), 0.5, 0.1, 1.0)
    with pytest.raises(ValueError, match="share a target"):
        check_parameters([FreeParameter("g", target, 0.5, 0.1, 1.0),
                          FreeParameter("h", target, 0.5, 0.1, 1.0)])
    linear = FreeParameter("z", target, 0.0, -1.0, 1.0, scale="linear")
    assert linear.from_x(linear.to_x(0.25)) == pytest.approx(0.25)
    with pytest.raises(InputError, match="not a finite positive number"):
        ObservationSet.of([Observation(0.0, "tpot", "c")])




def test_a_direction_the_fit_cannot_see_has_no_finite_error() -> None:
    """Hand case: J = [[1, 0], [0, 0], [1, 0]] (the second parameter moves no row at the
    fitted point), cost 1 over 3 rows, 2 parameters: s^2 = 2 x 1 / (3 - 2) = 2, and
    Var(x_0) = s^2 / (1^2 + 1^2) = 1, so x_0's error is 1; x_1's is infinite (unknown), not
    the 0 a pseudo-inverse of J'J would report."""
    from simulator.calibration.fit import _std_errors

    jac = np.array([[1.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    err = _std_errors(jac, cost=1.0, n_rows=3)
    assert err[0] == pytest.approx(1.0)
    assert math.isinf(err[1])
