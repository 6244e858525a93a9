"""SideCar's accuracy-target prediction (004 digest §3.3): NNLS fitting of the accuracy curve,
the crossing of the target, and its use by the ``sidecar`` policy for Workload Four."""

from __future__ import annotations

import itertools

import pytest

from gpuplan.api import prepare, run
from gpuplan.executors.metrics import summarize
from gpuplan.models import ActiveJob, JobSpec
from gpuplan.solver_core.policies.sidecar.sidecar_accuracy import (
    AccuracyCurve,
    AccuracyTarget,
    _fit_at,
    fit_accuracy,
    true_curve,
)

TABLE_V = [(1, 0.008), (5, 0.019), (10, 0.025), (20, 0.032)]


def _job(work: float) -> ActiveJob:
    return ActiveJob(
        spec=JobSpec(
            id="j",
            submit_time=0.0,
            requested_gpus=1,
            total_iterations=work,
            throughput={"points": {1: 1.0}},
        )
    )


def test_iterations_to_target_worked_example() -> None:
    # acc(k) = 0.9 - 1/(0.01 k + 1): 0.8 needs 0.01 k + 1 = 1/0.1 = 10, so k = 900.
    curve = AccuracyCurve(0.01, 1.0, 0.9)
    assert curve.iterations_to(0.8) == pytest.approx(900.0)
    assert curve.at(900.0) == pytest.approx(0.8)
    assert curve.iterations_to(0.9) is None  # the asymptote is never reached
    assert curve.iterations_to(-0.5) == 0.0  # already there at k = 0 (acc(0) = -0.1)
    assert AccuracyCurve(0.0, 1.0, 0.9).iterations_to(0.8) is None  # flat


def test_true_curve_hits_the_target_at_the_work() -> None:
    truth = true_curve(20_000.0, 0.9, 0.05)
    assert truth.at(0.0) == pytest.approx(0.0, abs=1e-12)
    assert truth.at(20_000.0) == pytest.approx(0.9)
    assert truth.iterations_to(0.9) == pytest.approx(20_000.0)


def test_fit_recovers_an_exact_curve_and_its_crossing() -> None:
    truth = AccuracyCurve(0.002, 1.25, 0.93)
    points = [(k, truth.at(k)) for k in (50.0, 200.0, 500.0, 1500.0, 3000.0)]
    fit = fit_accuracy(points)
    assert fit.b2 == pytest.approx(0.93, abs=1e-6)
    assert fit.b0 == pytest.approx(0.002, rel=1e-4)
    assert fit.b1 == pytest.approx(1.25, rel=1e-4)
    assert fit.iterations_to(0.9) == pytest.approx(truth.iterations_to(0.9), rel=1e-4)


def test_fit_of_table_v_is_a_local_optimum_vs_a_parameter_grid() -> None:
    """The paper's profile points: the fit stays within bounds, is close to every point, and
    no nearby (b0, b1, b2) on a grid fits better."""
    fit = fit_accuracy(TABLE_V)
    assert fit.b0 >= 0 and fit.b1 >= 0 and max(a for _, a in TABLE_V) < fit.b2 <= 1.0
    assert all(abs(fit.at(k) - a) < 1e-3 for k, a in TABLE_V)

    def err(c: AccuracyCurve) -> float:
        return sum((c.at(k) - a) ** 2 for k, a in TABLE_V)

    steps = (0.97, 0.99, 1.0, 1.01, 1.03)
    for f0, f1, f2 in itertools.product(steps, steps, steps):
        other = AccuracyCurve(fit.b0 * f0, fit.b1 * f1, fit.b2 * f2)
        if other.b2 > max(a for _, a in TABLE_V):
            assert err(fit) <= err(other) + 1e-15


def test_nnls_step_matches_brute_force_at_fixed_asymptote() -> None:
    """At a fixed b2 the linearised problem is convex: NNLS's (b0, b1) must beat a grid."""
    import numpy as np

    ks = np.array([float(k) for k, _ in TABLE_V])
    acc = np.array([a for _, a in TABLE_V])
    b2 = 0.05
    curve, _ = _fit_at(ks, acc, b2)
    y = 1.0 / (b2 - acc)

    def lin_err(b0: float, b1: float) -> float:
        return float(np.sum((b0 * ks + b1 - y) ** 2))

    best = min(lin_err(b0, b1) for b0 in np.linspace(0, 2, 201) for b1 in np.linspace(0, 60, 301))
    assert lin_err(curve.b0, curve.b1) <= best + 1e-9


def test_predicted_total_is_deterministic_noisy_and_falls_back() -> None:
    job = _job(20_000.0)
    model = AccuracyTarget(noise=0.005, seed=3)
    first = model.total(job, 5_000.0)
    assert first == model.total(job, 5_000.0)
    assert first != AccuracyTarget(noise=0.005, seed=4).total(job, 5_000.0)
    assert first != pytest.approx(20_000.0, rel=1e-3)  # the noise makes it a prediction
    assert AccuracyTarget(noise=0.0).total(job, 5_000.0) == pytest.approx(20_000.0, rel=1e-5)
    assert model.remaining(job, 0.0) == model.total(job, 0.0)

    class Flat(AccuracyTarget):
        def observed(self, job: ActiveJob, done: float) -> list[tuple[float, float]]:
            return [(100.0, 0.5), (200.0, 0.5), (400.0, 0.5)]

    # A curve that never reaches 0.9: believed far from done (twice the work done so far).
    assert Flat().total(job, 3_000.0) == pytest.approx(6_000.0)


def test_wl4_without_noise_is_sidecar_and_with_noise_still_beats_default() -> None:
    prepared = prepare("sidecar-wl4")
    exact = summarize(run(prepared, "sidecar"))
    zero = summarize(run(prepared, "sidecar(accuracy_noise=0.0)"))
    for field in ("makespan_s", "avg_jct_s", "resizes", "finished"):
        assert getattr(zero, field) == pytest.approx(getattr(exact, field), rel=1e-6), field
    noisy = summarize(run(prepared, "sidecar-accuracy"))
    default = summarize(run(prepared, "k8s-default"))
    assert noisy.finished == default.finished == 40
    assert noisy.makespan_s is not None and default.makespan_s is not None
    assert noisy.makespan_s < 0.8 * default.makespan_s
    assert noisy.avg_jct_s is not None and default.avg_jct_s is not None
    assert noisy.avg_jct_s < 0.6 * default.avg_jct_s
    assert (noisy.makespan_s, noisy.avg_jct_s) != (exact.makespan_s, exact.avg_jct_s)


def test_schemes_equal_to_a_millionth_keep_the_first_found() -> None:
    from gpuplan.solver_core.policies.sidecar.sidecar import _better

    assert _better((1000.0, 5000.0), None)
    assert _better((1000.0 + 1e-4, 4000.0), (1000.0, 5000.0))  # makespans tie: sums decide
    assert not _better((1000.0 - 1e-4, 6000.0), (1000.0, 5000.0))
    assert not _better((1000.0, 5000.0 - 1e-3), (1000.0, 5000.0))  # a 1e-3 s "gain" is a tie
    assert _better((999.0, 9e9), (1000.0, 0.0))
    assert not _better((1001.0, 0.0), (1000.0, 9e9))
