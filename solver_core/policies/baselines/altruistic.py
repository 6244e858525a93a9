"""SRTF-E and SRSF-E: the "altruistic" elastic versions of SRTF/SRSF (AFS §5.5, Fig. 11).

000 digest §2.13: the primary goal is SRTF's (or SRSF's) — schedule by remaining time (service)
and give each selected job its *user-requested* GPUs; the secondary goal distributes the GPUs
left over "to running jobs to maximize the throughput". Implementation:

1. exactly the rigid SRTF/SRSF selection (:func:`~.shortest_first.rigid_by_rank`, same ranked
   queue, same tie-breaks): a job gets its requested count or nothing;
2. each spare GPU (one ladder step at a time) goes to the selected job whose normalised
   throughput grows the most per GPU, ``(P(c') - P(c)) / P(1) / (c' - c)`` — the quantity the
   AFS cluster-efficiency metric sums, so throughputs of different models are comparable.
   Growth follows the job's useful ladder, so no job ever exceeds its max useful GPUs; rigid
   jobs (one allowed count) never grow. Ties: submit time, then id.

Cost: the rigid selection as SRTF, plus O(M log M) for the leftover heap.
"""

from __future__ import annotations

import bisect
import heapq

from gpuplan.models import ClusterView, SolverStats

from ...helpers.ladders import Ladders
from ...helpers.ranked_queue import RankedQueue, RankKey
from ...placement.best_fit import best_fit_placement
from ...policy import Shares, StagedPolicy, Stateless
from ...registry import parameterless
from .shortest_first import remaining_service, remaining_time, rigid_by_rank


def grow_by_throughput(view: ClusterView, shares: Shares, ladders: Ladders) -> Shares:
    """Hand the GPUs ``shares`` leaves free to its jobs, largest normalised gain per GPU first.

    Mutates and returns ``shares``.
    """
    capacity = view.capacity
    free = capacity - sum(shares.values())
    if free <= 0:
        return shares
    heap: list[tuple[float, float, str, int, tuple[int, ...]]] = []

    def push(job_id: str, count: int, ladder: tuple[int, ...]) -> None:
        i = bisect.bisect_right(ladder, count)
        if i >= len(ladder):
            return
        job = view.running.get(job_id) or view.pending[job_id]
        rate = job.spec.throughput.rate
        nxt = ladder[i]
        gain = (rate(nxt) - rate(count)) / rate(1) / (nxt - count)
        if gain > 0:
            heapq.heappush(heap, (-gain, job.spec.submit_time, job_id, nxt, ladder))

    for job_id, count in shares.items():
        job = view.running.get(job_id) or view.pending[job_id]
        push(job_id, count, ladders(job, capacity))
    while free > 0 and heap:
        _, _, job_id, nxt, ladder = heapq.heappop(heap)
        step = nxt - shares[job_id]
        if step > free:
            continue
        shares[job_id] = nxt
        free -= step
        push(job_id, nxt, ladder)
    return shares


class AltruisticShortestFirst(Stateless):
    """Rigid shortest-first selection, then leftover GPUs by throughput gain."""

    def __init__(self, key: RankKey) -> None:
        self.ladders = Ladders()
        self._queue = RankedQueue(key)

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Shares:
        return grow_by_throughput(view, rigid_by_rank(view, self._queue), self.ladders)


def srtf_e_shares() -> AltruisticShortestFirst:
    """A fresh SRTF-E shares stage."""
    return AltruisticShortestFirst(remaining_time)


def srsf_e_shares() -> AltruisticShortestFirst:
    """A fresh SRSF-E shares stage."""
    return AltruisticShortestFirst(remaining_service)


POLICIES = [
    parameterless("srtf-e", lambda: StagedPolicy("srtf-e", srtf_e_shares(), best_fit_placement)),
    parameterless("srsf-e", lambda: StagedPolicy("srsf-e", srsf_e_shares(), best_fit_placement)),
]
