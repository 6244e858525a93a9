"""Max-Min: elastic max-min fair water-filling over GPUs (AFS paper baseline, length-unaware).

000 digest §2.13: Max-Min "distributes available resources across all jobs in max-min
fairness" with individual-GPU-level preemption and no knowledge of job lengths. Implementation
(digest's inferred reading, made exact here):

* each job may hold the counts of its *useful ladder* — its allowed counts up to its max useful
  GPUs (:func:`~.ladders.useful_ladder`): GPUs past the throughput peak would be wasted;
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

:func:`progressive_fill` is shared with Optimus, which differs only in the heap's priority, and
its core, :func:`~.water_fill.water_fill`, with AFS-S.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np

from gpuplan.models import ActiveJob, ClusterView, SolverStats

from ... import change_verify
from ...helpers.ladders import Ladders
from ...helpers.ranked_queue import RankedQueue
from ...helpers.water_fill import water_fill
from ...placement.best_fit import best_fit_placement
from ...policy import Decision, Delta, PlacementStage, Shares, StagedPolicy, Stateless
from ...registry import parameterless
from ..afs.afs_columns import AfsColumns
from ..afs.afs_delta import counts_delta
from .maxmin_level import LadderSteps, check_counts, level_counts

StepScore = Callable[[ActiveJob, int, int], float | None]
"""(job, current count, next count) -> priority of that step (lower first), None = never."""


def arrival_key(job: ActiveJob, now: float) -> float:
    """Rank by submit time (ties: id, added by :class:`RankedQueue`)."""
    return job.spec.submit_time


def progressive_fill(
    view: ClusterView,
    order: Iterable[ActiveJob],
    ladders: Ladders,
    score: StepScore | None = None,
) -> Shares:
    """First ladder step to each job of ``order`` while GPUs last, then grow by ``score``.

    :func:`~.water_fill.water_fill` over the jobs' useful ladders on ``view.capacity`` GPUs:
    phase 1 walks ``order`` lazily and stops as soon as no GPU is free, so a 50k-job queue
    costs only the jobs actually served; phase 2 repeatedly grants the next ladder step with
    the lowest score (default: fewest GPUs held, i.e. max-min) among jobs already holding GPUs
    (ties: the order of phase 1); a job whose next step does not fit, or whose score is None,
    stops growing. Shares are keyed in the order jobs were first served.
    """
    capacity = view.capacity
    seen: list[ActiveJob] = []

    def walk() -> Iterator[tuple[int, ...]]:
        for job in order:
            seen.append(job)
            yield ladders(job, capacity)

    def step(pos: int, count: int, nxt: int) -> float | None:
        assert score is not None
        return score(seen[pos], count, nxt)

    filled = water_fill(walk(), capacity, None if score is None else step)
    return {seen[pos].spec.id: count for pos, count in filled.items()}


class MaxMinShares(Stateless):
    """Max-min fair shares stage; keeps the arrival-ordered queue between decisions.

    The full protocol (``__call__``) runs :func:`progressive_fill`. The engine's fast path
    (:meth:`delta`) computes the same counts by water level
    (:func:`~.maxmin_level.level_counts`) over per-job columns kept from the view's change
    set (:class:`~..afs.afs_columns.AfsColumns`: arrival order is AFS's scan order, with
    the useful ladders here) and answers with the jobs whose count changed."""

    SMALL = 256
    """Below this many GPUs :meth:`delta` declines: the water-fill is ~SMALL heap steps, and
    the full protocol cost less than the columns' numpy passes (64 GPUs / 2k jobs at load
    0.9: 1.7 CPU-s full, 3.1 on the fast path; docs/performance.md, round 8b)."""

    def __init__(self) -> None:
        self.ladders = Ladders()
        self._queue = RankedQueue(arrival_key)
        self.columns = AfsColumns(Ladders())
        self._steps = LadderSteps()

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Shares:
        return progressive_fill(view, self._queue.ranked(view), self.ladders)

    def counts(self, view: ClusterView) -> np.ndarray:
        """The water-fill's count per row of :attr:`columns`, synced to ``view``. Verify mode
        (:data:`~...change_verify.VERIFY`) also runs :func:`progressive_fill` and raises
        naming the first job whose count differs."""
        cols = self.columns
        cols.sync(view)
        counts = level_counts(
            cols.did,
            cols.ladder_arrays(),
            [lad[0] for lad in cols.ladders],
            view.capacity,
            self._steps,
        )
        if change_verify.VERIFY:
            full = progressive_fill(view, self._queue.ranked(view), self.ladders)
            check_counts(cols.ids.tolist(), counts, full)
        return counts

    def delta(self, view: ClusterView, placement: PlacementStage) -> Delta | Decision | None:
        """The engine's fast path: the same counts, answered as the jobs whose count changed
        (:func:`~..afs.afs_delta.counts_delta`; in full where a delta cannot stand for
        them). None (the engine then calls ``decide``) on a cluster of fewer than
        :attr:`SMALL` GPUs, or for a subclass that divides otherwise."""
        if view.capacity < self.SMALL or type(self).__call__ is not MaxMinShares.__call__:
            return None
        return counts_delta(view, self.columns, self.counts(view), placement, [])


def maxmin_shares() -> MaxMinShares:
    """A fresh Max-Min shares stage."""
    return MaxMinShares()


POLICIES = [
    parameterless("max-min", lambda: StagedPolicy("max-min", maxmin_shares(), best_fit_placement)),
]
