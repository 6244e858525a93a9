"""FIFO-backfill's per-size buckets and SJF's size skip (issue 28 item 1): same jobs, same order.

* Every decision of whole simulated runs (overload, node failures so jobs re-enter the queue)
  compares the kept buckets' backfill with the plain walk of the queue, and SJF's changes with
  the size skip against the same walk without it, with verify mode on (the kept buckets
  against a rebuild at every change-set sync).
* Hand-built views: the buckets follow arrivals, starts and re-entries from the change set,
  rebuild on a skipped view, and verify mode names a job whose kept place is wrong (a
  deliberately broken update: a re-entered job left in its old place).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import ActiveJob, Cluster, ClusterView, JobSpec, NodeFailure
from gpuplan.models.state import ChangeSet
from gpuplan.scenarios.mapping import map_rigid
from gpuplan.scenarios.synthetic import synthetic_jobs
from gpuplan.solver_core import change_verify
from gpuplan.solver_core.change_verify import ChangeSetMissed
from gpuplan.solver_core.helpers.size_buckets import SizeBuckets
from gpuplan.solver_core.helpers.size_parts import SizeParts
from gpuplan.solver_core.placement.best_fit import best_fit_placement
from gpuplan.solver_core.policies.baselines import shortest_first
from gpuplan.solver_core.policies.baselines.fifo import Fifo, fifo_starts
from gpuplan.solver_core.policies.baselines.sjf import sjf_shares
from gpuplan.solver_core.policy import StagedPolicy


def _jobs(n: int, gpus: int, load: float, seed: int) -> list[JobSpec]:
    mix = {1: 0.5, 2: 0.2, 4: 0.2, 8: 0.1}
    mean = sum(s * w for s, w in mix.items())
    rate_per_h = load * gpus * 3600.0 / (1800.0 * mean)
    return map_rigid(synthetic_jobs(n, rate_per_h, mix, 1800.0, seed))


def _failures(cluster: Cluster) -> list[NodeFailure]:
    names = [n.name for n in cluster.nodes]
    return [
        NodeFailure(time=1200.0 * (k + 1), node=names[k % len(names)], recover_after=900.0)
        for k in range(8)
    ]


class _CheckedBackfill(Fifo):
    """FIFO-backfill whose every delta also walks the whole queue and compares."""

    def __init__(self) -> None:
        super().__init__(backfill=True)
        self.compared = 0
        self.started = 0

    def delta(self, view: ClusterView, placement: Any) -> Any:
        if view.free_index is not None:
            free = view.free_index.total
            walk = fifo_starts(view, free, True, None)
            assert fifo_starts(view, free, True, self._buckets) == walk
            self.compared += 1
            self.started += len(walk)
        return super().delta(view, placement)


@pytest.mark.parametrize("load", [0.9, 1.5])
def test_backfill_buckets_start_what_the_walk_starts(
    monkeypatch: pytest.MonkeyPatch, load: float
) -> None:
    monkeypatch.setattr(change_verify, "VERIFY", True)
    rebuilds = []
    rebuild = SizeBuckets._rebuild
    monkeypatch.setattr(
        SizeBuckets, "_rebuild", lambda self, pending: rebuilds.append(1) or rebuild(self, pending)
    )
    cluster = Cluster.uniform(6, 8)
    stage = _CheckedBackfill()
    policy = StagedPolicy("fifo-backfill", stage, best_fit_placement)
    result, _, _ = simulate(
        cluster, _jobs(400, cluster.total_gpus, load, 7), policy, events=_failures(cluster)
    )
    assert stage.compared > 300 and stage.started > 300
    assert len(rebuilds) == 1  # only the first sync: every later one followed the change set
    assert sum(r.finish_time is not None for r in result.jobs) == 400
    assert sum(r.preemptions for r in result.jobs) > 0  # failed jobs re-entered the queue


def test_sjf_size_skip_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(change_verify, "VERIFY", True)
    original = shortest_first.changes_by_rank
    calls = {"n": 0, "skipped": 0}

    def both(view: ClusterView, order: list, running: Any, sized: bool = False) -> Any:
        got = original(view, order, running, sized)
        assert sized
        assert got == original(view, order, running, False)
        calls["n"] += 1
        return got

    monkeypatch.setattr(shortest_first, "changes_by_rank", both)
    cluster = Cluster.uniform(6, 8)
    policy = StagedPolicy("sjf", sjf_shares(), best_fit_placement)
    result, _, _ = simulate(
        cluster, _jobs(400, cluster.total_gpus, 1.5, 3), policy, events=_failures(cluster)
    )
    assert calls["n"] > 300
    assert sum(r.finish_time is not None for r in result.jobs) == 400


def _spec(job_id: str, gpus: int, t: float) -> JobSpec:
    return JobSpec(id=job_id, submit_time=t, requested_gpus=gpus, total_iterations=100.0)


def test_buckets_follow_the_change_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(change_verify, "VERIFY", False)  # also under GPUPLAN_VERIFY_CHANGES=1
    cluster = Cluster.uniform(1, 8)
    pending: dict[str, ActiveJob] = {}

    def view(seq: int, jobs: set[str]) -> ClusterView:
        return ClusterView(
            0.0, cluster, {}, {}, {}, dict(pending), changed=ChangeSet(9, seq, frozenset(jobs))
        )

    def ids() -> dict[int, list[str]]:
        return {n: [j for _, j in b] for n, b in buckets.buckets.items() if b}

    buckets = SizeBuckets()
    for job_id, gpus in [("a", 4), ("b", 1), ("c", 4), ("d", 2)]:
        pending[job_id] = ActiveJob(spec=_spec(job_id, gpus, 0.0))
    buckets.sync(view(1, set(pending)))
    assert ids() == {4: ["a", "c"], 1: ["b"], 2: ["d"]}
    assert buckets.backfill(7) == [("a", 4), ("b", 1), ("d", 2)]
    assert buckets.backfill(3) == [("b", 1), ("d", 2)]
    # a starts; b re-enters the queue (moved to its end); e arrives after it
    del pending["a"]
    job_b = pending.pop("b")
    pending["b"] = job_b
    pending["e"] = ActiveJob(spec=_spec("e", 1, 5.0))
    buckets.sync(view(2, {"a", "b", "e"}))
    assert ids() == {4: ["c"], 1: ["b", "e"], 2: ["d"]}
    assert buckets.backfill(8) == [("c", 4), ("d", 2), ("b", 1), ("e", 1)]
    # a named job that kept its place keeps it (d named, c after it unnamed)
    pending["f"] = ActiveJob(spec=_spec("f", 2, 6.0))
    buckets.sync(view(3, {"d", "f"}))
    assert ids() == {4: ["c"], 1: ["b", "e"], 2: ["d", "f"]}
    # an unnamed arrival stays unseen while the change set follows; a skipped view rebuilds
    pending["g"] = ActiveJob(spec=_spec("g", 8, 7.0))
    buckets.sync(view(4, set()))
    assert 8 not in ids()
    buckets.sync(view(6, set()))
    assert ids() == {4: ["c"], 1: ["b", "e"], 2: ["d", "f"], 8: ["g"]}


def test_verify_names_a_job_whose_kept_place_is_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deliberately wrong update (a re-entered job left in its old place) fails verify."""
    cluster = Cluster.uniform(1, 8)
    pending = {j: ActiveJob(spec=_spec(j, 1, 0.0)) for j in ("a", "b", "c")}

    def view(seq: int, jobs: set[str]) -> ClusterView:
        return ClusterView(
            0.0, cluster, {}, {}, {}, dict(pending), changed=ChangeSet(5, seq, frozenset(jobs))
        )

    monkeypatch.setattr(change_verify, "VERIFY", True)
    buckets = SizeBuckets()
    buckets.sync(view(1, set(pending)))
    pending["a"] = pending.pop("a")  # a re-enters the queue: now after c
    monkeypatch.setattr(SizeParts, "insert", lambda self, job_id, need, item: None)
    monkeypatch.setattr(SizeParts, "drop", lambda self, job_id: None)  # a stays first
    with pytest.raises(ChangeSetMissed, match=r"per-size buckets.*\['a'\]"):
        buckets.sync(view(2, {"a"}))
    monkeypatch.undo()
    monkeypatch.setattr(change_verify, "VERIFY", True)
    buckets = SizeBuckets()
    buckets.sync(view(1, set(pending)))
    pending["b"] = pending.pop("b")
    buckets.sync(view(2, {"b"}))  # the real update passes verify
    assert [j for _, j in buckets.buckets[1]] == ["c", "a", "b"]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["insert", "drop", "resize"]), st.integers(0, 11), st.integers(1, 4)
        ),
        max_size=60,
    )
)
def test_size_parts_hold_each_job_once_in_its_size_part_in_order(
    ops: list[tuple[str, int, int]],
) -> None:
    """The container under both splits, against a dictionary of jobs: after any sequence of
    inserts (any order of keys), drops and re-sizes each part is the sorted items of the jobs
    of that size, and a re-sized job keeps its item."""
    parts: SizeParts[tuple[int, str]] = SizeParts()
    truth: dict[str, tuple[int, tuple[int, str]]] = {}
    for op, key, need in ops:
        job_id = f"j{key}"
        if op == "insert" and job_id not in truth:
            item = ((key * 7) % 12, job_id)
            parts.insert(job_id, need, item)
            truth[job_id] = (need, item)
        elif op == "drop" and job_id in truth:
            parts.drop(job_id)
            del truth[job_id]
        elif op == "resize" and job_id in truth:
            parts.resize(job_id, need)
            truth[job_id] = (need, truth[job_id][1])
    want: dict[int, list[tuple[int, str]]] = {}
    for need, item in truth.values():
        want.setdefault(need, []).append(item)
    assert parts.filled() == {n: sorted(items) for n, items in want.items()}
    assert parts.place == truth
