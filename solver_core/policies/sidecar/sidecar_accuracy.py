"""SideCar's accuracy-target prediction (paper §II.A, §III.C.1; 004 digest §3.3): Optimus'
online fitting of the training curve with non-negative least squares.

Not a policy module (no ``POLICIES``): ``sidecar.py`` uses it when ``accuracy_noise`` is set.

Why: in Workload Four a job runs until its validation accuracy reaches a target, so nobody
knows its epoch count in advance; SideCar predicts it by fitting an accuracy curve to the
points seen so far (starting from the job type's profile, Table V) and asking where the curve
crosses the target. The prediction error is why the paper's WL4 gains are smaller than WL3's.

**Curve and fit.** The paper gives no functional form; Optimus fits loss as ``1/(b0·k + b1) +
b2``, so accuracy is fitted as ``acc(k) = b2 - 1/(b0·k + b1)`` with ``b0, b1 >= 0`` (inferred,
digest §3.3). For a fixed asymptote ``b2`` the curve is linear after a transform:
``1/(b2 - acc) = b0·k + b1``, solved by ``scipy.optimize.nnls``; ``b2`` itself is found by a
bounded one-dimensional search between the best accuracy seen and ``ceiling``, minimising the
squared error in accuracy space. Deterministic: no random start, no iteration limit that
depends on time.

**What the simulator pretends to observe (inferred; the paper publishes no curves).** Each job
has a true curve of this form with ``acc(0) = 0`` and asymptote ``target + margin`` that reaches
``target`` exactly at its true work (so the run itself is unchanged: the executor still runs
the true work). The policy sees, at every decision, noisy points of that curve: the type
profile (1, 2, 5 and 10 % of the work, as in Table V's few early iterations) plus ``points``
evenly spaced measurements up to the iterations done; noise is Gaussian with std
``noise``, seeded per (seed, job, point), so the same run always sees the same points.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar, nnls

from gpuplan.models import ActiveJob

PROFILE_FRACTIONS = (0.01, 0.02, 0.05, 0.10)
"""Where the type profile (Table V) samples the curve, as fractions of the job's work."""


@dataclass(frozen=True, slots=True)
class AccuracyCurve:
    """``acc(k) = b2 - 1/(b0·k + b1)``."""

    b0: float
    b1: float
    b2: float

    def at(self, k: float) -> float:
        den = self.b0 * k + self.b1
        return -math.inf if den <= 0 else self.b2 - 1.0 / den

    def iterations_to(self, target: float) -> float | None:
        """Smallest ``k >= 0`` with ``acc(k) >= target``; None when the curve never gets
        there (asymptote at or below the target, or flat)."""
        if self.b2 <= target:
            return None
        need = 1.0 / (self.b2 - target)
        if self.b1 >= need:
            return 0.0
        if self.b0 <= 0:
            return None
        return (need - self.b1) / self.b0


def _fit_at(ks: np.ndarray, acc: np.ndarray, b2: float) -> tuple[AccuracyCurve, float]:
    """NNLS for ``(b0, b1)`` at asymptote ``b2``; the curve and its squared accuracy error."""
    a = np.column_stack([ks, np.ones_like(ks)])
    (b0, b1), _ = nnls(a, 1.0 / (b2 - acc))
    curve = AccuracyCurve(float(b0), float(b1), b2)
    pred = np.array([curve.at(float(k)) for k in ks])
    err = float(np.sum((pred - acc) ** 2)) if np.all(np.isfinite(pred)) else math.inf
    return curve, err


def fit_accuracy(points: Sequence[tuple[float, float]], ceiling: float = 1.0) -> AccuracyCurve:
    """Fit ``acc(k) = b2 - 1/(b0·k + b1)`` (``b0, b1 >= 0``, ``b2 <= ceiling``) to
    ``(iterations, accuracy)`` points; at least two points with distinct iteration counts."""
    if len({k for k, _ in points}) < 2:
        raise ValueError("fit_accuracy needs points at two or more iteration counts")
    ks = np.array([float(k) for k, _ in points])
    acc = np.array([float(a) for _, a in points])
    low = float(acc.max()) + 1e-6
    if low >= ceiling:
        raise ValueError(f"accuracies reach {low:g}, not below the ceiling {ceiling:g}")
    best = minimize_scalar(
        lambda b2: _fit_at(ks, acc, b2)[1],
        bounds=(low, ceiling),
        method="bounded",
        options={"xatol": 1e-9, "maxiter": 500},
    )
    curve, err = _fit_at(ks, acc, float(best.x))
    edge, edge_err = _fit_at(ks, acc, ceiling)  # a bounded search never tries the bound
    return edge if edge_err < err else curve


def true_curve(work: float, target: float, margin: float) -> AccuracyCurve:
    """The simulated truth: ``acc(0) = 0``, asymptote ``target + margin``, ``acc(work) =
    target``."""
    b2 = target + margin
    b1 = 1.0 / b2
    return AccuracyCurve((1.0 / margin - b1) / work, b1, b2)


@dataclass(frozen=True)
class AccuracyTarget:
    """Predicts each job's total iterations from noisy points of its accuracy curve."""

    target: float = 0.9
    margin: float = 0.05
    noise: float = 0.005
    points: int = 5
    seed: int = 0

    def observed(self, job: ActiveJob, done: float) -> list[tuple[float, float]]:
        """The profile points plus ``points`` measurements up to ``done`` iterations."""
        work = job.spec.work
        truth = true_curve(work, self.target, self.margin)
        ks = [f * work for f in PROFILE_FRACTIONS]
        if done > 0:
            ks += [done * (i + 1) / self.points for i in range(self.points)]
        out = []
        for k in ks:
            rng = random.Random(f"sidecar-acc:{self.seed}:{job.id}:{k!r}")
            out.append((k, min(truth.at(k) + rng.gauss(0.0, self.noise), 0.999)))
        return out

    def total(self, job: ActiveJob, done: float) -> float:
        """Predicted total iterations to the target (never below ``done``). When the fit
        never reaches the target, the prediction is twice what is done (or of the profile's
        last point): the job is then believed far from done, not finished."""
        curve = fit_accuracy(self.observed(job, done))
        k = curve.iterations_to(self.target)
        if k is None:
            return 2.0 * max(done, PROFILE_FRACTIONS[-1] * job.spec.work)
        return max(k, done)

    def remaining(self, job: ActiveJob, now: float) -> float:
        """Predicted iterations still to do: what SideCar's model uses instead of the truth."""
        done = job.done_at(now)
        return max(0.0, self.total(job, done) - done)
