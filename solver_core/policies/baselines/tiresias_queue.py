"""Tiresias-L's waiting queue: jobs in rank order, bucketed by rigid size, kept across decisions.

A module of its own because it changes with the engine's change set (what a decision reads of
the pending jobs), not with the policy's queue rules (:mod:`.tiresias`) or its running side
(:mod:`.tiresias_running`); Tiresias-L and the max-GPU variants (:mod:`.max_gpus`) share it.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable

from gpuplan.models import ActiveJob, ClusterView

from ... import change_verify
from ...policy import Shares

SizeFn = Callable[[ActiveJob, int], int]
"""A job's rigid size under a GPU limit (the queue buckets by it)."""

Entry = tuple  # sortable; the last element is the job id


class SizedQueue:
    """Waiting jobs in rank order, bucketed by their rigid size (fixed when the job is queued).

    Like :class:`~.ranked_queue.RankedQueue` the order is kept across decisions (newcomers
    inserted, leavers removed) because a waiting job's entry is static. Keeping one sorted list
    per size lets :meth:`walk` skip every job that is too big without looking at it: on a busy
    cluster with big rigid jobs (the max-GPU variants) a plain walk reads hundreds of misfits
    per decision. A size is recomputed only when the job is queued again or the usable capacity
    changes, so the buckets always match the sizes the walk grants.
    """

    def __init__(self, entry_of: Callable[[ActiveJob, float], Entry], size: SizeFn) -> None:
        self.entry_of = entry_of
        self.size = size
        self.entries: dict[str, Entry] = {}
        self.sizes: dict[str, int] = {}
        self.buckets: dict[int, list[Entry]] = {}
        self._capacity: int | None = None
        self._seen: tuple[int, int] | None = None
        """``(stream, seq)`` of the change set of the last sync (None: none)."""

    def __contains__(self, job_id: str) -> bool:
        return job_id in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def insert(self, job: ActiveJob, entry: Entry, capacity: int) -> None:
        job_id = job.spec.id
        size = self.size(job, capacity)
        self.entries[job_id] = entry
        self.sizes[job_id] = size
        bisect.insort(self.buckets.setdefault(size, []), entry)

    def remove(self, job_id: str) -> None:
        entry = self.entries.pop(job_id)
        bucket = self.buckets[self.sizes.pop(job_id)]
        del bucket[bisect.bisect_left(bucket, entry)]

    def _rebuild(self) -> None:
        buckets: dict[int, list[Entry]] = {}
        for job_id, entry in self.entries.items():
            buckets.setdefault(self.sizes[job_id], []).append(entry)
        for bucket in buckets.values():
            bucket.sort()
        self.buckets = buckets

    def _membership(self, view: ClusterView) -> tuple[set[str], set[str]]:
        """(queued jobs no longer pending, pending jobs not queued). With the view's change
        set following the one of the previous sync only the jobs it names are looked at
        (membership changes only for a job that arrived, started, was preempted, finished or
        failed, and each of those is in the set): the cost follows the jobs an event touched,
        not the queue's length. Otherwise (first sync, a skipped view, an executor that
        reports no changes) the set differences over the whole queue."""
        pending, entries = view.pending, self.entries
        changed = view.changed
        seen, self._seen = self._seen, (None if changed is None else (changed.stream, changed.seq))
        if changed is None or not changed.follows(seen):
            return entries.keys() - pending.keys(), pending.keys() - entries.keys()
        return self._changed_membership(view, changed.jobs)

    def _changed_membership(
        self, view: ClusterView, jobs: frozenset[str]
    ) -> tuple[set[str], set[str]]:
        """:meth:`_membership` from the change set's ``jobs`` alone (verified against the
        full set differences in verify mode)."""
        pending, entries = view.pending, self.entries
        removed = {j for j in jobs if j in entries and j not in pending}
        added = {j for j in jobs if j in pending and j not in entries}
        if change_verify.VERIFY:
            left_out = [j for j in (entries.keys() ^ pending.keys()) if j not in jobs]
            if left_out:
                raise change_verify.missed("waiting", left_out)
        return removed, added

    def sync(self, view: ClusterView) -> tuple[set[str], list[str]]:
        """Follow ``view.pending``; returns (removed ids, added ids in submit order)."""
        pending, entries, sizes = view.pending, self.entries, self.sizes
        capacity = view.capacity
        removed, new = self._membership(view)
        added = sorted(new, key=lambda j: (pending[j].spec.submit_time, j))
        rebuild = capacity != self._capacity or len(removed) + len(added) > 64
        if rebuild:
            for job_id in removed:
                del entries[job_id]
                del sizes[job_id]
        else:
            for job_id in removed:
                self.remove(job_id)
        if capacity != self._capacity:
            self._capacity = capacity
            for job_id in entries:
                sizes[job_id] = self.size(pending[job_id], capacity)
        now = view.now
        for job_id in added:
            job = pending[job_id]
            if rebuild:
                entries[job_id] = self.entry_of(job, now)
                sizes[job_id] = self.size(job, capacity)
            else:
                self.insert(job, self.entry_of(job, now), capacity)
        if rebuild:
            self._rebuild()
        return removed, added

    def walk(self, running: list[tuple[Entry, int]], capacity: int) -> Shares:
        """:func:`rigid_walk` over the running jobs (``(entry, size)``, any order) merged with
        the queue, in entry order. A k-way merge of the size buckets that still fit: a bucket
        whose next job does not fit is dropped for good (free GPUs only shrink), so the cost is
        O((grants + sizes) log sizes), independent of how many jobs wait."""
        run_buckets: dict[int, list[Entry]] = {}
        for entry, size in running:
            run_buckets.setdefault(size, []).append(entry)
        heap: list[tuple[Entry, int, int, list[Entry]]] = []
        for buckets in (self.buckets, run_buckets):
            for size, bucket in buckets.items():
                if bucket and 0 < size <= capacity:
                    if buckets is run_buckets:
                        bucket.sort()
                    heap.append((bucket[0], size, 0, bucket))
        heapq.heapify(heap)
        free = capacity
        shares: Shares = {}
        while heap:
            entry, size, i, bucket = heapq.heappop(heap)
            if size > free:
                continue
            shares[entry[-1]] = size
            free -= size
            if free == 0:
                break
            if i + 1 < len(bucket):
                heapq.heappush(heap, (bucket[i + 1], size, i + 1, bucket))
        return shares
