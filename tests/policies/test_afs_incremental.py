"""The AFS-L stage's per-event shortcuts equal the from-scratch computation at every decision.

The stage keeps the scan order across decisions (:class:`ScanOrder`), reads remaining work
inline (:func:`remaining_all`) and hands the solver columns instead of :class:`AfsJob`s. Here a
simulated run with arrivals, completions and resizes checks, at every decision, that each of
them equals what ``scan_order(view.active())``, ``ActiveJob.remaining`` and ``afs_l_shares`` on
freshly built ladders give.
"""

from __future__ import annotations

import random

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import (
    Cluster,
    ClusterState,
    ClusterView,
    Elasticity,
    JobSnapshot,
    JobSpec,
    SolverStats,
    ThroughputProfile,
)
from gpuplan.solver_core.placement.best_fit import best_fit_placement
from gpuplan.solver_core.policies.afs.afs import (
    AfsJob,
    AfsL,
    afs_l_shares,
    build_ladder,
    scan_order,
)
from gpuplan.solver_core.policies.afs.afs_job import ScanOrder, remaining_all
from gpuplan.solver_core.policy import Shares, StagedPolicy, Stateless
from tests.bench.afs_scale import workload


class _Compared(Stateless):
    """The production stage, checked against the from-scratch computation at every call."""

    def __init__(self) -> None:
        self.stage = AfsL()
        self.scan = ScanOrder()
        self.decisions = 0
        self.arrived_while_running = 0
        self._seen: set[str] = set()

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Shares:
        got = self.stage(view, stats)
        now, cap = view.now, view.capacity
        fresh = scan_order(view.active())
        assert self.scan.jobs(view) == fresh  # identity of every ActiveJob, in order
        assert remaining_all(fresh, now) == [j.remaining(now) for j in fresh]
        items = [AfsJob(j.spec.id, j.remaining(now), *build_ladder(j.spec, cap)) for j in fresh]
        want = afs_l_shares(items, cap)
        assert got == {it.id: c for it, c in zip(items, want, strict=True) if c > 0}
        ids = {j.spec.id for j in fresh}
        if view.running and ids - self._seen:
            self.arrived_while_running += 1
        self._seen |= ids
        self.decisions += 1
        return got


def test_stage_equals_the_from_scratch_computation_at_every_decision() -> None:
    checked = _Compared()
    jobs = workload(40, 80, seed=5)
    result, _, _ = simulate(
        Cluster.uniform(8, 8),
        jobs,
        StagedPolicy("afs-l", checked, best_fit_placement),
        sample_interval_s=None,
    )
    assert all(r.jct is not None for r in result.jobs)
    assert checked.decisions >= 150
    assert checked.arrived_while_running >= 50  # the incremental path, not only the first sort


def test_scan_order_handles_many_arrivals_departures_and_equal_submit_times() -> None:
    rng = random.Random(3)
    profile = ThroughputProfile.linear(1.0)
    pool = [
        JobSpec(
            id=f"j{i:03d}",
            submit_time=float(rng.randrange(5)),
            requested_gpus=1,
            total_iterations=10.0,
            elasticity=Elasticity(min_gpus=1, max_gpus=2),
            throughput=profile,
        )
        for i in range(300)
    ]
    scan = ScanOrder()

    for step in range(40):
        chosen = rng.sample(pool, rng.choice((0, 1, 5, 100, 200)))  # > 64 new: the re-sort
        view = ClusterState(
            now=float(step),
            cluster=Cluster.uniform(1, 8),
            jobs=[JobSnapshot(spec=s) for s in chosen],
        ).to_view()
        got = scan.jobs(view)
        assert [j.spec.id for j in got] == [j.spec.id for j in scan_order(view.active())]
        assert scan.ids == {s.id for s in chosen}
