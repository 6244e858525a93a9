"""Aryl's usage question (issue 12 item 5): does phase 2's flexible demand reach idle GPUs, and
how much usage can any schedule reach over a window (``scenarios/usage_bound.py``)?

Numbers and the explanation: docs/results/aryl.md, "Why usage stays flat"."""

from __future__ import annotations

import math
import random

import pytest

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import (
    AllocationPlan,
    Cluster,
    ClusterView,
    Elasticity,
    InputError,
    JobSpec,
    Node,
)
from gpuplan.scenarios.inference import aryl_jobs
from gpuplan.scenarios.loaning_usage import PoolUsage
from gpuplan.scenarios.trace_job import TraceJob
from gpuplan.scenarios.usage_bound import window_usage_bound
from gpuplan.solver_core.registry import make_policy
from tests.conftest import NO_OVERHEADS


def _job(job_id: str, submit: float, gpus: int, duration: float, **kw: object) -> JobSpec:
    return JobSpec(id=job_id, submit_time=submit, requested_gpus=gpus, duration=duration, **kw)


def _window_usage(cluster: Cluster, jobs: list[JobSpec], policy: str, until: float) -> float:
    usage = PoolUsage(cluster, until=until)
    simulate(cluster, jobs, make_policy(policy), overheads=NO_OVERHEADS, on_plan=usage)
    return usage.summary()["training"]


# ----------------------------------------------------------------------------- the bound
def test_bound_worked_example_rigid() -> None:
    """4 GPUs, window [0, 100]: A (2 GPUs x 50 s at t=0) and B (4 GPUs x 100 s at t=80).
    Split at s=80: A can have done all 100 GPU-s, then 4 GPUs x 20 s -> 180 / 400 = 0.45.
    FIFO reaches it exactly (A 0-50, B from 80), so no scheduler can do better here."""
    cluster = Cluster(nodes=[Node(name="t0", gpus=4)])
    jobs = [_job("a", 0, 2, 50), _job("b", 80, 4, 100)]
    assert window_usage_bound(jobs, 4, 100.0) == pytest.approx(0.45)
    assert _window_usage(cluster, jobs, "fifo", 100.0) == pytest.approx(0.45)
    assert _window_usage(cluster, jobs, "aryl-scaling", 100.0) == pytest.approx(0.45)


def test_elastic_range_above_the_traced_size_raises_the_bound_and_phase2_reaches_it() -> None:
    """One job of 200 GPU-s on 4 GPUs, window [0, 50]. Rigid at 2 GPUs: at most 100 GPU-s in
    the window (0.5). Elastic up to 4: the whole cluster (1.0) -- and only a scheduler whose
    flexible demand takes the idle GPUs gets there: FIFO stays at the request."""
    cluster = Cluster(nodes=[Node(name="t0", gpus=4)])
    rigid = [_job("a", 0, 2, 100)]
    elastic = [_job("a", 0, 2, 100, elasticity=Elasticity(min_gpus=1, max_gpus=4))]
    assert window_usage_bound(rigid, 4, 50.0) == pytest.approx(0.5)
    assert window_usage_bound(elastic, 4, 50.0) == pytest.approx(1.0)
    assert _window_usage(cluster, elastic, "fifo", 50.0) == pytest.approx(0.5)
    assert _window_usage(cluster, elastic, "aryl-scaling", 50.0) == pytest.approx(1.0)


def test_bound_is_never_beaten_by_a_simulated_schedule() -> None:
    """Random rigid and elastic mixes: every policy's window usage stays under the bound."""
    rng = random.Random(7)
    cluster = Cluster(nodes=[Node(name="t0", gpus=8), Node(name="t1", gpus=8)])
    for trial in range(4):
        jobs = []
        for i in range(25):
            g = rng.choice([1, 2, 4, 8])
            kw = (
                {"elasticity": Elasticity(min_gpus=max(1, g // 2), max_gpus=2 * g)}
                if rng.random() < 0.3
                else {}
            )
            jobs.append(_job(f"j{i}", rng.uniform(0, 2000), g, rng.uniform(50, 900), **kw))
        until = max(j.submit_time for j in jobs)
        bound = window_usage_bound(jobs, 16, until)
        for policy in ("fifo", "aryl-scaling", "srtf"):
            start = min(j.submit_time for j in jobs)
            # PoolUsage integrates from the first plan; the bound from ``start`` then
            assert (
                _window_usage(cluster, jobs, policy, until)
                <= window_usage_bound(jobs, 16, until, start) + 1e-9
            ), (trial, policy)
        assert 0 < bound <= 1


def test_bound_rejects_an_empty_window() -> None:
    with pytest.raises(InputError):
        window_usage_bound([_job("a", 0, 1, 10)], 4, 0.0)


# ----------------------------------------------------------------------------- phase 2
class StrandedFlexible:
    """Plan hook: GPU-seconds during which a training GPU is idle while a running elastic job
    is below its largest allowed count (flexible demand that does not reach an idle GPU)."""

    def __init__(self, jobs: list[JobSpec]) -> None:
        self.spec = {j.id: j for j in jobs}
        self.stranded_s = 0.0
        self._last: tuple[float, int] | None = None

    def __call__(self, view: ClusterView, plan: AllocationPlan) -> None:
        if self._last is not None:
            t, gpus = self._last
            self.stranded_s += gpus * (view.now - t)
        used = sum(a.gpus for a in plan.allocations.values())
        idle = sum(n.gpus for n in view.nodes.values()) - used
        below = sum(
            max(self.spec[j].allowed_counts()) - a.gpus
            for j, a in plan.allocations.items()
            if self.spec[j].elastic
        )
        self._last = (view.now, min(idle, below))


@pytest.mark.parametrize("policy", ["aryl-scaling", "aryl", "aryl-greedy"])
def test_phase2_leaves_no_idle_gpu_while_an_elastic_job_could_grow(policy: str) -> None:
    """Alg. 2's phase 2 gives every GPU phase 1 leaves to the flexible demand (all items have
    positive value under linear scaling, workers of 1 GPU): after every decision, either no
    training GPU is idle or every running elastic job is at its maximum. (The Philly replay
    measures the same: 0.00 stranded GPUs on average, docs/results/aryl.md.)"""
    rng = random.Random(3)
    jobs = []
    for i in range(40):
        g = rng.choice([1, 2, 4, 8])
        kw = (
            {"elasticity": Elasticity(min_gpus=max(1, math.ceil(g / 2)), max_gpus=2 * g)}
            if rng.random() < 0.3
            else {"gpu_type": "v100"}
        )
        jobs.append(_job(f"j{i}", rng.uniform(0, 3000), g, rng.uniform(100, 1500), **kw))
    cluster = Cluster(nodes=[Node(name=f"t{i}", gpus=8) for i in range(3)])
    probe = StrandedFlexible(jobs)
    result, _, _ = simulate(
        cluster, jobs, make_policy(policy), overheads=NO_OVERHEADS, on_plan=probe
    )
    assert all(r.finish_time is not None for r in result.jobs)
    assert sum(r.resizes for r in result.jobs) > 0
    assert probe.stranded_s == 0.0
    # FIFO runs elastic jobs at their request, so the probe does see stranded demand there
    fifo = StrandedFlexible(jobs)
    simulate(cluster, jobs, make_policy("fifo"), overheads=NO_OVERHEADS, on_plan=fifo)
    assert fifo.stranded_s > 0


# ----------------------------------------------------------------------------- job mix
def test_aryl_jobs_max_factor() -> None:
    rows = [
        TraceJob(id=f"r{i}", submit_time=float(i), gpus=[1, 2, 4, 8][i % 4], duration=100.0 + i)
        for i in range(400)
    ]
    plain = aryl_jobs(rows, seed=3)
    wide = aryl_jobs(rows, seed=3, max_factor=2.0)
    assert [j.id for j in plain if j.elastic] == [j.id for j in wide if j.elastic]
    for a, b in zip(plain, wide, strict=True):
        assert a.requested_gpus == b.requested_gpus and a.work == b.work
        if a.elastic:
            g = a.requested_gpus
            assert (a.min_gpus, a.elasticity.max_gpus) == (math.ceil(g / 2), g)  # type: ignore[union-attr]
            assert (b.min_gpus, b.elasticity.max_gpus) == (math.ceil(g / 2), 2 * g)  # type: ignore[union-attr]
        else:
            assert a == b
    with pytest.raises(InputError, match="max_factor"):
        aryl_jobs(rows, max_factor=0.5)
