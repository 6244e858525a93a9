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

import bisect
from collections.abc import Mapping

from gpuplan.models import ActiveJob, ClusterView, JobSpec, SolverStats
from gpuplan.models.state import remaining_work

from ...delta import delta_from_changes, delta_from_shares, delta_ready
from ...helpers.ranked_queue import Entry, RankedQueue, RankKey
from ...helpers.running_order import RunningOrder
from ...placement.best_fit import best_fit_placement
from ...policy import Decision, Delta, PlacementStage, Shares, StagedPolicy, Stateless
from ...registry import parameterless
from .service_walk import changes_by_service

_AFTER_ALL = float("inf")
"""A submit time above every job's: ``(key, _AFTER_ALL)`` sorts after each entry of ``key``."""


def remaining_time(job: ActiveJob, now: float) -> float:
    """Seconds left at the requested size: :func:`~gpuplan.models.state.remaining_work` over
    the rate at that size (a profile's rate at a request is > 0; the loop below keeps it per
    job)."""
    spec = job.spec
    return remaining_work(job, now) / spec.throughput.rate(spec.requested_gpus)


def remaining_service(job: ActiveJob, now: float) -> float:
    return remaining_time(job, now) * job.spec.requested_gpus


class RunningKeys:
    """SRTF's (``service`` False) or SRSF's keys of every running job, ascending, in one pass.

    The same float operations as :func:`remaining_time` (times the GPU count for SRSF), with
    each job's constants (rate at its requested size, submit time, GPU count) cached
    per job and spec object: a new spec (a measured throughput replaces it) is re-read. The
    rate lookup was a fifth of SRTF's decision time (every running job, every event)."""

    __slots__ = ("_cache", "service")

    def __init__(self, service: bool) -> None:
        self.service = service
        self._cache: dict[str, tuple[JobSpec, float, float, int]] = {}

    def __call__(self, running: Mapping[str, ActiveJob], now: float) -> list[Entry]:
        cache = self._cache
        if len(cache) > 2 * len(running) + 64:  # drop jobs no longer running
            self._cache = cache = {j: c for j, c in cache.items() if j in running}
        service = self.service
        out: list[Entry] = []
        append = out.append
        for job_id, job in running.items():
            spec = job.spec
            c = cache.get(job_id)
            if c is None or c[0] is not spec:
                c = (
                    spec,
                    spec.throughput.rate(spec.requested_gpus),
                    spec.submit_time,
                    spec.requested_gpus,
                )  # type: ignore[assignment]
                cache[job_id] = c  # type: ignore[assignment]
            _, per_s, submit, gpus = c
            key = remaining_work(job, now) / per_s
            append((key * gpus if service else key, submit, job_id))
        out.sort()
        return out


def rigid_by_rank(view: ClusterView, queue: RankedQueue) -> Shares:
    """Give each job, in ascending rank, its requested GPUs while they last (skip misfits).

    Walks :meth:`RankedQueue.entries` with two cursors: the same order as iterating
    :meth:`RankedQueue.ranked` (entries are unique, ids differ), without a generator frame
    and a heap operation per job."""
    free = view.capacity
    shares: Shares = {}
    running, order = queue.entries(view)
    jobs, pending = view.running, view.pending
    i = j = 0
    n_running, n_pending = len(running), len(order)
    while i < n_running or j < n_pending:
        if j == n_pending or (i < n_running and running[i] < order[j]):
            job = jobs[running[i][2]]
            i += 1
        else:
            job = pending[order[j][2]]
            j += 1
        need = job.spec.requested_gpus
        if need <= free:
            shares[job.spec.id] = need
            free -= need
            if free == 0:
                break
    return shares


def changes_by_rank(  # noqa: C901 (a named exception to the complexity gate)
    view: ClusterView,
    pending_order: list[Entry],
    order: RunningOrder,
    sized: bool = False,
) -> tuple[list[tuple[str, int]], list[str]]:
    """:func:`rigid_by_rank`'s selection as changes: ``(starts, preempts)``, the pending jobs
    that get their request (rank order) and the running jobs that fall out.

    The same greedy walk over the merged order, except that a stretch of regular running
    jobs of one group ranked before every other head (pending, late, other groups) is taken
    in one step: found by bisection on ``C`` and summed at C speed over the shorter of the
    stretch and the group's tail (group total less what was taken less the tail: a stretch
    to the group's end costs O(1)); only when the stretch does not fit as a whole is it
    walked job by job. A running job's key only falls relative
    to the pending keys, so after a decision the walk meets few pending jobs ahead of running
    ones: per event the cost is O((pending jobs visited + stretches) x (groups + log n)) plus
    the changes.

    ``sized`` (SJF): a pending job's key is its requested GPU count, so the pending order is
    split by size into consecutive runs; a pending job that does not fit skips its whole
    run by bisection (free GPUs only shrink, so no later job of that size fits either)
    instead of visiting the misfits one by one."""
    now = view.now
    free = view.capacity
    running, pending = view.running, view.pending
    late, late_need = order.late_entries(running, now)
    groups = [(m, entries, needs) for m, (entries, needs) in order.groups.items() if entries]
    cursor = [0] * len(groups)
    totals = order.totals
    taken = [0] * len(groups)
    """Requested GPUs of each group's entries before its cursor."""
    starts: list[tuple[str, int]] = []
    preempts: list[str] = []
    li = p = 0
    n_late, n_pending = len(late), len(pending_order)
    while free > 0:
        head = pending_order[p] if p < n_pending else None
        if li < n_late and (head is None or late[li] < head):
            head = late[li]
        tops: list[tuple[Entry, int]] = []
        for g, (m, entries, _) in enumerate(groups):
            i = cursor[g]
            if i < len(entries):
                c, submit, job_id = entries[i]
                tops.append(((c if m == 0 else (c - now) * m, submit, job_id), g))
        if len(tops) > 1:
            tops.sort()
        if tops and (head is None or tops[0][0] < head):
            g = tops[0][1]
            m, entries, needs = groups[g]
            i = cursor[g]
            bound = head
            if len(tops) > 1 and (bound is None or tops[1][0] < bound):
                bound = tops[1][0]
            if bound is None:
                j = len(entries)
            else:
                c_bound = bound[0] if m == 0 else bound[0] / m + now
                j = max(i + 1, bisect.bisect_left(entries, (c_bound, bound[1], bound[2]), i))
            n = len(entries)
            if j - i <= n - j:
                total = sum(needs[i:j])
            else:  # the tail is shorter (empty when the stretch runs to the end)
                total = totals[m] - taken[g] - (sum(needs[j:]) if j < n else 0)
            taken[g] += total
            if total <= free:
                free -= total
            else:
                for k in range(i, j):
                    if needs[k] <= free:
                        free -= needs[k]
                    else:
                        preempts.append(entries[k][2])
            cursor[g] = j
            continue
        if head is None:
            break
        if li < n_late and head is late[li]:
            if late_need[li] <= free:
                free -= late_need[li]
            else:
                preempts.append(head[2])
            li += 1
        else:
            want = pending[head[2]].spec.requested_gpus
            if want <= free:
                starts.append((head[2], want))
                free -= want
                p += 1
            elif sized:  # past every entry of this size: (key, inf) follows (key, t, id)
                p = bisect.bisect_left(pending_order, (head[0], _AFTER_ALL), p + 1)
            else:
                p += 1
    for g, (_, entries, _) in enumerate(groups):
        preempts.extend(entry[2] for entry in entries[cursor[g] :])
    preempts.extend(entry[2] for entry in late[li:])
    return starts, preempts


class ShortestFirst(Stateless):
    """Shares stage ranking jobs by ``key``; keeps its sorted queue between decisions.

    With ``order`` (SRTF, SJF: keys whose running order only changes when a job starts,
    stops or changes rate) the delta path keeps the running jobs in a
    :class:`RunningOrder` too (see :func:`changes_by_rank`); the full path (``__call__``) is
    unchanged."""

    def __init__(
        self,
        key: RankKey,
        running: RunningKeys | None = None,
        order: RunningOrder | None = None,
        sized: bool = False,
        service: bool = False,
    ) -> None:
        self._queue = RankedQueue(key, running, by_size=service)
        self._order = order
        self._sized = sized
        """The pending key is the requested GPU count (SJF): see :func:`changes_by_rank`."""
        self._service = service
        """SRSF: the delta path walks with :func:`.service_walk.changes_by_service` (one
        group per GPU count, the pending queue split by size)."""

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Shares:
        return rigid_by_rank(view, self._queue)

    def delta(self, view: ClusterView, placement: PlacementStage) -> Delta | Decision | None:
        """The decision as changes (:func:`~..delta.delta_from_shares`): the same ranking;
        running jobs that fall out are preempted and the pending jobs that made it placed
        with the view's free-count index. None (the engine then calls ``decide``) on a view
        a delta cannot stand for, or for a subclass that decides otherwise."""
        if not delta_ready(view, placement) or type(self).__call__ is not ShortestFirst.__call__:
            return None
        stats: list[SolverStats] = []
        order = self._order
        if order is not None and order.sync(view.running, view.now, view.changed):
            if self._service:
                starts, preempts = changes_by_service(
                    view, self._queue.pending_by_size(view), order
                )
            else:
                starts, preempts = changes_by_rank(
                    view, self._queue.pending_entries(view), order, self._sized
                )
            return delta_from_changes(view, starts, preempts, placement, stats)
        return delta_from_shares(view, self(view, stats), placement, stats)


def srtf_shares() -> ShortestFirst:
    """A fresh SRTF shares stage."""
    return ShortestFirst(remaining_time, RunningKeys(service=False), RunningOrder(remaining_time))


def srsf_shares() -> ShortestFirst:
    """A fresh SRSF shares stage: the delta path keeps one running group per GPU count and
    walks them with :func:`.service_walk.changes_by_service` (round 8a)."""
    return ShortestFirst(
        remaining_service,
        RunningKeys(service=True),
        RunningOrder(remaining_service, service=True),
        service=True,
    )


POLICIES = [
    parameterless("srtf", lambda: StagedPolicy("srtf", srtf_shares(), best_fit_placement)),
    parameterless("srsf", lambda: StagedPolicy("srsf", srsf_shares(), best_fit_placement)),
]
