"""The AFS stages' per-event shortcuts equal the from-scratch computation at every decision.

The AFS-L and AFS-P stages keep per-job columns across decisions (:class:`AfsColumns`: scan
order, ladder index, remaining-work and held-time anchors), updated from the view's change set,
and hand the solver columns instead of :class:`AfsJob`s. Here simulated runs with arrivals,
completions and resizes check, at every decision, that the result equals what
``scan_order(view.active())``, ``ActiveJob.remaining`` and ``afs_l_shares`` on freshly built
ladders give (AFS-L), and what a fresh AFS-P stage given the previous counters decides
(AFS-P); both with verify mode on, which also compares every kept row with a from-scratch
rebuild. A change set that leaves a written job out must raise :class:`ChangeSetMissed`.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

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
from gpuplan.models.state import ChangeSet
from gpuplan.solver_core import change_verify
from gpuplan.solver_core.placement.best_fit import best_fit_placement
from gpuplan.solver_core.policies.afs.afs import (
    AfsJob,
    AfsL,
    AfsP,
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

    def delta(self, view: ClusterView, placement: object) -> None:
        # Decline the fast path (tests/policies/test_afs_delta.py checks it), after syncing
        # the columns on the engine's live view, which carries the event's change set.
        self.stage.columns.sync(view)


@pytest.fixture
def verify(monkeypatch: pytest.MonkeyPatch) -> None:
    """Verify mode on: every change-set sync also rebuilds the columns and compares."""
    monkeypatch.setattr(change_verify, "VERIFY", True)


def test_stage_equals_the_from_scratch_computation_at_every_decision(verify: None) -> None:
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
    # the columns were kept: only the first decision rebuilt every row
    assert checked.stage.columns.full_syncs <= 2


class _ComparedP(Stateless):
    """The production AFS-P stage against a fresh stage given the previous decision's counters
    (which rebuilds every row from the view: the from-scratch path) at every call."""

    def __init__(self, unit_time: float) -> None:
        self.unit_time = unit_time
        self.stage = AfsP(unit_time=unit_time, seed=3)
        self.decisions = 0
        self.slicing = 0

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Shares:
        before = self.stage.snapshot()
        fresh = AfsP(unit_time=self.unit_time, seed=3)
        fresh.restore(before)
        want = fresh(view, [])
        got = self.stage(view, stats)
        assert list(got.items()) == list(want.items())  # same shares, same order
        assert self.stage.snapshot() == fresh.snapshot()
        now = view.now
        assert self.stage.counters() == {j.spec.id: fresh.counter(j, now) for j in view.active()}
        self.decisions += 1
        self.slicing += self.stage.time_slicing
        return got

    def delta(self, view: ClusterView, placement: object) -> None:
        self.stage.columns.sync(view)  # declined, as _Compared.delta


def test_afs_p_stage_equals_a_fresh_stage_at_every_decision(verify: None) -> None:
    checked = _ComparedP(unit_time=900.0)
    jobs = workload(40, 80, seed=11)
    simulate(
        Cluster.uniform(2, 8),  # 16 GPUs for 40+ jobs: time slicing by counters
        jobs,
        StagedPolicy(
            "afs-p",
            checked,
            best_fit_placement,
            checked.stage.next_wakeup,
            memory=checked.stage,
        ),
        sample_interval_s=None,
        horizon_s=40 * 3600.0,
    )
    assert checked.decisions >= 150
    assert checked.slicing >= 100  # the counter ranking, keepers included, not only n <= M
    assert checked.stage.columns.full_syncs <= 2


class _Dropping(Stateless):
    """An AFS stage whose views' change sets leave out one running job that was written
    (a deliberately wrong update): verify mode must name it."""

    def __init__(self, stage: Any) -> None:
        self.stage = stage
        self.dropped: str | None = None

    def _drop(self, view: ClusterView) -> None:
        changed = view.changed
        if self.dropped is None and changed is not None and changed.seq > 3:
            victims = sorted(j for j in changed.jobs if j in view.running)
            if victims:
                self.dropped = victims[0]
                view.changed = ChangeSet(changed.stream, changed.seq, changed.jobs - {self.dropped})

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Shares:
        self._drop(view)
        return self.stage(view, stats)

    def delta(self, view: ClusterView, placement: Any) -> Any:
        self._drop(view)  # the live view carries the event's change set
        return self.stage.delta(view, placement)


@pytest.mark.parametrize("stage", [AfsL, lambda: AfsP(unit_time=900.0)], ids=["afs-l", "afs-p"])
def test_a_change_set_missing_a_written_job_is_caught(verify: None, stage: Any) -> None:
    dropping = _Dropping(stage())
    with pytest.raises(change_verify.ChangeSetMissed) as err:
        simulate(
            Cluster.uniform(2, 8),
            workload(20, 40, seed=5),
            StagedPolicy("afs", dropping, best_fit_placement),
            sample_interval_s=None,
        )
    assert dropping.dropped is not None
    assert dropping.dropped in str(err.value)


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
