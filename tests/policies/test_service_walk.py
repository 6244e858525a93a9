"""SRSF's delta walk (:func:`changes_by_service`, issue 28 round 8a) selects what the full
ranked walk (:func:`rigid_by_rank`) selects.

* on random views (hypothesis, seeded by its database) with interleaving GPU-count groups,
  exact ties (times and rates are dyadic, so every key is computed exactly on both sides and
  ties break by submit time and id alike), late jobs (in a pause, or at another rate) and
  overload (capacity below the running jobs' GPUs, long queues of jobs too big to fit): the
  same starts in the same order and the same preemptions; the job-by-job walk of
  :func:`changes_by_rank` agrees too;
* a hand-built view where taking a stretch whole, or walking it group by group instead of
  merged by the key, gives another selection;
* verify mode catches a per-size pending split that drifted from the queue.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.models import ActiveJob, ClusterView, JobSpec
from gpuplan.models.state import ChangeSet
from gpuplan.models.throughput import ThroughputProfile
from gpuplan.solver_core import change_verify
from gpuplan.solver_core.helpers.ranked_queue import RankedQueue
from gpuplan.solver_core.helpers.running_order import RunningOrder
from gpuplan.solver_core.policies.baselines.service_walk import changes_by_service
from gpuplan.solver_core.policies.baselines.shortest_first import (
    RunningKeys,
    changes_by_rank,
    remaining_service,
    rigid_by_rank,
)

NOW = 64.0

_JOB = st.tuples(
    st.sampled_from([1, 1, 2, 3, 4, 8]),  # requested GPUs
    st.sampled_from([0.5, 1.0, 2.0]),  # iterations/s at that size
    st.integers(1, 24),  # duration, units of 4 s
    st.integers(0, 3),  # submit time (ties)
    st.sampled_from(["run", "run", "run", "paused", "slow", "pending", "pending"]),
    st.integers(0, 15),  # start / resume time, units of 4 s before NOW
)


def _view(rows: list[tuple[int, float, int, int, str, int]], slack: int):
    running: dict[str, ActiveJob] = {}
    pending: dict[str, ActiveJob] = {}
    for n, (gpus, per_s, units, submit, state, back) in enumerate(rows):
        spec = JobSpec(
            id=f"j{n:02d}",
            submit_time=float(submit),
            requested_gpus=gpus,
            duration=4.0 * units + 64.0,
            throughput=ThroughputProfile(points={gpus: per_s}),
        )
        job = ActiveJob(spec=spec)
        if state == "pending":
            job.done = per_s * 4.0 * (units // 2)
            pending[spec.id] = job
            continue
        job.gpus = gpus
        job.rate = per_s if state != "slow" else per_s / 2.0
        job.anchor_time = NOW - 4.0 * back
        if state == "paused":
            job.resume_time = NOW + 4.0
        running[spec.id] = job
    capacity = max(0, sum(j.gpus for j in running.values()) + slack)
    return ClusterView(NOW, None, {}, {}, running, pending, capacity=capacity)  # type: ignore[arg-type]


def _walks(view: ClusterView):
    """(full walk's shares, the service walk's changes, the job-by-job walk's changes)."""
    full = RankedQueue(remaining_service, RunningKeys(service=True))
    shares = rigid_by_rank(view, full)
    queue = RankedQueue(remaining_service, RunningKeys(service=True), by_size=True)
    order = RunningOrder(remaining_service, service=True)
    assert order.sync(view.running, view.now)
    by_service = changes_by_service(view, queue.pending_by_size(view), order)
    by_rank = changes_by_rank(view, queue.pending_entries(view), order)
    return shares, by_service, by_rank


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(_JOB, max_size=40), st.integers(-6, 8))
def test_service_walk_selects_what_the_full_walk_selects(
    rows: list[tuple[int, float, int, int, str, int]], slack: int
) -> None:
    view = _view(rows, slack)
    shares, (starts, preempts), (rank_starts, rank_preempts) = _walks(view)
    want_starts = [(j, n) for j, n in shares.items() if j in view.pending]
    want_preempts = sorted(j for j in view.running if j not in shares)
    assert starts == want_starts  # the same jobs in the same (rank) order
    assert sorted(preempts) == want_preempts
    assert len(preempts) == len(set(preempts))
    assert rank_starts == want_starts and sorted(rank_preempts) == want_preempts


def _spec(job_id: str, gpus: int, seconds: float) -> JobSpec:
    return JobSpec(
        id=job_id,
        submit_time=0.0,
        requested_gpus=gpus,
        duration=seconds,
        throughput=ThroughputProfile(points={gpus: 1.0}),
    )


def test_a_stretch_that_does_not_fit_is_walked_merged_by_the_key() -> None:
    """Four GPUs at t=0.5; pending ``p`` (service 1) starts first and leaves 3. The
    running jobs after it are ``a`` (1 GPU, service 1.5), ``b`` (2 GPUs, service 1.5 x 2 =
    3: between ``a`` and ``c``) and ``c`` (1 GPU, service 4.5): 4 GPUs, so the stretch does
    not fit whole (taking it would run 5 GPUs on 4). Merged by the key: ``a`` and ``b``
    fit, ``c`` does not. Walking the 1-GPU group first would keep ``a`` and ``c`` and
    preempt ``b``."""
    running: dict[str, ActiveJob] = {}
    for job_id, gpus, seconds in (("a", 1, 2.0), ("b", 2, 2.0), ("c", 1, 5.0)):
        spec = _spec(job_id, gpus, seconds)
        running[job_id] = ActiveJob(spec=spec, gpus=gpus, rate=1.0)  # since t=0
    pending = {"p": ActiveJob(spec=_spec("p", 1, 1.0))}
    view = ClusterView(0.5, None, {}, {}, running, pending, capacity=4)  # type: ignore[arg-type]
    shares, (starts, preempts), _ = _walks(view)
    assert starts == [("p", 1)]
    assert preempts == ["c"]
    assert set(shares) == {"p", "a", "b"}


def test_a_pending_job_too_big_does_not_bound_the_running_stretch() -> None:
    """A long queue of 8-GPU jobs ranked before the running ones, one free GPU: none of them
    fits, every running job keeps running, and a 1-GPU job behind them all starts."""
    running = {}
    for n in range(3):
        spec = _spec(f"r{n}", 1, 50.0 + n)
        running[spec.id] = ActiveJob(spec=spec, gpus=1, rate=1.0)
    pending = {f"q{n}": ActiveJob(spec=_spec(f"q{n}", 8, 1.0 + n)) for n in range(20)}
    pending["z"] = ActiveJob(spec=_spec("z", 1, 900.0))
    view = ClusterView(1.0, None, {}, {}, running, pending, capacity=4)  # type: ignore[arg-type]
    shares, (starts, preempts), _ = _walks(view)
    assert starts == [("z", 1)] and preempts == []
    assert set(shares) == {"r0", "r1", "r2", "z"}


def test_verify_catches_a_drifted_size_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """A per-size list that lost an entry (a broken update) fails the next change-set sync
    under verify mode, naming the job."""
    monkeypatch.setattr(change_verify, "VERIFY", True)
    pending = {f"q{n}": ActiveJob(spec=_spec(f"q{n}", 1 + n % 3, 10.0 + n)) for n in range(6)}
    view = ClusterView(  # type: ignore[arg-type]
        0.0, None, {}, {}, {}, pending, capacity=4, changed=ChangeSet(7, 1, frozenset(pending))
    )
    queue = RankedQueue(remaining_service, RunningKeys(service=True), by_size=True)
    queue.pending_by_size(view)
    del queue.pending_by_size(view)[2][0]  # the broken update
    later = ClusterView(  # type: ignore[arg-type]
        1.0, None, {}, {}, {}, pending, capacity=4, changed=ChangeSet(7, 2, frozenset())
    )
    with pytest.raises(change_verify.ChangeSetMissed, match="q1"):
        queue.pending_by_size(later)
