"""The interference models against the measured H200 co-location table (issue 26 item 5).

``gpuplan interference-eval`` prints the markdown tables of docs/results/interference.md
(between its ``BEGIN``/``END interference-eval`` markers; a test reruns that command and
compares). Why a command: an operator deciding whether to trust the simulator's interference
charges (or the OJPP predictor) for co-location reads this table; the fitted predictor needs
scikit-learn, the ``ml`` extra. Every figure is the relative error of a predicted slowdown
(solo speed / co-located speed, i.e. of the co-located time per iteration):
``|predicted - measured| / measured``, for each job of each measured group, in each of the two
repetitions.

Models (``scenarios/data/h200_colocation.json``, one repetition at a time):

* ``noise``: the other repetition's measurement of the same job in the same group; its error
  is the spread between repetitions, the floor no model can beat.
* ``default``: the simulator's OJPP model (``OjppInterference``) with no measured term, i.e.
  what it charges any pair nobody measured: 0.1 between types, 0.2 within one (additive).
* ``predictor``: the OJPP predictor (AIP: the paper's four regressors, the one with the lowest
  grouped cross-validated MAE), leave-one-pair-out: for each unordered pair, fitted on the other
  14 pairs of the same repetition, then asked for both orders of the held-out one. Features of
  a job: log solo it/s, isolated GPU utilisation, log peak memory; of a pair: the victim's and
  the aggressor's, and (training pairs only) the mean slowdown the victim suffered and the
  aggressor inflicted. Triples compose its pair predictions (fitted on all 15 pairs) additively.
* ``timeslice``: plain time-slicing, ``k * (1 + sum of the others' isolated GPU utilisation)``:
  a job waits for the GPU time its neighbours use; ``k`` (context-switch cost) is the geometric
  mean of measured / ``(1 + sum)`` over the training pairs (leave-one-pair-out again).
* ``additive`` / ``max`` / ``multiplicative`` (triples only): what the simulator's replay of
  the measured table (``MeasuredInterference``) charges a group it did not measure: the same
  repetition's measured pair terms under each composition.

Everything is deterministic: fixed folds, ``random_state=0``; no clock or random draw.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gpuplan.models import JobSpec
from gpuplan.models.extras import require_extra
from gpuplan.models.measured_interference import MeasuredInterference, MeasuredTable

from .measured_tables import MeasuredRun, h200_runs
from .ojpp_interference import OjppInterference
from .ojpp_predictor import CANDIDATES

LIMIT = 0.15
"""A pair whose worse job errs by more than this is explained in the results page."""

PAIR_MODELS = ("noise", "default", "predictor", "timeslice")
TRIPLE_MODELS = ("noise", "default", "additive", "max", "multiplicative", "predictor", "timeslice")


@dataclass(frozen=True)
class Sample:
    """One job of one measured group: ``group`` is the group's models in measured order,
    ``index`` the job's position in it."""

    group: tuple[str, ...]
    index: int
    measured: float

    @property
    def victim(self) -> str:
        return self.group[self.index]

    @property
    def others(self) -> tuple[str, ...]:
        return self.group[: self.index] + self.group[self.index + 1 :]

    @property
    def pair(self) -> tuple[str, str]:
        """The unordered pair (pairs only)."""
        a, b = self.group
        return (min(a, b), max(a, b))


def samples(table: MeasuredTable) -> list[Sample]:
    return [Sample(g.models, i, v) for g in table.groups for i, v in enumerate(g.slowdowns)]


def _spec(model: str, n: int = 0) -> JobSpec:
    return JobSpec(
        id=f"{model}#{n}", submit_time=0.0, requested_gpus=1, total_iterations=1.0, model=model
    )


def default_model(s: Sample) -> float:
    """The simulator's OJPP model with an empty matrix (its defaults for unmeasured pairs)."""
    model = OjppInterference({}, "additive", kappa=0.0)
    others = [_spec(o, n + 1) for n, o in enumerate(s.others)]
    return 1.0 + model.slowdown(_spec(s.victim), others)


def composed(run: MeasuredRun, composition: str) -> Callable[[Sample], float]:
    """The replay's fallback: the run's measured pairs only, under ``composition``."""
    pairs_only = MeasuredTable(
        jobs=run.table.jobs, groups=tuple(g for g in run.table.groups if len(g.models) == 2)
    )
    model = MeasuredInterference(pairs_only, composition)  # type: ignore[arg-type]

    def predict(s: Sample) -> float:
        return model.slowdown(_spec(s.victim), [_spec(o, n + 1) for n, o in enumerate(s.others)])

    return predict


# ---------------------------------------------------------------- time-slicing model
def _timeslice_base(run: MeasuredRun, s: Sample) -> float:
    return 1.0 + sum(run.util[o] for o in s.others)


def _timeslice_k(run: MeasuredRun, train: Sequence[Sample]) -> float:
    logs = [math.log(t.measured / _timeslice_base(run, t)) for t in train]
    return math.exp(math.fsum(logs) / len(logs))


# ---------------------------------------------------------------- the OJPP predictor
class _Features:
    """A pair's feature vector (module docstring), history from ``train`` only."""

    def __init__(self, run: MeasuredRun, train: Sequence[Sample]) -> None:
        self.run = run
        suffered: dict[str, list[float]] = {}
        inflicted: dict[str, list[float]] = {}
        for t in train:
            (other,) = t.others
            suffered.setdefault(t.victim, []).append(t.measured - 1.0)
            inflicted.setdefault(other, []).append(t.measured - 1.0)
        self.mean = math.fsum(t.measured - 1.0 for t in train) / len(train)
        self.suffered = {k: math.fsum(v) / len(v) for k, v in suffered.items()}
        self.inflicted = {k: math.fsum(v) / len(v) for k, v in inflicted.items()}

    def job(self, model: str) -> list[float]:
        run = self.run
        return [math.log(run.table.jobs[model]), run.util[model], math.log(run.peak_mem_mib[model])]

    def pair(self, victim: str, aggressor: str) -> list[float]:
        return [
            *self.job(victim),
            *self.job(aggressor),
            self.suffered.get(victim, self.mean),
            self.inflicted.get(aggressor, self.mean),
        ]


@dataclass
class _Fitted:
    name: str
    model: object
    features: _Features

    def term(self, victim: str, aggressor: str) -> float:
        x = np.array([self.features.pair(victim, aggressor)])
        return max(0.0, float(self.model.predict(x)[0]))  # type: ignore[attr-defined]


def fit_predictor(run: MeasuredRun, train: Sequence[Sample]) -> _Fitted:
    """The paper's rule: each candidate's MAE over folds grouped by unordered pair, the best
    refitted on all of ``train`` (ties: candidate order)."""
    (model_selection,) = require_extra(
        "ml", "the interference evaluation's predictor", "sklearn.model_selection"
    )
    feats = _Features(run, train)
    x = np.array([feats.pair(t.victim, t.others[0]) for t in train])
    y = np.array([t.measured - 1.0 for t in train])
    ids = {p: n for n, p in enumerate(sorted({t.pair for t in train}))}
    groups = np.array([ids[t.pair] for t in train])
    folds = min(5, len(ids))
    maes = {}
    for name, make in CANDIDATES.items():
        errors = []
        for tr, te in model_selection.GroupKFold(n_splits=folds).split(x, y, groups):
            model = make()
            model.fit(x[tr], y[tr])  # type: ignore[attr-defined]
            errors.append(np.abs(np.maximum(0.0, model.predict(x[te])) - y[te]))  # type: ignore[attr-defined]
        maes[name] = float(np.concatenate(errors).mean())
    best = min(CANDIDATES, key=lambda n: maes[n])
    model = CANDIDATES[best]()
    model.fit(x, y)  # type: ignore[attr-defined]
    return _Fitted(best, model, feats)


# ---------------------------------------------------------------- evaluation
@dataclass
class RunEval:
    """Predictions per model for every sample of one repetition, and the chosen regressors."""

    run: str
    samples: list[Sample]
    predicted: dict[str, list[float]]
    chosen: dict[str, int]
    k: list[float]

    def error(self, model: str, n: int) -> float:
        return abs(self.predicted[model][n] - self.samples[n].measured) / self.samples[n].measured


def evaluate_run(run: MeasuredRun, other: MeasuredRun) -> RunEval:
    every = samples(run.table)
    pairs = [s for s in every if len(s.group) == 2]
    other_by = {(s.group, s.index): s.measured for s in samples(other.table)}
    predicted: dict[str, list[float]] = {m: [] for m in TRIPLE_MODELS}
    chosen: dict[str, int] = {}
    ks: list[float] = []
    comps = {c: composed(run, c) for c in ("additive", "max", "multiplicative")}
    full = fit_predictor(run, pairs)
    k_all = _timeslice_k(run, pairs)
    folds: dict[tuple[str, str], tuple[_Fitted, float]] = {}
    for pair in sorted({s.pair for s in pairs}):  # leave-one-pair-out: one fit per pair
        train = [t for t in pairs if t.pair != pair]
        fitted = fit_predictor(run, train)
        chosen[fitted.name] = chosen.get(fitted.name, 0) + 1
        folds[pair] = (fitted, _timeslice_k(run, train))
        ks.append(folds[pair][1])
    for s in every:
        predicted["noise"].append(other_by[(s.group, s.index)])
        predicted["default"].append(default_model(s))
        if len(s.group) == 2:
            fitted, k = folds[s.pair]
            predicted["predictor"].append(1.0 + fitted.term(s.victim, s.others[0]))
            predicted["timeslice"].append(k * _timeslice_base(run, s))
            for c in comps:
                predicted[c].append(math.nan)  # pairs are measured: the replay is exact
        else:
            predicted["predictor"].append(1.0 + sum(full.term(s.victim, o) for o in s.others))
            predicted["timeslice"].append(k_all * _timeslice_base(run, s))
            for c, f in comps.items():
                predicted[c].append(f(s))
    return RunEval(run.name, every, predicted, chosen, ks)


def evaluate() -> list[RunEval]:
    """Both repetitions, each evaluated on its own (its noise column against the other)."""
    runs = h200_runs()
    return [evaluate_run(r, runs[1 - n]) for n, r in enumerate(runs)]


# ---------------------------------------------------------------- report
def _groups(ev: RunEval, size: int) -> list[tuple[tuple[str, ...], list[int]]]:
    out: dict[tuple[str, ...], list[int]] = {}
    for n, s in enumerate(ev.samples):
        if len(s.group) == size:
            out.setdefault(s.group, []).append(n)
    return list(out.items())


def _pct(x: float) -> str:
    return f"{100 * x:.0f}"


def _table(evals: list[RunEval], size: int, models: Sequence[str]) -> list[str]:
    head = ["group", "measured (run1 \\| run2)", *models]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    per_run = [_groups(ev, size) for ev in evals]
    for g, (group, _idx) in enumerate(per_run[0]):
        measured = " \\| ".join(
            " ".join(f"{evals[r].samples[n].measured:.2f}" for n in per_run[r][g][1])
            for r in range(len(evals))
        )
        cells = []
        for m in models:
            worst = [max(evals[r].error(m, n) for n in per_run[r][g][1]) for r in range(len(evals))]
            mark = " **!**" if m != "noise" and max(worst) > LIMIT else ""
            cells.append(" / ".join(_pct(w) for w in worst) + mark)
        lines.append(f"| {' + '.join(group)} | {measured} | " + " | ".join(cells) + " |")
    return lines


def _summary(evals: list[RunEval]) -> list[str]:
    lines = [
        "| model | pairs: mean job error | pairs: worst | pairs above 15 % (of 15) | "
        "triples: mean job error | triples: worst |",
        "|---|---|---|---|---|---|",
    ]
    for m in TRIPLE_MODELS:
        cells = []
        for size in (2, 3):
            if size == 2 and m not in PAIR_MODELS:
                cells += ["exact (replayed)", "0", "0"]
                continue
            means, worsts, above = [], [], []
            for ev in evals:
                groups = _groups(ev, size)
                errs = [ev.error(m, n) for _g, idx in groups for n in idx]
                means.append(math.fsum(errs) / len(errs))
                group_worst = [max(ev.error(m, n) for n in idx) for _g, idx in groups]
                worsts.append(max(group_worst))
                above.append(sum(w > LIMIT for w in group_worst))
            cells += [
                " / ".join(_pct(v) for v in means) + " %",
                " / ".join(_pct(v) for v in worsts) + " %",
            ]
            if size == 2:
                cells.append(" / ".join(str(a) for a in above))
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return lines


def report(evals: list[RunEval]) -> str:
    chosen = "; ".join(
        f"{ev.run}: " + ", ".join(f"{k} {v}" for k, v in sorted(ev.chosen.items())) for ev in evals
    )
    ks = "; ".join(f"{ev.run}: {min(ev.k):.3f}-{max(ev.k):.3f}" for ev in evals)
    out = [
        "Errors in %, run1 / run2 (each repetition predicted on its own; `noise` is the "
        "other repetition's reading). A cell is the worse of the group's jobs; **!** marks "
        "a model's error above 15 %.",
        "",
        "Summary:",
        "",
        *_summary(evals),
        "",
        "Pairs (leave-one-pair-out for the fitted models):",
        "",
        *_table(evals, 2, PAIR_MODELS),
        "",
        "Triples (pair terms or models from all 15 pairs of the same repetition):",
        "",
        *_table(evals, 3, TRIPLE_MODELS),
        "",
        f"Regressors the predictor's selection chose (of 15 folds): {chosen}. "
        f"Time-slicing constant k over the folds: {ks}.",
    ]
    return "\n".join(out) + "\n"
