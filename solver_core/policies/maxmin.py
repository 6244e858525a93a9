"""Max-Min: elastic max-min fair water-filling over GPUs (AFS paper baseline, length-unaware).

000 digest §2.13: Max-Min "distributes available resources across all jobs in max-min
fairness" with individual-GPU-level preemption and no knowledge of job lengths. Implementation
(digest's inferred reading, made exact here):

* each job may hold the counts of its *useful ladder* — its allowed counts up to its max useful
  GPUs (:func:`~.max_gpus.useful_ladder`): GPUs past the throughput peak would be wasted;
* **first steps in arrival order**: every job, oldest first, gets its smallest allowed count
  (1 GPU for the AFS mapping) while GPUs last; a job whose smallest count no longer fits is
  skipped. So when jobs outnumber GPUs (n > M) the M oldest jobs run on one GPU each — the
  digest's "use FIFO by arrival" for the tie the paper leaves open;
* **water-filling**: the remaining GPUs go one ladder step at a time to the running job with the
  fewest GPUs (ties: oldest first) until every job is at its max useful count or GPUs run out.

With unit ladders this is exactly integer water-filling: a water level L with every job at
``min(cap, L)`` and the leftover ``M - sum`` given one each to the oldest jobs still below their
cap. Recomputed from scratch at every event (resource-level preemption).

Cost per decision: the arrival-ordered queue is kept sorted across decisions (static key), the
first-step walk stops when GPUs run out, and water-filling touches only jobs holding GPUs (at
most M) through a heap: O(M log M) plus the walk.

:func:`progressive_fill` is shared with Optimus, which differs only in the heap's priority.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from gpuplan.models import ActiveJob, ClusterView, SolverStats

from ..placement.best_fit import best_fit_placement
from ..policy import Shares, StagedPolicy
from .max_gpus import Ladders
from .ranked_queue import RankedQueue

StepScore = Callable[[ActiveJob, int, int], float | None]
"""(job, current count, next count) -> priority of that step (lower first), None = never."""


def arrival_key(job: ActiveJob, now: float) -> float:
    """Rank by submit time (ties: id, added by :class:`RankedQueue`)."""
    return job.spec.submit_time


def progressive_fill(
    view: ClusterView, order: Iterable[ActiveJob], ladders: Ladders, score: StepScore
) -> Shares:
    """First ladder step to each job of ``order`` while GPUs last, then grow by ``score``.

    Phase 1 walks ``order`` and stops as soon as no GPU is free, so a 50k-job queue costs only
    the jobs actually served. Phase 2 repeatedly grants the next ladder step with the lowest
    score among jobs already holding GPUs (ties: the order of phase 1); a job whose next step
    does not fit, or whose score is None, stops growing.
    """
    capacity = view.capacity
    free = capacity
    shares: Shares = {}
    heap: list[tuple[float, int, int, ActiveJob, tuple[int, ...]]] = []
    rank = 0
    for job in order:
        if free == 0:
            return shares
        ladder = ladders(job, capacity)
        if not ladder or ladder[0] > free:
            continue
        count = ladder[0]
        shares[job.spec.id] = count
        free -= count
        if len(ladder) > 1:
            s = score(job, count, ladder[1])
            if s is not None:
                heap.append((s, rank, 0, job, ladder))
        rank += 1
    heapq.heapify(heap)
    while free > 0 and heap:
        _, r, i, job, ladder = heapq.heappop(heap)
        count, nxt = ladder[i], ladder[i + 1]
        if nxt - count > free:
            continue
        shares[job.spec.id] = nxt
        free -= nxt - count
        if i + 2 < len(ladder):
            s = score(job, nxt, ladder[i + 2])
            if s is not None:
                heapq.heappush(heap, (s, r, i + 1, job, ladder))
    return shares


def _fewest_first(job: ActiveJob, count: int, nxt: int) -> float:
    return float(count)


class MaxMinShares:
    """Max-min fair shares stage; keeps the arrival-ordered queue between decisions."""

    def __init__(self) -> None:
        self.ladders = Ladders()
        self._queue = RankedQueue(arrival_key)

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Shares:
        return progressive_fill(view, self._queue.ranked(view), self.ladders, _fewest_first)


def maxmin_shares() -> MaxMinShares:
    """A fresh Max-Min shares stage."""
    return MaxMinShares()


POLICIES = {
    "max-min": (
        lambda: StagedPolicy("max-min", maxmin_shares(), best_fit_placement),
        "elastic max-min fair water-filling up to max useful GPUs; FIFO when jobs outnumber "
        "GPUs (length-unaware)",
    ),
}
