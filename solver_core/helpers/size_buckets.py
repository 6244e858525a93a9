"""Pending jobs split by requested GPU count, each part in queue order (issue 28 item 1).

FIFO with backfill walks the pending queue in order and starts every job that fits the GPUs
still free. At overload the queue holds thousands of jobs too big for the few GPUs a
decision has, so that walk costs O(queue) per decision. Free GPUs only shrink within a
decision, so the next job the walk starts is the earliest (in queue order) among the first
not-yet-taken jobs of the sizes that still fit: :meth:`SizeBuckets.backfill` takes exactly
those jobs in exactly that order at O(sizes) per start.

Queue order is ``view.pending``'s order: the order jobs (re-)entered the queue (the engine
appends an arrival, a preempted or a failed job at the end). Each job carries a sequence
number that grows with that order; a bucket is a list of ``(seq, id)`` ascending.

The buckets follow the view's change set (``ClusterView.changed``) like
:class:`~.ranked_queue.RankedQueue`: when it follows the one of the previous sync only the
jobs it names are read. A named job that left the queue is dropped; the named jobs still
pending that re-entered the queue since (they sit after every job the set does not name) are
found by walking the queue from its end and get fresh sequence numbers in that order; a named
job that kept its place keeps its number. Otherwise (first sync, another engine, a skipped
view, an executor without a change set) the buckets are rebuilt from the whole queue. With
:data:`..change_verify.VERIFY` on every change-set sync is checked against a rebuild and
raises :class:`~..change_verify.ChangeSetMissed` naming a job whose kept place differs.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuplan.models import ActiveJob, ClusterView

from .. import change_verify
from .size_parts import SizeParts

Bucket = list[tuple[int, str]]
"""One requested size's pending jobs ``(seq, id)``, ascending (queue order)."""


class SizeBuckets:
    """``view.pending`` per requested GPU count, each bucket in queue order."""

    __slots__ = ("_next", "_parts", "_seen")

    def __init__(self) -> None:
        self._parts: SizeParts[tuple[int, str]] = SizeParts()
        """Requested GPUs -> its bucket; pending job -> (its requested GPUs, (seq, id))."""
        self._next = 0
        """The next sequence number (above every number given)."""
        self._seen: tuple[int, int] | None = None
        """``(stream, seq)`` of the change set of the last sync (None: none)."""

    @property
    def buckets(self) -> dict[int, Bucket]:
        """Requested GPUs -> its bucket (read, never edit)."""
        return self._parts.lists

    def sync(self, view: ClusterView) -> None:
        """Bring the buckets up to ``view.pending``."""
        changed = view.changed
        if changed is not None and self._seen == (changed.stream, changed.seq):
            return  # this view is synced already (a stage may ask twice per decision)
        seen, self._seen = self._seen, (None if changed is None else (changed.stream, changed.seq))
        if changed is None or not changed.follows(seen) or not self._follow(view, changed.jobs):
            self._rebuild(view.pending)
            return
        if change_verify.VERIFY:
            self._verify(view.pending)

    def _rebuild(self, pending: Mapping[str, ActiveJob]) -> None:
        buckets: dict[int, Bucket] = {}
        place: dict[str, tuple[int, tuple[int, str]]] = {}
        for seq, (job_id, job) in enumerate(pending.items()):
            need = job.spec.requested_gpus
            item = (seq, job_id)
            place[job_id] = (need, item)
            bucket = buckets.get(need)
            if bucket is None:
                buckets[need] = bucket = []
            bucket.append(item)
        self._parts, self._next = SizeParts.of(buckets, place), len(place)

    def _follow(self, view: ClusterView, jobs: frozenset[str]) -> bool:
        """Apply the change set's ``jobs``; False when the queue's tail does not read as
        "unnamed jobs, then re-entered named ones" (the caller then rebuilds)."""
        pending, parts = view.pending, self._parts
        place = parts.place
        named = [j for j in jobs if j in pending]
        for job_id in jobs:
            if job_id in place and job_id not in pending:
                parts.drop(job_id)
        if not named:
            return True
        # The queue's tail back to the earliest named job, in queue order.
        wanted = len(named)
        tail: list[str] = []
        for job_id in reversed(pending):  # type: ignore[call-overload]
            tail.append(job_id)
            if job_id in jobs:
                wanted -= 1
                if wanted == 0:
                    break
        tail.reverse()
        last_unnamed = -1
        for i, job_id in enumerate(tail):
            if job_id not in jobs:
                last_unnamed = i
        for i, job_id in enumerate(tail):
            if job_id not in jobs:
                continue
            need = pending[job_id].spec.requested_gpus
            if i < last_unnamed:  # kept its place (an unnamed job follows it)
                if job_id not in place:
                    return False
                parts.resize(job_id, need)  # a new spec with another size: same place
                continue
            if job_id in place:
                parts.drop(job_id)
            parts.insert(job_id, need, (self._next, job_id))
            self._next += 1
        return True

    def _verify(self, pending: Mapping[str, ActiveJob]) -> None:
        """Raise :class:`ChangeSetMissed` naming a job whose kept place differs from a
        rebuild's (verify mode)."""
        fresh: dict[int, list[str]] = {}
        for job_id, job in pending.items():
            fresh.setdefault(job.spec.requested_gpus, []).append(job_id)
        kept = {n: [j for _, j in b] for n, b in self._parts.filled().items()}
        wrong = [j for j in self._parts.place if j not in pending]
        for need in fresh.keys() | kept.keys():
            want, have = fresh.get(need, []), kept.get(need, [])
            if want != have:
                diff = [b for a, b in zip(want, have, strict=False) if a != b]  # kept side
                extra = want[len(have) :] + have[len(want) :]
                wrong.append((diff + extra)[0])
        if wrong:
            raise change_verify.missed("pending (per-size buckets)", wrong)

    def backfill(self, free: int) -> list[tuple[str, int]]:
        """The jobs a walk of the queue in order starts with ``free`` GPUs, taking every job
        that fits what is left, as ``(id, requested GPUs)`` in that order: repeatedly the
        earliest head among the buckets whose size still fits."""
        starts: list[tuple[str, int]] = []
        if free <= 0:
            return starts
        heads = [[need, bucket, 0] for need, bucket in self._parts.lists.items() if bucket]
        while True:
            best = None
            best_seq = 0
            for head in heads:
                need, bucket, i = head
                if need <= free and i < len(bucket) and (best is None or bucket[i][0] < best_seq):
                    best, best_seq = head, bucket[i][0]
            if best is None:
                return starts
            need, bucket, i = best
            starts.append((bucket[i][1], need))
            best[2] = i + 1
            free -= need
            if free == 0:
                return starts
