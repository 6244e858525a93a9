"""Elastic-Tiresias' expansion by gain classes equals the one-GPU-at-a-time scan it replaced.

The reference below is the scan as it stood in ``elastic_tiresias.py`` before issue 28's
round 6c (every job's gain recomputed for every free GPU, ties within 1e-12 to the smaller
``(queue, id)``). Random cases mix exact ties (the same curve), gains a rounding apart (the
same curve scaled) and gains a few 1e-13 apart that chain across the tolerance, so the
order-dependent fallback is exercised; a naive "largest gain, then rank" rule is shown to
differ from the scan on some of them, so these tests can tell a wrong order from a right one.
"""

from __future__ import annotations

import random

import pytest

from gpuplan.models import ActiveJob, Elasticity, JobSpec
from gpuplan.solver_core.policies.edl import expansion
from gpuplan.solver_core.policies.edl.expansion import TIE, expand, gain

Rank = tuple[int, str]


def reference_scan(
    jobs: list[ActiveJob],
    shares: dict[str, int],
    free: int,
    ranks: dict[str, Rank],
    min_gain: float,
) -> None:
    """The pre-round-6c ``ElasticTiresias._expand`` loop, verbatim but for the rank lookup."""
    while free > 0:
        best: tuple[float, Rank] | None = None
        for job in jobs:
            p = shares[job.id]
            if p >= job.spec.max_gpus:
                continue
            s = job.spec.throughput.rate(p)
            g = (job.spec.throughput.rate(p + 1) - s) / s
            rank = ranks[job.id]
            if g > min_gain and (
                best is None
                or g > best[0] + 1e-12
                or (abs(g - best[0]) <= 1e-12 and rank < best[1])
            ):
                best = (g, rank)
        if best is None:
            return
        shares[best[1][1]] += 1
        free -= 1


def naive(
    jobs: list[ActiveJob],
    shares: dict[str, int],
    free: int,
    ranks: dict[str, Rank],
    min_gain: float,
) -> None:
    """A deliberately wrong order: the largest gain exactly, then rank (no tolerance)."""
    while free > 0:
        cands = [
            (-gain(j, shares[j.id]), ranks[j.id])
            for j in jobs
            if shares[j.id] < j.spec.max_gpus and gain(j, shares[j.id]) > min_gain
        ]
        if not cands:
            return
        shares[min(cands)[1][1]] += 1
        free -= 1


def _job(job_id: str, points: dict[int, float], hi: int) -> ActiveJob:
    spec = JobSpec(
        id=job_id,
        submit_time=0.0,
        requested_gpus=1,
        total_iterations=1e5,
        throughput={"points": points},
        elasticity=Elasticity(min_gpus=1, max_gpus=hi),
    )
    return ActiveJob(spec=spec, status="running")


CURVES = [
    {1: 1.0, 2: 1.9, 4: 3.4, 8: 5.6},
    {1: 1.0, 2: 1.5, 4: 2.0, 8: 2.2},
    {1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0},
]


def _case(rng: random.Random) -> tuple[list[ActiveJob], dict[str, int], int, dict[str, Rank]]:
    n = rng.randint(1, 24)
    jobs, shares, ranks = [], {}, {}
    for k in range(n):
        kind = rng.random()
        if kind < 0.4:  # exact ties: the same curve, unscaled
            points = dict(rng.choice(CURVES))
        elif kind < 0.7:  # a rounding apart: the same curve scaled
            scale = rng.choice([0.1, 0.3, 0.7, 1.3, 3.0, 7.0, 11.0])
            points = {c: r * scale for c, r in rng.choice(CURVES).items()}
        else:  # 2-GPU gains a few 1e-13 apart: chains across the tolerance
            step = rng.randint(0, 6) * 4e-13
            points = {1: 1.0, 2: 1.5 + step, 4: 2.0 + step, 8: 2.2 + step}
        job_id = f"j{rng.randint(0, 10_000):05d}-{k}"
        job = _job(job_id, points, rng.choice([2, 4, 8]))
        jobs.append(job)
        shares[job_id] = rng.randint(1, 2)
        ranks[job_id] = (rng.randint(0, 2), job_id)
    return jobs, shares, rng.randint(1, 40), ranks


@pytest.mark.parametrize("min_gain", [0.0, 0.2])
def test_expansion_equals_the_scan_on_random_cases(min_gain: float) -> None:
    rng = random.Random(2806 + int(min_gain * 10))
    naive_differs = 0
    for _ in range(120):
        jobs, shares, free, ranks = _case(rng)
        want, got, wrong = dict(shares), dict(shares), dict(shares)
        reference_scan(jobs, want, free, ranks, min_gain)
        expand(jobs, got, free, lambda j, r=ranks: r[j.id], min_gain)
        assert got == want
        naive(jobs, wrong, free, ranks, min_gain)
        naive_differs += wrong != want
    assert naive_differs > 0  # the cases reach the tolerance's order dependence


def test_the_tolerance_fallback_is_taken_and_is_order_dependent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three gains chaining within 1e-12: the scan's winner depends on the scan order, and
    expansion follows it in both orders (the fallback path runs)."""
    fallbacks = []
    real = expansion._Classes.top_group

    def counting(self: expansion._Classes) -> list[float]:
        group = real(self)
        fallbacks.append(len(group) > 1)
        return group

    monkeypatch.setattr(expansion._Classes, "top_group", counting)
    x = _job("x", {1: 1.0, 2: 1.5 + 1.5e-12}, 2)  # highest gain, worst rank
    y = _job("y", {1: 1.0, 2: 1.5 + 0.7e-12}, 2)
    z = _job("z", {1: 1.0, 2: 1.5}, 2)  # lowest gain, best rank
    assert gain(x, 1) - gain(z, 1) > TIE  # x and z alone would not tie
    ranks: dict[str, Rank] = {"x": (2, "x"), "y": (1, "y"), "z": (0, "z")}
    winners = set()
    for order in ([x, y, z], [z, y, x], [y, x, z]):
        want, got = dict.fromkeys("xyz", 1), dict.fromkeys("xyz", 1)
        reference_scan(order, want, 1, ranks, 0.0)
        expand(order, got, 1, lambda j: ranks[j.id], 0.0)
        assert got == want
        winners.add(next(k for k, v in got.items() if v == 2))
    assert len(winners) > 1  # the order mattered
    assert any(fallbacks)


def test_expansion_stops_at_max_gpus_and_min_gain() -> None:
    a = _job("a", {1: 1.0, 2: 1.9, 4: 3.4}, 3)
    b = _job("b", {1: 1.0, 2: 1.01}, 8)  # second GPU gains 1 %, under min_gain
    shares = {"a": 1, "b": 1}
    expand([a, b], shares, 10, lambda j: (0, j.id), 0.05)
    assert shares == {"a": 3, "b": 1}
