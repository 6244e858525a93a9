"""SRTF and SRSF for rigid jobs, preemptive (AFS paper baselines, 000 digest §2.13).

* SRTF: shortest remaining *time* first, remaining time = remaining iterations / P(requested).
* SRSF: shortest remaining *service* first, service = remaining time x requested GPUs, which
  penalises many-GPU jobs and so reduces head-of-line blocking.

At every decision all active jobs are ranked; in rank order each job gets its requested GPUs if
they are still free (a job that does not fit is skipped, so the schedule is work-conserving).
Running jobs that fall out of the selection are preempted. Ties break by submit time, then id,
so the result is deterministic.
"""

from __future__ import annotations

from gpuplan.models import ActiveJob, ClusterView, SolverStats

from ..policy import Shares
from .ranked_queue import RankedQueue, RankKey


def remaining_time(job: ActiveJob, now: float) -> float:
    spec = job.spec
    left = spec.total_iterations - job.done_at(now)  # type: ignore[operator]
    return max(0.0, left) / spec.throughput.rate(spec.requested_gpus)


def remaining_service(job: ActiveJob, now: float) -> float:
    return remaining_time(job, now) * job.spec.requested_gpus


def rigid_by_rank(view: ClusterView, queue: RankedQueue) -> Shares:
    """Give each job, in ascending rank, its requested GPUs while they last (skip misfits)."""
    free = view.capacity
    shares: Shares = {}
    for job in queue.ranked(view):
        need = job.spec.requested_gpus
        if need <= free:
            shares[job.spec.id] = need
            free -= need
            if free == 0:
                break
    return shares


class ShortestFirst:
    """Shares stage ranking jobs by ``key``; keeps its sorted queue between decisions."""

    def __init__(self, key: RankKey) -> None:
        self._queue = RankedQueue(key)

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Shares:
        return rigid_by_rank(view, self._queue)


def srtf_shares() -> ShortestFirst:
    """A fresh SRTF shares stage."""
    return ShortestFirst(remaining_time)


def srsf_shares() -> ShortestFirst:
    """A fresh SRSF shares stage."""
    return ShortestFirst(remaining_service)
