"""A pending queue kept sorted across decisions.

Rank-based policies (SRTF, SRSF, ...) need all active jobs in key order at every event. A pending
job's key (e.g. remaining time) is constant while it waits, so instead of re-sorting thousands of
queued jobs per event we keep them sorted and only insert newcomers and drop leavers; the set
differences run at C speed. Running jobs (at most one per GPU) are sorted afresh each time.
With the view's change set (``ClusterView.changed``) following the one of the previous sync,
only the jobs it names are looked at (every arrival, start, preemption and failure is in it),
not every pending job.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Collection, Iterator, Mapping

from gpuplan.models import ActiveJob, ClusterView

from .. import change_verify
from .size_parts import SizeParts

RankKey = Callable[[ActiveJob, float], float]
Entry = tuple[float, float, str]
RunningEntries = Callable[[Mapping[str, ActiveJob], float], list[Entry]]
"""(running jobs, now) -> their entries ``(key(job, now), submit time, id)``, ascending: a
batch form of a :data:`RankKey` that may cache per-job constants between decisions."""


class SizedOrder:
    """The pending entries split by requested GPU count, each part ascending: a walk that
    has ``free`` GPUs left reads the heads of the sizes ``<= free`` only (free GPUs only
    shrink within a decision, so a pending job too big now never fits later in it)."""

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: SizeParts[Entry] = SizeParts()

    @property
    def lists(self) -> dict[int, list[Entry]]:
        """Requested GPUs -> its pending entries, ascending (read, never edit)."""
        return self._parts.lists

    def update(
        self,
        pending: Mapping[str, ActiveJob],
        named: Collection[str],
        removed: Collection[str],
        added: list[Entry],
        order: list[Entry],
    ) -> None:
        """Follow the queue's sync: drop the ``removed`` jobs, move the kept jobs among
        ``named`` whose requested GPUs changed (a new spec) to their new size's part keeping
        their entry (the queue keys a job once), add the ``added`` entries; in verify mode
        compare with a split of the queue."""
        parts = self._parts
        for job_id in removed:
            parts.drop(job_id)
        place = parts.place
        for job_id in named:
            job = pending.get(job_id)
            if job is not None and job_id in place:
                parts.resize(job_id, job.spec.requested_gpus)
        for entry in added:
            parts.insert(entry[2], pending[entry[2]].spec.requested_gpus, entry)
        if change_verify.VERIFY:
            self.verify(order, pending)

    def verify(self, order: list[Entry], pending: Mapping[str, ActiveJob]) -> None:
        """Raise :class:`~..change_verify.ChangeSetMissed` naming a job the split holds
        otherwise than a split of the full order by each job's requested GPUs (verify
        mode)."""
        fresh: dict[int, list[Entry]] = {}
        for entry in order:
            fresh.setdefault(pending[entry[2]].spec.requested_gpus, []).append(entry)
        kept = self._parts.filled()
        if fresh != kept:
            wrong = [
                e[2]
                for n in fresh.keys() | kept.keys()
                for e in set(fresh.get(n, [])) ^ set(kept.get(n, []))
            ]
            raise change_verify.missed("pending (per-size order)", wrong or ["?"])


class RankedQueue:
    """Pending jobs sorted by ``(key, submit_time, id)``; running jobs merged in on demand."""

    def __init__(
        self,
        key: RankKey,
        running_entries: RunningEntries | None = None,
        by_size: bool = False,
    ) -> None:
        self.key = key
        self._running_entries = running_entries
        """Batch keying of the running jobs (same keys as ``key``), when the policy has one."""
        self._entry: dict[str, Entry] = {}
        self._order: list[Entry] = []
        self._sizes: SizedOrder | None = SizedOrder() if by_size else None
        """``by_size`` (SRSF's walk): the pending entries split by requested GPUs too."""
        self._seen: tuple[int, int] | None = None
        """``(stream, seq)`` of the change set of the last sync (None: none)."""

    def _sync(self, view: ClusterView) -> None:
        pending = view.pending
        entries = self._entry
        changed = view.changed
        if changed is not None and changed.follows(self._seen):
            # Membership only changes for named jobs (a job's key is read when it enters).
            jobs = changed.jobs
            removed = [j for j in jobs if j in entries and j not in pending]
            added = [j for j in jobs if j in pending and j not in entries]
            named: Collection[str] = jobs
            if change_verify.VERIFY:
                left_out = [j for j in (entries.keys() ^ pending.keys()) if j not in jobs]
                if left_out:
                    raise change_verify.missed("pending", left_out)
        else:
            removed = entries.keys() - pending.keys()  # type: ignore[assignment]
            added = pending.keys() - entries.keys()  # type: ignore[assignment]
            named = pending.keys()
        self._seen = None if changed is None else (changed.stream, changed.seq)
        if removed:
            if len(removed) > 64:
                for job_id in removed:
                    del entries[job_id]
                self._order = sorted(entries.values())
            else:
                order = self._order
                for job_id in removed:
                    entry = entries.pop(job_id)
                    del order[bisect.bisect_left(order, entry)]
        if added:
            now = view.now
            key = self.key
            new = []
            for job_id in added:
                job = pending[job_id]
                entry = (key(job, now), job.spec.submit_time, job_id)
                entries[job_id] = entry
                new.append(entry)
            if len(new) > 64:
                self._order = sorted(self._order + new)
            else:
                for entry in new:
                    bisect.insort(self._order, entry)
        if self._sizes is not None:
            self._sizes.update(pending, named, removed, [entries[j] for j in added], self._order)

    def pending_entries(self, view: ClusterView) -> list[Entry]:
        """The pending entries ascending (the queue's own list: read it, never edit it)."""
        self._sync(view)
        return self._order

    def pending_by_size(self, view: ClusterView) -> dict[int, list[Entry]]:
        """Requested GPUs -> that size's pending entries ascending (``by_size`` queues only;
        the queue's own lists: read them, never edit them)."""
        self._sync(view)
        assert self._sizes is not None, "a RankedQueue made without by_size"
        return self._sizes.lists

    def entries(self, view: ClusterView) -> tuple[list[Entry], list[Entry]]:
        """``(running, pending)`` entries ``(key, submit time, id)`` of ``view``, each list
        ascending; their merge is :meth:`ranked`'s order. The pending list is the queue's own
        (read it, never edit it). For callers that merge by hand, which is cheaper per job
        than iterating :meth:`ranked`'s generators."""
        self._sync(view)
        now = view.now
        if self._running_entries is not None:
            return self._running_entries(view.running, now), self._order
        key = self.key
        # A list comprehension then an in-place sort: the running jobs are ranked on every
        # event, and a generator fed to sorted() costs a frame switch per job.
        running = [
            (key(job, now), job.spec.submit_time, job_id) for job_id, job in view.running.items()
        ]
        running.sort()
        return running, self._order

    def ranked(self, view: ClusterView) -> Iterator[ActiveJob]:
        """All active jobs of ``view`` in ascending key order (ties: submit time, id)."""
        running, order = self.entries(view)
        jobs = view.running
        pending = view.pending
        for _, _, job_id in heapq.merge(running, order):
            yield jobs.get(job_id) or pending[job_id]
