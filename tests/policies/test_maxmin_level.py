"""Max-Min's water-level counts (the engine's fast path) equal the full water-fill.

* :func:`level_counts` equals :func:`~gpuplan.solver_core.helpers.water_fill.water_fill` (the
  default score) over seeded random arrival/finish sequences, with non-unit and skipping
  ladders, first steps above one GPU, empty ladders, underload and overload;
* simulated runs with verify mode on (every decision also runs ``progressive_fill`` and
  compares job by job) finish, and a deliberately wrong count is caught naming the job;
* whole runs on the fast path equal the full protocol (``tests/policies/test_afs_delta.py``
  and ``tests/engine/test_delta_protocol.py`` list max-min).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import Cluster
from gpuplan.solver_core import change_verify
from gpuplan.solver_core.helpers.water_fill import water_fill
from gpuplan.solver_core.policies.baselines import maxmin
from gpuplan.solver_core.policies.baselines.maxmin_level import (
    LadderSteps,
    LevelFillMismatch,
    level_counts,
)
from gpuplan.solver_core.registry import make_policy
from tests.bench.afs_scale import workload


def _arrays(
    ladders: list[tuple[int, ...]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``AfsColumns.ladder_arrays``' layout for ``ladders`` (rates unused here)."""
    flat = [c for lad in ladders for c in lad]
    cflat = np.zeros(len(flat) + 1, np.int64)
    cflat[: len(flat)] = flat
    off = np.cumsum([0] + [len(lad) for lad in ladders])[:-1].astype(np.int64)
    dlev = np.array([len(lad) for lad in ladders], np.int64)
    return cflat, np.ones(len(flat) + 1), off, dlev


def _random_ladder(rng: random.Random, total: int) -> tuple[int, ...]:
    kind = rng.random()
    if kind < 0.05:
        return ()
    first = rng.choice([1, 1, 1, 2, 3, 4, 8])
    if kind < 0.45:  # unit steps up to a cap (the AFS mapping)
        lad = tuple(range(first, first + rng.randint(0, 12)))
    else:  # non-unit steps, some skipping counts
        lad = [first]
        for _ in range(rng.randint(0, 6)):
            lad.append(lad[-1] + rng.choice([1, 1, 2, 3, 4, 8]))
        lad = tuple(lad)
    return tuple(c for c in lad if c <= total)


def _check(ladder_of: dict[str, tuple[int, ...]], order: list[str], total: int) -> None:
    table = sorted(set(ladder_of.values()))
    index = {lad: k for k, lad in enumerate(table)}
    did = np.array([index[ladder_of[j]] for j in order], np.int64)
    got = level_counts(did, _arrays(table), table, total, LadderSteps())
    want = water_fill((ladder_of[j] for j in order), total)
    expect = [want.get(pos, 0) for pos in range(len(order))]
    assert got.tolist() == expect, (total, [ladder_of[j] for j in order])


@pytest.mark.parametrize("seed", range(40))
def test_level_counts_equal_water_fill_over_arrivals_and_finishes(seed: int) -> None:
    rng = random.Random(seed)
    total = rng.choice([1, 3, 8, 16, 37, 64, 128])
    ladder_of: dict[str, tuple[int, ...]] = {}
    order: list[str] = []
    for step in range(150):
        if order and rng.random() < 0.4:  # a finish anywhere in the order
            order.pop(rng.randrange(len(order)))
        else:  # an arrival, mostly at the end, sometimes earlier (equal submit times)
            job = f"j{step}"
            ladder_of[job] = _random_ladder(rng, total)
            at = len(order) if rng.random() < 0.8 else rng.randint(0, len(order))
            order.insert(at, job)
        _check(ladder_of, order, total)


def test_level_counts_edge_cases() -> None:
    _check({}, [], 8)
    _check({"a": (1, 2, 3)}, ["a"], 0)
    _check({"a": (4, 8), "b": (1, 2, 3), "c": (2, 6)}, ["a", "b", "c"], 9)  # a drop at level
    _check({"a": (1, 5), "b": (1, 2, 3, 4, 5), "c": (3,)}, ["c", "a", "b"], 7)
    _check({"a": (8,), "b": (1,), "c": (2,)}, ["a", "b", "c"], 4)  # first step skipped
    _check({"a": (1, 2), "b": (1, 2)}, ["a", "b"], 100)  # every job at its top


def _run(verify: bool, monkeypatch: pytest.MonkeyPatch, active: int = 40, probes: int = 80) -> Any:
    monkeypatch.setattr(change_verify, "VERIFY", verify)
    monkeypatch.setattr(maxmin.MaxMinShares, "SMALL", 0)  # the fast path on 32 GPUs too
    jobs = workload(active, probes, seed=5)
    return simulate(Cluster.uniform(4, 8), jobs, make_policy("max-min"), horizon_s=30 * 3600.0)


@pytest.mark.parametrize(("active", "probes"), [(40, 80), (8, 160)], ids=["overload", "under"])
def test_verify_mode_runs_clean_on_elastic_runs(
    monkeypatch: pytest.MonkeyPatch, active: int, probes: int
) -> None:
    result, engine, _ = _run(True, monkeypatch, active, probes)
    assert len(engine.decision_ms) > 60
    if active < 32:  # underload: jobs climb their ladders and come down again
        assert sum(r.resizes for r in result.jobs) > 0


def test_small_clusters_decline_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuplan.models import ClusterState, JobSnapshot
    from gpuplan.solver_core.placement.best_fit import best_fit_placement

    view = ClusterState(
        now=0.0,
        cluster=Cluster.uniform(2, 8),
        jobs=[JobSnapshot(spec=s) for s in workload(6, 0, seed=2)],
    ).to_view()
    stage = maxmin.MaxMinShares()
    assert stage.delta(view, best_fit_placement) is None
    stage.SMALL = 0
    assert stage.delta(view, best_fit_placement) is not None


def test_verify_mode_catches_a_wrong_count(monkeypatch: pytest.MonkeyPatch) -> None:
    real = maxmin.level_counts
    calls = {"n": 0}

    def broken(*args: Any) -> np.ndarray:
        counts = real(*args)
        calls["n"] += 1
        if calls["n"] == 30 and len(counts):  # one job one GPU short at one decision
            row = int(np.flatnonzero(counts > 0)[-1])
            counts[row] -= 1
        return counts

    monkeypatch.setattr(maxmin, "level_counts", broken)
    with pytest.raises(LevelFillMismatch, match=r"max-min water level gives \S+ \d+ GPUs"):
        _run(True, monkeypatch)
    calls["n"] = 0
    _run(False, monkeypatch)  # without verify mode the wrong count goes unnoticed
    assert calls["n"] > 30
