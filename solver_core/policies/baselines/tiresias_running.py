"""Tiresias-L's running jobs kept across decisions: crossing times and per-queue rank lists.

A running job's attained service grows linearly while it holds a fixed GPU count, so the
first instant its demotion test (:meth:`~.tiresias.TiresiasL._demote`'s comparison, exactly
as written there) holds is fixed from the moment its fields were last written until they are
written again, and every write names the job in the view's change set. :class:`RunningSide`
keeps, for each running job,

* its **crossing time**: the smallest float ``t`` at which the demotion test is true
  (:func:`first_true`: the test is monotone in ``t``, so a bisection over floats finds the
  very instant the per-decision comparison would first pass; no closed form that could
  round the other way). Demotions at ``now`` are the jobs whose crossing time is ``<= now``;
  the next wake-up is the smallest exact wake-up value among the few jobs whose crossing
  time is within a rounding bound of the smallest (:meth:`RunningSide.earliest`);
* its **rank** ``(seq, id)`` in its queue's running list, with its rigid size, and each
  queue's size total, so the walk (:func:`changes_by_queue`) grants a queue's running jobs
  that all fit in O(1), and otherwise walks back from the list's end: the work follows the
  jobs preempted, not the jobs running.

Everything else stays in :class:`~.tiresias.TiresiasL` (stints, waiting queue, promotions).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable
from operator import itemgetter

Entry = tuple  # a waiting entry (queue, 1, seq, id), as in .tiresias

__all__ = ["RunningSide", "changes_by_queue", "first_true"]

_FIRST = itemgetter(0)

_ERR = 1e-9
"""Relative bound on the distance between a job's crossing time and its exact wake-up value
other than the threshold epsilon over its pace (floats round each of a handful of operations
by 1.1e-16 relative: this is ~10^7 times that)."""


def first_true(pred: Callable[[float], bool], lo: float, guess: float) -> float:
    """The smallest float ``t > lo`` with ``pred(t)``, for ``pred`` monotone (False at ``lo``,
    True from some point on; ``inf`` when it never is). ``guess``: an estimate of the answer
    (a closed form), so the bracket is a few ulps wide and the bisection takes few steps."""
    hi = guess if guess > lo and guess == guess else math.nextafter(lo, math.inf)
    step = math.ulp(hi)
    while not pred(hi):  # bracket from above
        if hi == math.inf:
            return math.inf
        lo, hi = hi, hi + step
        step *= 2.0
    step = math.ulp(hi)
    while True:  # and from below
        cand = hi - step
        if cand <= lo:
            break
        if pred(cand):
            hi = cand
            step *= 2.0
        else:
            lo = cand
            break
    while True:
        mid = lo + (hi - lo) / 2.0
        if mid <= lo or mid >= hi:
            return hi
        if pred(mid):
            hi = mid
        else:
            lo = mid


class RunningSide:
    """Running jobs' crossing times (ascending) and each queue's running jobs by ``seq``."""

    __slots__ = (
        "capacity",
        "cross",
        "cross_of",
        "err",
        "odd",
        "rank_of",
        "ranks",
        "seen",
        "sizes",
        "totals",
    )

    def __init__(self, queues: int, capacity: int) -> None:
        self.capacity = capacity
        """The usable capacity the sizes were computed for."""
        self.cross: list[tuple[float, str]] = []
        """``(crossing time, id)`` ascending, finite times only."""
        self.cross_of: dict[str, float] = {}
        self.err = 0.0
        """Largest rounding bound of any entry so far (:meth:`earliest`)."""
        self.rank_of: dict[str, tuple[int, int, int]] = {}
        """Running job -> (queue, seq, size): every running job the side knows."""
        self.ranks: list[list[tuple[int, str]]] = [[] for _ in range(queues)]
        self.sizes: list[list[int]] = [[] for _ in range(queues)]
        self.totals = [0] * queues
        self.odd: set[str] = set()
        """Running jobs whose size differs from the GPUs they hold (the walk would resize
        them: the caller then takes the full path)."""
        self.seen: tuple[int, int] | None = None
        """``(stream, seq)`` of the change set of the last sync."""

    def __len__(self) -> int:
        return len(self.rank_of)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self.rank_of

    def put(
        self,
        job_id: str,
        queue: int,
        seq: int,
        size: int,
        gpus: int,
        cross: float,
        scale: float,
    ) -> None:
        """(Re-)key a running job. ``scale``: the magnitude its wake-up value is computed
        from (:meth:`earliest`'s rounding bound)."""
        self.drop(job_id)
        self.rank_of[job_id] = (queue, seq, size)
        ranks, sizes = self.ranks[queue], self.sizes[queue]
        at = bisect.bisect_left(ranks, (seq, job_id))
        ranks.insert(at, (seq, job_id))
        sizes.insert(at, size)
        self.totals[queue] += size
        if size != gpus:
            self.odd.add(job_id)
        if cross < math.inf:
            self.cross_of[job_id] = cross
            bisect.insort(self.cross, (cross, job_id))
            err = _ERR * (1.0 + abs(cross) + scale)
            if err > self.err:
                self.err = err

    def drop(self, job_id: str) -> None:
        found = self.rank_of.pop(job_id, None)
        if found is None:
            return
        queue, seq, size = found
        ranks = self.ranks[queue]
        at = bisect.bisect_left(ranks, (seq, job_id))
        del ranks[at]
        del self.sizes[queue][at]
        self.totals[queue] -= size
        self.odd.discard(job_id)
        cross = self.cross_of.pop(job_id, None)
        if cross is not None:
            del self.cross[bisect.bisect_left(self.cross, (cross, job_id))]

    def due(self, now: float) -> list[str]:
        """The jobs whose crossing time is ``<= now`` (their demotion test holds at ``now``)."""
        cross = self.cross
        n = bisect.bisect_right(cross, now, key=_FIRST)
        return [job_id for _, job_id in cross[:n]]

    def earliest(self, wake_of: Callable[[str], float]) -> float:
        """The smallest ``wake_of(job)`` over the jobs with a crossing time. A job's wake-up
        value lies within ``err`` of its crossing time plus at most the threshold epsilon
        over its pace, never below the crossing time less ``err``: scanning in crossing
        order, a job whose crossing time less ``err`` exceeds the best value so far cannot
        beat it, nor can any after it."""
        best = math.inf
        err = self.err
        for cross, job_id in self.cross:
            if cross - err > best:
                break
            wake = wake_of(job_id)
            if wake < best:
                best = wake
        return best


def changes_by_queue(
    side: RunningSide,
    waiting: dict[int, list[Entry]],
    capacity: int,
) -> tuple[list[tuple[str, int]], list[str]]:
    """:func:`~.tiresias.rigid_walk` over Tiresias' order as changes: ``(starts, preempts)``,
    the waiting jobs granted (in rank order, with their size) and the running jobs not.

    The order is queue by queue, each queue's running jobs (by ``seq``) before its waiting
    ones (``waiting``: size -> entries ``(queue, 1, seq, id)`` ascending, the
    `~.tiresias.SizedQueue` buckets). Every running job holds its size (the
    caller checks ``side.odd`` is empty). A queue's running jobs that all fit are granted in
    one step; otherwise the longest prefix that fits is found by walking back from the end
    (what is walked is preempted, or granted into the few GPUs left), and the rest of the
    greedy walk is the same job by job. Waiting jobs: a k-way merge of the size buckets that
    still fit, as :meth:`SizedQueue.walk`."""
    free = capacity
    starts: list[tuple[str, int]] = []
    preempts: list[str] = []
    for q, ranks in enumerate(side.ranks):
        sizes = side.sizes[q]
        total = side.totals[q]
        if total <= free:
            free -= total
        else:
            i, pref = len(sizes), total
            while pref > free:
                i -= 1
                pref -= sizes[i]
            free -= pref
            for k in range(i, len(sizes)):
                if sizes[k] <= free:
                    free -= sizes[k]
                else:
                    preempts.append(ranks[k][1])
        if free <= 0:
            continue
        heap: list[tuple[Entry, int, int, list[Entry]]] = []
        low = (q,)
        for size, bucket in waiting.items():
            if 0 < size <= free and bucket:
                at = bisect.bisect_left(bucket, low)
                if at < len(bucket) and bucket[at][0] == q:
                    heap.append((bucket[at], size, at, bucket))
        heapq.heapify(heap)
        while heap:
            entry, size, at, bucket = heapq.heappop(heap)
            if size > free:
                continue
            starts.append((entry[-1], size))
            free -= size
            if free == 0:
                break
            at += 1
            if at < len(bucket) and bucket[at][0] == q:
                heapq.heappush(heap, (bucket[at], size, at, bucket))
    return starts, preempts
