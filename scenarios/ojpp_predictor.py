"""AIP (paper 002 §3.3): predict the co-location slowdown of job pairs never measured together.

The measured table is Gavel's (``profiles.gavel_colocation``): for every ordered pair of its 26
job types sharing one GPU of a worker type, the fraction of its isolated throughput each keeps.
The slowdown target is Eq. (6)'s ``(t' - t) / t = 1 / kept - 1`` of the first job (pairs that
do not fit in memory, Gavel's 0.0, are left out: there is nothing to predict but "no").

Features (AIP's own vector is not published; ours are what a scheduler knows of a job type
before co-running it, digest §3.3 "job profile + host"): for the victim and for the aggressor,
the model family (one-hot), log2 batch size and log isolated steps/s on the worker type; and
the worker type (one-hot) as the "system configuration" part; and, from the *training* pairs
only, the mean slowdown the victim suffered and the aggressor inflicted on that worker type
(AIP learns from co-location tests; an unseen pair's two types each have other measured pairs).

Model choice (the paper's rule): among ``LinearRegression``, ``SVR``, ``DecisionTreeRegressor``
and ``KNeighborsRegressor`` (feature-standardised where scale matters, fixed ``random_state``),
the one with the lowest cross-validated MAE, folds grouped by unordered job-type pair so a pair
is never half-seen. Everything is deterministic for a given seed.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpuplan.models.extras import MissingExtra

from .profiles import gavel_colocation, gavel_profiles

try:
    from sklearn.linear_model import LinearRegression
    from sklearn.model_selection import GroupKFold
    from sklearn.neighbors import KNeighborsRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVR
    from sklearn.tree import DecisionTreeRegressor
except ImportError as _err:  # the 'ml' extra: nothing in the core imports this module
    raise MissingExtra("gpuplan.scenarios.ojpp_predictor", "ml", "sklearn") from _err

__all__ = [
    "CANDIDATES",
    "PairSample",
    "Predictor",
    "held_out_split",
    "pair_samples",
    "select_and_fit",
]

WORKERS = ("k80", "p100", "v100")
_NAME = re.compile(r"^(?P<family>.+?)(?: \(batch size (?P<bs>\d+)\))?$")


def _family_and_batch(job: str) -> tuple[str, int]:
    m = _NAME.match(job)
    assert m is not None  # the pattern matches every string
    return m.group("family"), int(m.group("bs") or 1)


@dataclass(frozen=True, slots=True)
class PairSample:
    worker: str
    victim: str
    aggressor: str
    slowdown: float

    @property
    def group(self) -> tuple[str, str]:
        """The unordered pair of job types (held out together)."""
        return (min(self.victim, self.aggressor), max(self.victim, self.aggressor))


def pair_samples(path: Path | str) -> tuple[list[PairSample], dict[tuple[str, str], float]]:
    """Gavel's 1-GPU co-location pairs that fit, and isolated steps/s by (job, worker)."""
    coloc = gavel_colocation(path)
    rates = {(job, worker): prof.rate(1) for (job, worker), prof in gavel_profiles(path).items()}
    samples = [
        PairSample(w, a, b, 1.0 / r_a - 1.0)
        for (w, a, b, scale), (r_a, _r_b) in sorted(coloc.items())
        if scale == 1 and r_a > 0 and w in WORKERS
    ]
    return samples, rates


class Features:
    """The feature vector of a pair (see the module docstring)."""

    def __init__(self, samples: Sequence[PairSample], rates: dict[tuple[str, str], float]) -> None:
        self.families = sorted(
            {_family_and_batch(s.victim)[0] for s in samples}
            | {_family_and_batch(s.aggressor)[0] for s in samples}
        )
        self.rates = rates
        suffered: dict[tuple[str, str], list[float]] = {}
        inflicted: dict[tuple[str, str], list[float]] = {}
        for s in samples:
            suffered.setdefault((s.victim, s.worker), []).append(s.slowdown)
            inflicted.setdefault((s.aggressor, s.worker), []).append(s.slowdown)
        mean = sum(s.slowdown for s in samples) / max(1, len(samples))
        self.mean = mean
        self.suffered = {k: sum(v) / len(v) for k, v in suffered.items()}
        self.inflicted = {k: sum(v) / len(v) for k, v in inflicted.items()}

    def job(self, job: str, worker: str) -> list[float]:
        family, batch = _family_and_batch(job)
        onehot = [1.0 if family == f else 0.0 for f in self.families]
        rate = self.rates.get((job, worker), 1.0)
        return [*onehot, math.log2(batch), math.log(rate)]

    def pair(self, worker: str, victim: str, aggressor: str) -> list[float]:
        host = [1.0 if worker == w else 0.0 for w in WORKERS]
        history = [
            self.suffered.get((victim, worker), self.mean),
            self.inflicted.get((aggressor, worker), self.mean),
        ]
        return [*self.job(victim, worker), *self.job(aggressor, worker), *history, *host]

    def matrix(self, samples: Sequence[PairSample]) -> np.ndarray:
        return np.array([self.pair(s.worker, s.victim, s.aggressor) for s in samples])


CANDIDATES: dict[str, Callable[[], object]] = {
    "linear": LinearRegression,
    "svr": lambda: make_pipeline(StandardScaler(), SVR(C=1.0, epsilon=0.02)),
    "tree": lambda: DecisionTreeRegressor(min_samples_leaf=3, random_state=0),
    "knn": lambda: make_pipeline(StandardScaler(), KNeighborsRegressor(n_neighbors=5)),
}
"""The paper's four regressors (fixed hyper-parameters, fixed random_state)."""


@dataclass
class Predictor:
    """The selected regressor, fitted; ``cv_mae`` holds every candidate's CV MAE."""

    name: str
    model: object
    features: Features
    cv_mae: dict[str, float]

    def predict(self, worker: str, victim: str, aggressor: str) -> float:
        x = np.array([self.features.pair(worker, victim, aggressor)])
        return max(0.0, float(self.model.predict(x)[0]))  # type: ignore[attr-defined]

    def predict_many(self, samples: Sequence[PairSample]) -> list[float]:
        if not samples:
            return []
        out = self.model.predict(self.features.matrix(samples))  # type: ignore[attr-defined]
        return [max(0.0, float(v)) for v in out]


def held_out_split(
    samples: Sequence[PairSample], fraction: float, seed: int
) -> tuple[list[PairSample], list[PairSample]]:
    """(train, test) with ``fraction`` of the unordered job-type pairs (all their worker types
    and both orders) in test: the test pairs are *unseen* pairs."""
    groups = sorted({s.group for s in samples})
    rng = random.Random(seed)
    test_groups = set(rng.sample(groups, max(1, round(fraction * len(groups)))))
    train = [s for s in samples if s.group not in test_groups]
    test = [s for s in samples if s.group in test_groups]
    return train, test


def select_and_fit(
    train: Sequence[PairSample], rates: dict[tuple[str, str], float], folds: int = 5
) -> Predictor:
    """Cross-validated MAE of each candidate (folds grouped by pair), the best refitted on all
    of ``train`` (ties: candidate order)."""
    feats = Features(train, rates)
    x = feats.matrix(train)
    y = np.array([s.slowdown for s in train])
    group_ids = {g: n for n, g in enumerate(sorted({s.group for s in train}))}
    groups = np.array([group_ids[s.group] for s in train])
    maes: dict[str, float] = {}
    for name, make in CANDIDATES.items():
        errors = []
        for tr, te in GroupKFold(n_splits=folds).split(x, y, groups):
            model = make()
            model.fit(x[tr], y[tr])  # type: ignore[attr-defined]
            pred = np.maximum(0.0, model.predict(x[te]))  # type: ignore[attr-defined]
            errors.append(np.abs(pred - y[te]))
        maes[name] = float(np.concatenate(errors).mean())
    best = min(CANDIDATES, key=lambda n: maes[n])
    model = CANDIDATES[best]()
    model.fit(x, y)  # type: ignore[attr-defined]
    return Predictor(best, model, feats, maes)


def errors(predictor: Predictor, test: Sequence[PairSample]) -> dict[str, float]:
    """Held-out errors: MAE of the slowdown, and the mean relative error of the predicted speed
    (``1 + slowdown``, i.e. of the co-located run time), the reading we give the paper's 7 %."""
    pred = predictor.predict_many(test)
    true = [s.slowdown for s in test]
    mae = sum(abs(p - t) for p, t in zip(pred, true, strict=True)) / len(test)
    rel = sum(abs(p - t) / (1.0 + t) for p, t in zip(pred, true, strict=True)) / len(test)
    return {"mae": mae, "relative": rel, "pairs": float(len(test))}
