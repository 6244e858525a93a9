"""Pending jobs split by requested GPU count, each part kept sorted: the container under
fifo-backfill's :class:`~.size_buckets.SizeBuckets` (parts in queue order) and SRSF's
:class:`~.ranked_queue.SizedOrder` (parts in rank order).

Why split by size: a walk that starts jobs while free GPUs only shrink never starts a job too
big for what is left, so it need only read the heads of the parts whose size fits; at overload
most of the queue is such jobs. What differs between the two users is the order inside a part
(the item's leading fields: a queue sequence number, or a rank key) and how they follow the
queue; inserting, dropping and re-sizing a job is this class.
"""

from __future__ import annotations

import bisect
from typing import Generic, TypeVar

Item = TypeVar("Item", bound=tuple)  # type: ignore[type-arg]
"""A part's entry: a tuple ordered by its leading fields, the job id last (unique)."""


class SizeParts(Generic[Item]):
    """Requested GPUs -> that size's items, ascending; each job in exactly one part."""

    __slots__ = ("lists", "place")

    def __init__(self) -> None:
        self.lists: dict[int, list[Item]] = {}
        """Requested GPUs -> its part (read, never edit)."""
        self.place: dict[str, tuple[int, Item]] = {}
        """Job -> (its requested GPUs, its item)."""

    @classmethod
    def of(
        cls, lists: dict[int, list[Item]], place: dict[str, tuple[int, Item]]
    ) -> SizeParts[Item]:
        """Parts built in one pass by the caller (each list already ascending, ``place``
        naming every item's job): a rebuild from scratch without one insert per job."""
        parts = cls()
        parts.lists, parts.place = lists, place
        return parts

    def insert(self, job_id: str, need: int, item: Item) -> None:
        """Put ``item`` in the part of size ``need`` (appended when it sorts last, the usual
        case for a queue's newcomer; else bisected in)."""
        self.place[job_id] = (need, item)
        part = self.lists.get(need)
        if part is None:
            self.lists[need] = part = []
        if not part or part[-1] < item:
            part.append(item)
        else:
            bisect.insort(part, item)

    def drop(self, job_id: str) -> None:
        """Take the job out of its part."""
        need, item = self.place.pop(job_id)
        part = self.lists[need]
        del part[bisect.bisect_left(part, item)]

    def resize(self, job_id: str, need: int) -> None:
        """Move a job whose request changed (a new spec) to its new size's part, keeping its
        item (its place in the order)."""
        old_need, item = self.place[job_id]
        if old_need != need:
            self.drop(job_id)
            self.insert(job_id, need, item)

    def filled(self) -> dict[int, list[Item]]:
        """The non-empty parts (what a rebuild from scratch would hold), for verify modes."""
        return {need: part for need, part in self.lists.items() if part}
